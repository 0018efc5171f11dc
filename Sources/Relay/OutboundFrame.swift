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
        // Written straight into the frame's buffer, sized once, with plain copies through one
        // pointer (a `ByteBuffer` write per piece checked the buffer's size, uniqueness and
        // exclusive access each time: 1.2 % of the daemon's samples under 64 clients saving
        // edits). The encoded body is copied once (an array's elements one by one, never joined
        // first). The strings come from the catalog, the client or the journal, so each is
        // escaped where it needs it (`JSONText`).
        let type = JSONText(type)
        var re: JSONText?
        switch correlation {
        case .string(let text)?: re = JSONText(text)
        case .integer(let number)?: re = .number(String(number))
        case nil: re = nil
        }
        let session = session.map(JSONText.init)
        let mid = mark.map { JSONText($0.mid) }
        let seq = seq.map { JSONText.number(String($0)) }
        let appliedSeq = mark?.appliedSeq.map { JSONText.number(String($0)) }
        // Keys and punctuation take at most 96 bytes.
        let capacity =
            96 + bodyBytes + type.byteCount + (re?.byteCount ?? 0) + (session?.byteCount ?? 0)
            + (mid?.byteCount ?? 0) + (seq?.byteCount ?? 0) + (appliedSeq?.byteCount ?? 0)
        var buffer = ByteBufferAllocator().buffer(capacity: capacity)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: capacity) { raw in
            guard let base = raw.baseAddress else { return 0 }
            var out = RawOutput(base: base)
            out.put("{")
            if let seq {
                out.put("\"seq\":")
                out.put(seq)
                out.put(",")
            }
            out.put("\"type\":", type)
            out.put(",\"re\":", re)
            out.put(",\"session\":", session)
            // A mark's applied seq comes with its mid.
            out.put(",\"mid\":", mid)
            out.put(",\"duplicate\":true,\"applied_seq\":", appliedSeq)
            out.put(bodyKey)
            switch body {
            case .payload(let bytes), .error(let bytes):
                bytes.withUnsafeBytes { out.put($0) }
            case .array(let elements):
                out.put("[")
                // By index over the array's storage, as `arrayBytes` counts them.
                elements.withUnsafeBufferPointer { elements in
                    for index in elements.indices {
                        if index > 0 { out.put(",") }
                        elements[index].withUnsafeBytes { out.put($0) }
                    }
                }
                out.put("]")
            }
            out.put("}\n")
            return out.count
        }
        return buffer
    }

    /// A string as a frame writes it: its UTF-8 between quotes when none of its bytes needs an
    /// escape (the usual case), else as `JSONWriter` escapes it; or a number's digits.
    private enum JSONText {
        case plain(String)
        case escaped([UInt8])
        case number(String)

        init(_ text: String) {
            var text = text
            if text.withUTF8(JSONWriter.needsNoEscape) {
                self = .plain(text)
            } else {
                var writer = JSONWriter(capacity: text.utf8.count + 16)
                writer.string(text)
                self = .escaped(writer.bytes)
            }
        }

        /// The bytes it takes in the frame.
        var byteCount: Int {
            switch self {
            case .plain(let text): text.utf8.count + 2
            case .escaped(let bytes): bytes.count
            case .number(let digits): digits.utf8.count
            }
        }
    }

    /// Copies into memory sized beforehand, counting what it wrote.
    private struct RawOutput {
        let base: UnsafeMutableRawPointer
        var count = 0

        mutating func put(_ bytes: UnsafeRawBufferPointer) {
            guard let source = bytes.baseAddress, bytes.count > 0 else { return }
            (base + count).copyMemory(from: source, byteCount: bytes.count)
            count += bytes.count
        }

        mutating func put(_ text: StaticString) {
            text.withUTF8Buffer { put(UnsafeRawBufferPointer($0)) }
        }

        /// `key` and `value`, when there is a value.
        mutating func put(_ key: StaticString, _ value: JSONText?) {
            guard let value else { return }
            put(key)
            put(value)
        }

        mutating func put(_ text: JSONText) {
            switch text {
            case .plain(var text):
                put("\"")
                text.withUTF8 { put(UnsafeRawBufferPointer($0)) }
                put("\"")
            case .escaped(let bytes):
                bytes.withUnsafeBytes { put($0) }
            case .number(var digits):
                digits.withUTF8 { put(UnsafeRawBufferPointer($0)) }
            }
        }
    }

    /// The bytes of a JSON array of `elements`, counted by index over the array's storage (a
    /// list answer has one element per row, a thousand or more).
    static func arrayBytes(_ elements: [[UInt8]]) -> Int {
        elements.withUnsafeBufferPointer { elements in
            var total = 2 + elements.count
            for index in elements.indices { total += elements[index].count }
            return total
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

    static func stringArray(_ writer: inout JSONWriter, _ name: StaticString, _ values: [String]) {
        writer.key(name)
        writer.beginArray()
        for value in values { writer.string(value) }
        writer.endArray()
    }
}
