/// Appends compact JSON to a byte array: deterministic (keys in the order written), no
/// Foundation, no intermediate objects. Used to encode every outbound frame once.
public struct JSONWriter: Sendable {
    public private(set) var bytes: [UInt8]
    private var needsComma: [Bool] = []

    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    public mutating func beginObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        needsComma.append(false)
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma.removeLast()
    }

    public mutating func beginArray() {
        separate()
        bytes.append(UInt8(ascii: "["))
        needsComma.append(false)
    }

    public mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        needsComma.removeLast()
    }

    /// Writes `"name":`; the value written next belongs to it.
    public mutating func key(_ name: String) {
        separate()
        appendString(name)
        bytes.append(UInt8(ascii: ":"))
        pendingValueAfterKey = true
    }

    public mutating func string(_ value: String) {
        separate()
        appendString(value)
    }

    public mutating func integer<T: BinaryInteger>(_ value: T) {
        separate()
        bytes.append(contentsOf: String(value).utf8)
    }

    public mutating func bool(_ value: Bool) {
        separate()
        bytes.append(contentsOf: value ? Self.trueBytes : Self.falseBytes)
    }

    public mutating func null() {
        separate()
        bytes.append(contentsOf: Self.nullBytes)
    }

    /// Appends an already encoded JSON value verbatim.
    public mutating func raw(_ json: some Sequence<UInt8>) {
        separate()
        bytes.append(contentsOf: json)
    }

    public mutating func field(_ name: String, _ value: String) {
        key(name)
        string(value)
    }

    public mutating func field(_ name: String, _ value: Bool) {
        key(name)
        bool(value)
    }

    public mutating func field<T: BinaryInteger>(_ name: String, _ value: T) {
        key(name)
        integer(value)
    }

    private var pendingValueAfterKey = false

    private mutating func separate() {
        if pendingValueAfterKey {
            pendingValueAfterKey = false
            return
        }
        guard let last = needsComma.indices.last else { return }
        if needsComma[last] { bytes.append(UInt8(ascii: ",")) } else { needsComma[last] = true }
    }

    private static let trueBytes = Array("true".utf8)
    private static let falseBytes = Array("false".utf8)
    private static let nullBytes = Array("null".utf8)
    private static let hex = Array("0123456789abcdef".utf8)

    private mutating func appendString(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var text = value
        // Copies the runs that need no escaping in one go (`withUTF8` makes the text contiguous).
        text.withUTF8 { utf8 in
            var start = 0
            for index in utf8.indices {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                if index > start { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index])) }
                appendEscaped(byte)
                start = index + 1
            }
            if start < utf8.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start...])) }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func appendEscaped(_ byte: UInt8) {
        switch byte {
        case UInt8(ascii: "\""):
            bytes.append(UInt8(ascii: "\\"))
            bytes.append(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"):
            bytes.append(UInt8(ascii: "\\"))
            bytes.append(UInt8(ascii: "\\"))
        case UInt8(ascii: "\n"):
            bytes.append(UInt8(ascii: "\\"))
            bytes.append(UInt8(ascii: "n"))
        case UInt8(ascii: "\r"):
            bytes.append(UInt8(ascii: "\\"))
            bytes.append(UInt8(ascii: "r"))
        case UInt8(ascii: "\t"):
            bytes.append(UInt8(ascii: "\\"))
            bytes.append(UInt8(ascii: "t"))
        case 0..<0x20:
            bytes.append(UInt8(ascii: "\\"))
            bytes.append(UInt8(ascii: "u"))
            bytes.append(UInt8(ascii: "0"))
            bytes.append(UInt8(ascii: "0"))
            bytes.append(Self.hex[Int(byte >> 4)])
            bytes.append(Self.hex[Int(byte & 0xF)])
        default:
            bytes.append(byte)
        }
    }
}
