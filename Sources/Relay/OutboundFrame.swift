import EventStream
import NIOCore

/// Builds the daemon's frames. Every frame ends with `\n`; the WebSocket transport drops it.
enum OutboundFrame {
    static func buffer(_ writer: JSONWriter) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(writer.bytes.count + 1)
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
        var writer = JSONWriter(capacity: 128 + bodyCount(body))
        writer.beginObject()
        if let seq { writer.field("seq", seq) }
        writer.field("type", type)
        writeCorrelation(&writer, correlation)
        if let session { writer.field("session", session) }
        if let mark {
            writer.field("mid", mark.mid)
            if let appliedSeq = mark.appliedSeq {
                writer.field("duplicate", true)
                writer.field("applied_seq", appliedSeq)
            }
        }
        switch body {
        case .payload(let bytes):
            writer.key("payload")
            writer.raw(bytes)
        case .error(let bytes):
            writer.key("error")
            writer.raw(bytes)
        }
        writer.endObject()
        return buffer(writer)
    }

    private static func bodyCount(_ body: EncodedBody) -> Int {
        switch body {
        case .payload(let bytes), .error(let bytes): return bytes.count
        }
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
