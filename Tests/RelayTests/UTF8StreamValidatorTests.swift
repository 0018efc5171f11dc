import NIOCore
import Testing

@testable import Relay

/// The UTF-8 check of a text message that is not kept: pieces cut anywhere, even inside a
/// character, give the answer the whole message would.
@Suite struct UTF8StreamValidatorTests {
    static let text = Array("a€𝄞é\u{0301}ü — ok".utf8)

    @Test(arguments: [1, 2, 3, 5, 7, 100])
    func textCutIntoPiecesAnywhereIsUTF8(_ pieceLength: Int) {
        var validator = UTF8StreamValidator()
        var index = 0
        while index < Self.text.count {
            let end = min(index + pieceLength, Self.text.count)
            validator.feed(ByteBuffer(bytes: Self.text[index..<end]))
            index = end
        }
        #expect(validator.isValid)
    }

    @Test(arguments: [
        ("a lone continuation byte", [0x61, 0x80] as [UInt8]),
        ("0xFF", [0xFF]),
        ("a surrogate", [0xED, 0xA0, 0x80]),
        ("an overlong slash", [0xC0, 0xAF]),
        ("past U+10FFFF", [0xF4, 0x90, 0x80, 0x80]),
        ("a character cut off at the end", [0x61, 0xE2, 0x82]),
        ("a lead byte where a continuation belongs", [0xE2, 0x82, 0xE2, 0x82, 0xAC]),
    ])
    func brokenTextIsNotUTF8InAnyPieces(_ name: String, _ bytes: [UInt8]) {
        for cut in 0...bytes.count {
            var validator = UTF8StreamValidator()
            validator.feed(ByteBuffer(bytes: bytes[..<cut]))
            validator.feed(ByteBuffer(bytes: bytes[cut...]))
            #expect(!validator.isValid, "\(name), cut at \(cut)")
        }
    }
}
