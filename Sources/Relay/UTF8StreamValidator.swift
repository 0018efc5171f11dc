import NIOCore

/// Whether a text message that arrives in pieces is UTF-8, without keeping the pieces: a
/// message over `max_frame_bytes` is not kept, yet RFC 6455 §8.1 still closes 1007 when it is
/// not UTF-8. Each piece is checked up to its last whole character; the bytes of a character
/// cut by the piece's end (at most three) wait for the next piece.
struct UTF8StreamValidator: Sendable {
    private var carry: [UInt8] = []
    private var broken = false

    /// Checks the next piece of the message.
    mutating func feed(_ piece: ByteBuffer) {
        guard !broken, piece.readableBytes > 0 else { return }
        var bytes = carry
        bytes.append(contentsOf: piece.readableBytesView)
        let cut = Self.lastCut(bytes)
        if !isValidUTF8(bytes[..<cut]) { broken = true }
        carry = Array(bytes[cut...])  // at most three bytes
    }

    /// Whether the message, now complete, was UTF-8: no broken character, none cut off at its end.
    var isValid: Bool { !broken && carry.isEmpty }

    /// Where the last character that may still be incomplete begins: past the end when the
    /// last one is whole (or the bytes are not UTF-8 there anyway, which the check finds).
    static func lastCut(_ bytes: [UInt8]) -> Int {
        var index = bytes.count
        // A character is at most four bytes: its first byte is among the last four.
        while index > 0, bytes.count - index < 4 {
            index -= 1
            let byte = bytes[index]
            guard byte & 0xC0 == 0x80 else {
                let length: Int
                switch byte {
                case 0xC0...0xDF: length = 2
                case 0xE0...0xEF: length = 3
                case 0xF0...0xF7: length = 4
                default: length = 1
                }
                return bytes.count - index < length ? index : bytes.count
            }
        }
        return bytes.count
    }
}
