/// Whether bytes are one JSON text as RFC 8259 defines it (a leading byte order mark allowed,
/// as the RFC lets a parser), nested at most `maxDepth` deep: one pass, nothing allocated.
///
/// Frames that `JSONValue.parse` does not read itself (escapes, fractions, exponents, deep
/// nesting) go to Foundation's decoder, which also takes what is not JSON: trailing commas,
/// `\q`, `01`, raw control characters in strings. This check comes first, so that every such
/// frame is `invalid_json`, whichever parser would have read it.
public enum JSONValidator {
    /// Foundation's decoder's own limit.
    public static let maxDepth = 512

    public static func isValid(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBufferPointer { buffer in
            var scanner = Scanner(bytes: buffer)
            scanner.skipByteOrderMark()
            scanner.skipWhitespace()
            guard scanner.value(depth: 0) else { return false }
            scanner.skipWhitespace()
            return scanner.index == buffer.count
        }
    }

    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipByteOrderMark() {
            if bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF { index = 3 }
        }

        mutating func skipWhitespace() {
            while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { index += 1 }
        }

        private mutating func take(_ byte: UInt8) -> Bool {
            guard current == byte else { return false }
            index += 1
            return true
        }

        mutating func value(depth: Int) -> Bool {
            guard let byte = current else { return false }
            switch byte {
            case UInt8(ascii: "{"): return object(depth: depth + 1)
            case UInt8(ascii: "["): return array(depth: depth + 1)
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
            default: return false
            }
        }

        private mutating func literal(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard bytes.count - index >= count else { return false }
            for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { return false }
            index += count
            return true
        }

        private mutating func object(depth: Int) -> Bool {
            guard depth <= JSONValidator.maxDepth else { return false }
            index += 1
            skipWhitespace()
            if take(UInt8(ascii: "}")) { return true }
            while true {
                guard current == UInt8(ascii: "\""), string() else { return false }
                skipWhitespace()
                guard take(UInt8(ascii: ":")) else { return false }
                skipWhitespace()
                guard value(depth: depth) else { return false }
                skipWhitespace()
                if take(UInt8(ascii: "}")) { return true }
                guard take(UInt8(ascii: ",")) else { return false }
                skipWhitespace()
            }
        }

        private mutating func array(depth: Int) -> Bool {
            guard depth <= JSONValidator.maxDepth else { return false }
            index += 1
            skipWhitespace()
            if take(UInt8(ascii: "]")) { return true }
            while true {
                guard value(depth: depth) else { return false }
                skipWhitespace()
                if take(UInt8(ascii: "]")) { return true }
                guard take(UInt8(ascii: ",")) else { return false }
                skipWhitespace()
            }
        }

        /// `"…"` with the escapes JSON has and no raw control character; `index` is at the
        /// opening quote. (UTF-8 is checked on the whole frame before.)
        private mutating func string() -> Bool {
            index += 1
            while let byte = current {
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return true
                case UInt8(ascii: "\\"):
                    guard let escaped = current else { return false }
                    index += 1
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                        UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        continue
                    case UInt8(ascii: "u"):
                        // A UTF-16 surrogate only as half of a pair: a lone one is no character,
                        // and text that is not Unicode is no frame (as invalid UTF-8 is not).
                        guard let unit = hexUnit() else { return false }
                        if (0xDC00...0xDFFF).contains(unit) { return false }
                        if (0xD800...0xDBFF).contains(unit) {
                            guard take(UInt8(ascii: "\\")), take(UInt8(ascii: "u")), let low = hexUnit(),
                                (0xDC00...0xDFFF).contains(low)
                            else { return false }
                        }
                    default:
                        return false
                    }
                case 0..<0x20:
                    return false
                default:
                    continue
                }
            }
            return false
        }

        /// The four hex digits of a `\u` escape, as a UTF-16 code unit.
        private mutating func hexUnit() -> UInt16? {
            var unit: UInt16 = 0
            for _ in 0..<4 {
                guard let hex = current, isHexDigit(hex) else { return nil }
                index += 1
                let digit: UInt8
                switch hex {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = hex - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = hex - UInt8(ascii: "a") + 10
                default: digit = hex - UInt8(ascii: "A") + 10
                }
                unit = unit << 4 | UInt16(digit)
            }
            return unit
        }

        /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
        private mutating func number() -> Bool {
            _ = take(UInt8(ascii: "-"))
            if take(UInt8(ascii: "0")) {
                if let next = current, isDigit(next) { return false }
            } else {
                guard digits() else { return false }
            }
            if take(UInt8(ascii: ".")) {
                guard digits() else { return false }
            }
            if take(UInt8(ascii: "e")) || take(UInt8(ascii: "E")) {
                if !take(UInt8(ascii: "+")) { _ = take(UInt8(ascii: "-")) }
                guard digits() else { return false }
            }
            return true
        }

        /// One digit or more.
        private mutating func digits() -> Bool {
            let start = index
            while let byte = current, isDigit(byte) { index += 1 }
            return index > start
        }

        private func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }

        private func isHexDigit(_ byte: UInt8) -> Bool {
            isDigit(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
                || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
        }
    }
}
