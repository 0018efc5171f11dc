import NIOCore

/// A client of redis-server speaking RESP. A subscribed connection reads pushes as lines:
/// `*3`, `$7`, `message`, `$5`, `bench`, `$400`, then the payload line (`@…`).
final class RedisConnection: LineConnection {
    /// Requesters subscribe to a channel of their own ...
    var requestChannel = "r.0"
    /// ... and publish to it through this second connection on the same loop.
    var partner: RedisConnection?

    override func didConnect() {
        switch mode {
        case .subscriber, .slowSubscriber: send("SUBSCRIBE \(settings.subject)\r\n")
        case .requester: send("SUBSCRIBE \(requestChannel)\r\n")
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
            if !isReady, mode == .subscriber || mode == .slowSubscriber || mode == .requester { markReady() }
        case UInt8(ascii: "+"):
            if line.hasPrefix("+PONG") { markReady() }
        case UInt8(ascii: "-"):
            stats.countError("redis: " + String(decoding: line.prefix(80), as: UTF8.self))
            if !isReady { failSetup("redis setup failed") }
        default:
            break
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
        guard let partner else { return }
        partner.send(publishCommand(channel: requestChannel, time: time, seq: id))
        partner.flushIfNeeded()
    }
}
