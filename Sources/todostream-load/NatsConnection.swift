import NIOCore

/// A client of nats-server speaking its plain text protocol.
final class NatsConnection: LineConnection {
    /// Requesters publish to and subscribe to a subject of their own ...
    var requestSubject = "r.0"
    /// ... or, with `--publish ping`, send `PING` and wait for the server's `PONG`.
    private var pings: Bool { mode == .requester && settings.publish == .ping }

    override func handleLine(_ line: UnsafeRawBufferPointer, now: UInt64) {
        guard let first = line.first else { return }
        switch first {
        case UInt8(ascii: "@"):
            handlePeerMessage(line, now: now)
        case UInt8(ascii: "M"):
            break  // MSG header: the payload line follows.
        case UInt8(ascii: "P"):
            if line.hasPrefix("PING") {
                send("PONG\r\n")
            } else if line.hasPrefix("PONG") {
                if pings, isReady {
                    requestCompleted(id: nil, now: now, failed: false)
                } else {
                    markReady()
                }
            }
        case UInt8(ascii: "I"):
            if line.hasPrefix("INFO") { sendConnect() }
        case UInt8(ascii: "-"):
            stats.countError("nats: " + String(decoding: line.prefix(80), as: UTF8.self))
            if !isReady { failSetup("nats setup failed") }
        default:
            break  // +OK
        }
    }

    private func sendConnect() {
        var text = #"CONNECT {"verbose":false,"pedantic":false}"# + "\r\n"
        switch mode {
        case .subscriber, .slowSubscriber: text += "SUB \(settings.subject) 1\r\n"
        case .requester where !pings: text += "SUB \(requestSubject) 1\r\n"
        default: break
        }
        send(text + "PING\r\n")
    }

    private func writeMessage(subject: String, time: UInt64, seq: Int) {
        var buffer = allocator.buffer(capacity: settings.payloadBytes + 48)
        buffer.writeString("PUB \(subject) \(max(settings.payloadBytes, PeerPayload.headerBytes))\r\n")
        PeerPayload.write(into: &buffer, time: time, seq: seq, size: settings.payloadBytes)
        buffer.writeString("\r\n")
        send(buffer)
    }

    override func writePublish(id: Int, time: UInt64) {
        writeMessage(subject: settings.subject, time: time, seq: id)
    }

    override func writeRequest(id: Int, time: UInt64) {
        if pings {
            send("PING\r\n")
        } else {
            writeMessage(subject: requestSubject, time: time, seq: id)
        }
        flushIfNeeded()
    }
}
