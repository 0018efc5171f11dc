import EventStream
import NIOCore

/// Builds the daemon's frames. Every frame ends with `\n`; the WebSocket transport drops it.
enum OutboundFrame {
    static func buffer(_ writer: JSONWriter) -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: writer.bytes.count + 1)
        buffer.writeBytes(writer.bytes)
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }

    static func writeCorrelation(_ writer: inout JSONWriter, _ correlation: CorrelationID?) {
        guard let correlation else { return }
        writer.key("re")
        switch correlation {
        case .string(let text): writer.string(text)
        case .integer(let number): writer.integer(number)
        }
    }

    /// `{"seq":N,"type":T,"re":R,"mid":M,"payload":…}` or with `error` instead of `payload`;
    /// `seq`, `re` and `mid` only when given; `session` marks a monitor's copy of someone
    /// else's event; a duplicate's mark adds `"duplicate":true,"applied_seq":N` after `mid`.
    static func event(
        seq: UInt64?,
        type: String,
        correlation: CorrelationID?,
        session: String? = nil,
        mark: MutationMark? = nil,
        body: EncodedBody
    ) -> ByteBuffer {
        // The head (up to the body's key) is written apart, and the frame's buffer made once
        // from it and the body, already encoded: the body is copied once.
        var head = JSONWriter(capacity: 96 + type.utf8.count)
        head.beginObject()
        if let seq { head.field("seq", seq) }
        head.field("type", type)
        writeCorrelation(&head, correlation)
        if let session { head.field("session", session) }
        if let mark {
            head.field("mid", mark.mid)
            if let appliedSeq = mark.appliedSeq {
                head.field("duplicate", true)
                head.field("applied_seq", appliedSeq)
            }
        }
        let bytes: [UInt8]
        switch body {
        case .payload(let payload):
            head.key("payload")
            bytes = payload
        case .error(let error):
            head.key("error")
            bytes = error
        }
        var buffer = ByteBufferAllocator().buffer(capacity: head.bytes.count + bytes.count + 2)
        buffer.writeBytes(head.bytes)
        buffer.writeBytes(bytes)
        buffer.writeInteger(UInt8(ascii: "}"))
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }

    static func error(_ code: RelayErrorCode, _ message: String, correlation: CorrelationID?) -> ByteBuffer {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("op", "error")
        writeCorrelation(&writer, correlation)
        writer.key("error")
        writer.beginObject()
        writer.field("code", code.rawValue)
        writer.field("message", message)
        writer.endObject()
        writer.endObject()
        return buffer(writer)
    }

    /// `{"op":NAME,"re":R, …fields}`.
    static func op(
        _ name: String,
        correlation: CorrelationID?,
        _ fields: (inout JSONWriter) -> Void = { _ in }
    ) -> ByteBuffer {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("op", name)
        writeCorrelation(&writer, correlation)
        fields(&writer)
        writer.endObject()
        return buffer(writer)
    }

    static func stringArray(_ writer: inout JSONWriter, _ name: String, _ values: [String]) {
        writer.key(name)
        writer.beginArray()
        for value in values { writer.string(value) }
        writer.endArray()
    }
}
