import Foundation

extension UUID {
    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// The UUID in its canonical lowercase form (`6f1c…-…`), as the wire and the stores write
    /// it. Formats the 16 bytes directly (Foundation's `uuidString` goes through `sprintf`).
    public var lowercased: String {
        String(unsafeUninitializedCapacity: 36) { writeLowercased(into: $0) }
    }

    /// Writes the canonical lowercase form's 36 bytes at the start of `buffer` (which holds at
    /// least 36) and returns 36.
    public func writeLowercased(into buffer: UnsafeMutableBufferPointer<UInt8>) -> Int {
        withUnsafeBytes(of: uuid) { bytes in
            var out = 0
            for (index, byte) in bytes.enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    buffer[out] = UInt8(ascii: "-")
                    out += 1
                }
                buffer[out] = Self.hexDigits[Int(byte >> 4)]
                buffer[out + 1] = Self.hexDigits[Int(byte & 0x0F)]
                out += 2
            }
            return out
        }
    }
}

extension UUID {
    /// Parses the canonical 8-4-4-4-12 form, hex digits in either case (what `UUID(uuidString:)`
    /// accepts), without going through `sscanf`.
    public init?(canonical text: String) {
        let utf8 = text.utf8
        guard utf8.count == 36 else { return nil }
        let parsed: uuid_t? = utf8.withContiguousStorageIfAvailable { Self.parse($0) } ?? Self.parse(Array(utf8))
        guard let parsed else { return nil }
        self.init(uuid: parsed)
    }

    private static func parse(_ bytes: some RandomAccessCollection<UInt8>) -> uuid_t? {
        func nibble(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var result: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var out = 0
        var index = bytes.startIndex
        var position = 0
        while index != bytes.endIndex {
            if position == 8 || position == 13 || position == 18 || position == 23 {
                guard bytes[index] == UInt8(ascii: "-") else { return nil }
                index = bytes.index(after: index)
                position += 1
                continue
            }
            let next = bytes.index(after: index)
            guard next != bytes.endIndex, let high = nibble(bytes[index]), let low = nibble(bytes[next]) else {
                return nil
            }
            guard out < 16 else { return nil }
            withUnsafeMutableBytes(of: &result) { $0[out] = high << 4 | low }
            out += 1
            index = bytes.index(after: next)
            position += 2
        }
        guard out == 16 else { return nil }
        return result
    }
}
