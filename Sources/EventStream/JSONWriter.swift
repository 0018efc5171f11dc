/// Appends compact JSON to a byte array: deterministic (keys in the order written), no
/// Foundation, no intermediate objects. Used to encode every outbound frame once.
public struct JSONWriter: Sendable {
    public private(set) var bytes: [UInt8]
    /// Open containers, and whether each already has a value (so a comma goes before the
    /// next): the outermost 64 as bits, any deeper in `deeperLevels`. No allocation for the
    /// nesting of every frame the daemon writes.
    private var depth = 0
    private var hasValueBits: UInt64 = 0
    private var deeperLevels: [Bool] = []

    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    public mutating func beginObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        open()
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        close()
    }

    public mutating func beginArray() {
        separate()
        bytes.append(UInt8(ascii: "["))
        open()
    }

    public mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        close()
    }

    /// Writes `"name":` for a name in the program's text (every key the daemon writes): its
    /// bytes are copied as they are, with no look for escapes, as a literal key of JSON never
    /// needs one (checked in debug builds). The value written next belongs to it.
    public mutating func key(_ name: StaticString) {
        separate()
        assert(Self.isPlainKey(name), "a literal key must need no escaping")
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
        pendingValueAfterKey = true
    }

    static func isPlainKey(_ name: StaticString) -> Bool {
        name.withUTF8Buffer { JSONWriter.needsNoEscape($0) }
    }

    public mutating func string(_ value: String) {
        separate()
        appendString(value)
    }

    public mutating func integer<T: BinaryInteger>(_ value: T) {
        separate()
        guard let number = Int64(exactly: value) else {
            bytes.append(contentsOf: String(value).utf8)
            return
        }
        if number < 0 { bytes.append(UInt8(ascii: "-")) }
        // Digits written in place, the last first (no intermediate string).
        var rest = number.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &digits) { buffer in
            var index = buffer.count
            repeat {
                index -= 1
                buffer[index] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: rest % 10)
                rest /= 10
            } while rest > 0
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[index...]))
        }
    }

    public mutating func bool(_ value: Bool) {
        separate()
        bytes.append(contentsOf: value ? Self.trueBytes : Self.falseBytes)
    }

    public mutating func null() {
        separate()
        bytes.append(contentsOf: Self.nullBytes)
    }

    /// Writes a string of at most `capacity` bytes that need no escaping (hex digits, a
    /// timestamp), filled in place by `fill`, which returns how many it wrote: no string is
    /// made for it.
    public mutating func unescapedString(capacity: Int, _ fill: (UnsafeMutableBufferPointer<UInt8>) -> Int) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: capacity))
        let written = bytes.withUnsafeMutableBufferPointer { buffer in
            min(max(fill(UnsafeMutableBufferPointer(rebasing: buffer[start..<start + capacity])), 0), capacity)
        }
        bytes.removeLast(capacity - written)
        bytes.append(UInt8(ascii: "\""))
    }

    /// Appends an already encoded JSON value verbatim (an array, so that it is one copy, not a
    /// generic walk over a sequence in code compiled without knowing its type).
    public mutating func raw(_ json: [UInt8]) {
        separate()
        bytes.append(contentsOf: json)
    }

    public mutating func field(_ name: StaticString, _ value: String) {
        key(name)
        string(value)
    }

    public mutating func field(_ name: StaticString, _ value: Bool) {
        key(name)
        bool(value)
    }

    public mutating func field<T: BinaryInteger>(_ name: StaticString, _ value: T) {
        key(name)
        integer(value)
    }

    private var pendingValueAfterKey = false

    private mutating func separate() {
        if pendingValueAfterKey {
            pendingValueAfterKey = false
            return
        }
        guard depth > 0 else { return }
        let level = depth - 1
        let hasValue: Bool
        if level < 64 {
            hasValue = hasValueBits & (1 << level) != 0
            hasValueBits |= 1 << level
        } else {
            hasValue = deeperLevels[level - 64]
            deeperLevels[level - 64] = true
        }
        if hasValue { bytes.append(UInt8(ascii: ",")) }
    }

    private mutating func open() {
        if depth < 64 { hasValueBits &= ~(1 << depth) } else { deeperLevels.append(false) }
        depth += 1
    }

    private mutating func close() {
        guard depth > 0 else { return }
        depth -= 1
        if depth >= 64 { deeperLevels.removeLast() }
    }

    private static let trueBytes = Array("true".utf8)
    private static let falseBytes = Array("false".utf8)
    private static let nullBytes = Array("null".utf8)
    private static let hex = Array("0123456789abcdef".utf8)

    private mutating func appendString(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var text = value
        // Copies the runs that need no escaping in one go (`withUTF8` makes the text contiguous),
        // looking at eight bytes at a time for one that needs it.
        text.withUTF8 { utf8 in
            guard let base = utf8.baseAddress else { return }
            let count = utf8.count
            var start = 0
            var index = 0
            while index < count {
                if index + 8 <= count,
                    !Self.mayNeedEscaping(UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self))
                {
                    index += 8
                    continue
                }
                let end = min(index + 8, count)
                while index < end {
                    let byte = base[index]
                    if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                        if index > start {
                            bytes.append(contentsOf: UnsafeBufferPointer(start: base + start, count: index - start))
                        }
                        appendEscaped(byte)
                        start = index + 1
                    }
                    index += 1
                }
            }
            if start < count {
                bytes.append(contentsOf: UnsafeBufferPointer(start: base + start, count: count - start))
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Whether none of `utf8`'s bytes needs an escape in a JSON string (so it can be written
    /// between quotes as it is), looked at eight bytes at a time as `string` does.
    public static func needsNoEscape(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = utf8.baseAddress else { return true }
        var index = 0
        while index + 8 <= utf8.count {
            if mayNeedEscaping(UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)) { break }
            index += 8
        }
        return !utf8[index...].contains { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
    }

    /// Whether any of the eight bytes in `word` is below 0x20, a quote or a backslash (exact:
    /// false means none is; true means look at them one by one).
    @inline(__always)
    static func mayNeedEscaping(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highBits: UInt64 = 0x8080_8080_8080_8080
        /// Bytes equal to zero have their high bit set in the result (and no byte is flagged
        /// when none is zero).
        func zeroBytes(_ value: UInt64) -> UInt64 { (value &- ones) & ~value & highBits }
        let control = (word &- ones &* 0x20) & ~word & highBits
        let quote = zeroBytes(word ^ (ones &* UInt64(UInt8(ascii: "\""))))
        let backslash = zeroBytes(word ^ (ones &* UInt64(UInt8(ascii: "\\"))))
        return (control | quote | backslash) != 0
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
