#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Small scanners over one received line, without decoding JSON: the tool only needs a few
/// fields at known places of frames whose shape the protocol fixes.
extension UnsafeRawBufferPointer {
    func hasPrefix(_ prefix: StaticString) -> Bool {
        let length = prefix.utf8CodeUnitCount
        guard count >= length else { return false }
        let bytes = prefix.utf8Start
        for index in 0..<length where self[index] != bytes[index] { return false }
        return true
    }

    /// The first index of `pattern` at or after `start` and before `limit` (`memchr`, then `memcmp`: this runs
    /// for every broadcast a subscriber receives, and the tool must cost less than the server).
    func firstIndex(of pattern: StaticString, from start: Int = 0, limit: Int = .max) -> Int? {
        let length = pattern.utf8CodeUnitCount
        let end = Swift.min(count, limit)
        guard let base = baseAddress, start >= 0, length > 0, end - start >= length else { return nil }
        let bytes = pattern.utf8Start
        var index = start
        // The pattern's first byte by memchr, the rest by memcmp.
        while end - index >= length {
            guard let found = memchr(base + index, Int32(bytes[0]), end - length + 1 - index) else { return nil }
            index = base.distance(to: UnsafeRawPointer(found))
            if memcmp(found, bytes, length) == 0 { return index }
            index += 1
        }
        return nil
    }

    /// Decimal digits starting at `start`: the value and the index after the last digit.
    func decimal(at start: Int) -> (value: UInt64, end: Int)? {
        var index = start
        var value: UInt64 = 0
        while index < count, self[index] >= 0x30, self[index] <= 0x39 {
            value = value &* 10 &+ UInt64(self[index] - 0x30)
            index += 1
        }
        return index == start ? nil : (value, index)
    }

    /// The characters of a JSON string starting right after its opening quote at `start`
    /// (no unescaping; the tool only reads error codes and its own ids).
    func quoted(at start: Int) -> String? {
        var index = start
        while index < count, self[index] != UInt8(ascii: "\"") { index += 1 }
        guard index < count else { return nil }
        return String(decoding: UnsafeRawBufferPointer(rebasing: self[start..<index]), as: UTF8.self)
    }
}

/// A random version-4 UUID in lowercase.
func randomUUID() -> String {
    var generator = SystemRandomNumberGenerator()
    var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
    bytes[6] = (bytes[6] & 0x0F) | 0x40
    bytes[8] = (bytes[8] & 0x3F) | 0x80
    let hex = bytes.map { byte -> String in
        let text = String(byte, radix: 16)
        return text.count == 1 ? "0" + text : text
    }.joined()
    let characters = Array(hex)
    return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(characters[$0]) }.joined(separator: "-")
}
