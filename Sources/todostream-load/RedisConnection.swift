import NIOCore

/// A client of redis-server speaking RESP. A subscribed connection reads pushes as lines:
/// `*3`, `$7`, `message`, `$5`, `bench`, `$400`, then the payload line (`@…`).
final class RedisConnection: LineConnection {
    /// Requesters subscribe to a channel of their own ...
    var requestChannel = "r.0"
    /// ... and publish to it through this second connection on the same loop.
    var partner: RedisConnection?
    /// Durable requesters instead send `SET key value` on this one connection and wait for
    /// its `+OK` (durable when the server runs with `--appendonly yes --appendfsync always`).
    var durableKey: String?
    /// What the server said of `appendonly` and `appendfsync` during setup (nil: not known,
    /// e.g. CONFIG renamed away).
    private(set) var appendOnly: String?
    private(set) var appendFsync: String?
    /// The CONFIG GET parameter whose value is the next line.
    private var configParameter: String?
    private var setPrefix: ByteBuffer?

    private var isDurable: Bool { mode == .requester && durableKey != nil }
    /// A requester that sends `PING` on its one connection and waits for `+PONG` (`--publish ping`).
    private var pings: Bool { mode == .requester && durableKey == nil && settings.publish == .ping }

    override func didConnect() {
        switch mode {
        case .subscriber, .slowSubscriber: send("SUBSCRIBE \(settings.subject)\r\n")
        case .requester:
            if isDurable {
                send("CONFIG GET appendonly\r\nCONFIG GET appendfsync\r\nPING\r\n")
            } else if pings {
                send("PING\r\n")
            } else {
                send("SUBSCRIBE \(requestChannel)\r\n")
            }
        case .publisher, .idle, .requestPublisher: send("PING\r\n")
        }
    }

    override func handleLine(_ line: UnsafeRawBufferPointer, now: UInt64) {
        guard let first = line.first else { return }
        switch first {
        case UInt8(ascii: "@"):
            handlePeerMessage(line, now: now)
        case UInt8(ascii: ":"):
            // The subscription count confirms SUBSCRIBE; for a publisher, the receiver count.
            if !isReady, !isDurable, mode == .subscriber || mode == .slowSubscriber || mode == .requester {
                markReady()
            }
        case UInt8(ascii: "+"):
            if line.hasPrefix("+OK") {
                if isDurable, isReady { requestCompleted(id: nil, now: now, failed: false) }
            } else if line.hasPrefix("+PONG") {
                if pings, isReady {
                    requestCompleted(id: nil, now: now, failed: false)
                } else {
                    markReady()
                }
            }
        case UInt8(ascii: "-"):
            stats.countError("redis: " + String(decoding: line.prefix(80), as: UTF8.self))
            if isDurable || pings, isReady {
                requestCompleted(id: nil, now: now, failed: true)
            } else if isDurable, line.firstIndex(of: "CONFIG") != nil || line.firstIndex(of: "config") != nil {
                // CONFIG refused or renamed away: the durability settings stay unknown.
            } else if !isReady {
                failSetup("redis setup failed")
            }
        case UInt8(ascii: "*"), UInt8(ascii: "$"):
            break
        default:
            guard isDurable, !isReady else { break }
            // The CONFIG GET replies: `*2`, `$10`, `appendonly`, `$3`, `yes`.
            let text = String(decoding: line, as: UTF8.self)
            if let parameter = configParameter {
                if parameter == "appendonly" { appendOnly = text } else { appendFsync = text }
                configParameter = nil
            } else if text == "appendonly" || text == "appendfsync" {
                configParameter = text
            }
        }
    }

    private func publishCommand(channel: String, time: UInt64, seq: Int) -> ByteBuffer {
        let size = max(settings.payloadBytes, PeerPayload.headerBytes)
        var buffer = allocator.buffer(capacity: size + 64)
        buffer.writeString("*3\r\n$7\r\nPUBLISH\r\n$\(channel.utf8.count)\r\n\(channel)\r\n$\(size)\r\n")
        PeerPayload.write(into: &buffer, time: time, seq: seq, size: size)
        buffer.writeString("\r\n")
        return buffer
    }

    override func writePublish(id: Int, time: UInt64) {
        send(publishCommand(channel: settings.subject, time: time, seq: id))
    }

    override func writeRequest(id: Int, time: UInt64) {
        if pings {
            send("PING\r\n")
            flushIfNeeded()
            return
        }
        if let durableKey {
            // SET key value, the value --payload-bytes long (it changes with every request).
            let size = max(settings.payloadBytes, PeerPayload.headerBytes)
            if setPrefix == nil {
                setPrefix = allocator.buffer(
                    string: "*3\r\n$3\r\nSET\r\n$\(durableKey.utf8.count)\r\n\(durableKey)\r\n$\(size)\r\n"
                )
            }
            var buffer = allocator.buffer(capacity: size + 64)
            buffer.writeImmutableBuffer(setPrefix!)
            PeerPayload.write(into: &buffer, time: time, seq: id, size: size)
            buffer.writeString("\r\n")
            send(buffer)
            flushIfNeeded()
            return
        }
        guard let partner else { return }
        partner.send(publishCommand(channel: requestChannel, time: time, seq: id))
        partner.flushIfNeeded()
    }
}
