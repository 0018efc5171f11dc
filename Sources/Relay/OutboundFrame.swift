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
        let bodyKey: StaticString
        let bodyBytes: Int
        switch body {
        case .payload(let payload): (bodyKey, bodyBytes) = (",\"payload\":", payload.count)
        case .error(let error): (bodyKey, bodyBytes) = (",\"error\":", error.count)
        case .array(let elements): (bodyKey, bodyBytes) = (",\"payload\":", Self.arrayBytes(elements))
        }
        // Written straight into the frame's buffer, sized once: no writer, and the encoded
        // body copied once (an array's elements one by one, never joined first). The strings
        // come from the catalog, the client or the journal, so each is escaped where it needs
        // it (`writeString`).
        var textBytes = type.utf8.count + (session?.utf8.count ?? 0) + (mark?.mid.utf8.count ?? 0)
        if case .string(let text) = correlation { textBytes += text.utf8.count }
        var buffer = ByteBufferAllocator().buffer(capacity: 128 + textBytes + bodyBytes)
        buffer.writeStaticString("{")
        if let seq {
            buffer.writeStaticString("\"seq\":")
            buffer.writeString(String(seq))
            buffer.writeStaticString(",")
        }
        buffer.writeStaticString("\"type\":")
        writeString(type, to: &buffer)
        switch correlation {
        case .string(let text)?:
            buffer.writeStaticString(",\"re\":")
            writeString(text, to: &buffer)
        case .integer(let number)?:
            buffer.writeStaticString(",\"re\":")
            buffer.writeString(String(number))
        case nil:
            break
        }
        if let session {
            buffer.writeStaticString(",\"session\":")
            writeString(session, to: &buffer)
        }
        if let mark {
            buffer.writeStaticString(",\"mid\":")
            writeString(mark.mid, to: &buffer)
            if let appliedSeq = mark.appliedSeq {
                buffer.writeStaticString(",\"duplicate\":true,\"applied_seq\":")
                buffer.writeString(String(appliedSeq))
            }
        }
        buffer.writeStaticString(bodyKey)
        switch body {
        case .payload(let bytes), .error(let bytes):
            buffer.writeBytes(bytes)
        case .array(let elements):
            buffer.writeStaticString("[")
            // By index over the array's storage, as `arrayBytes` counts them.
            elements.withUnsafeBufferPointer { elements in
                for index in elements.indices {
                    if index > 0 { buffer.writeStaticString(",") }
                    _ = elements[index].withUnsafeBufferPointer { buffer.writeBytes($0) }
                }
            }
            buffer.writeStaticString("]")
        }
        buffer.writeStaticString("}\n")
        return buffer
    }

    /// The bytes of a JSON array of `elements`, counted by index over the array's storage (a
    /// list answer has one element per row, a thousand or more).
    private static func arrayBytes(_ elements: [[UInt8]]) -> Int {
        elements.withUnsafeBufferPointer { elements in
            var total = 2 + elements.count
            for index in elements.indices { total += elements[index].count }
            return total
        }
    }

    /// Appends `text` as a JSON string: as it is when none of its bytes needs an escape (the
    /// usual case), through `JSONWriter` otherwise.
    private static func writeString(_ text: String, to buffer: inout ByteBuffer) {
        var text = text
        guard text.withUTF8(JSONWriter.needsNoEscape) else {
            var writer = JSONWriter(capacity: text.utf8.count + 16)
            writer.string(text)
            buffer.writeBytes(writer.bytes)
            return
        }
        buffer.writeStaticString("\"")
        buffer.writeString(text)
        buffer.writeStaticString("\"")
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

    static func stringArray(_ writer: inout JSONWriter, _ name: StaticString, _ values: [String]) {
        writer.key(name)
        writer.beginArray()
        for value in values { writer.string(value) }
        writer.endArray()
    }
}
