import EventStream
import NIOCore
import Testing

@testable import Relay

/// `ClientFrame.parse` reads most frames with `JSONValue.parse` and the rest with JSONDecoder;
/// whichever way, its fields are those JSONDecoder's reading (`decoded(from:)`) gives.
@Suite struct ClientFrameTests {
    private static let long = String(repeating: "x", count: 64)
    /// 64 characters of two scalars each (e + U+0301).
    private static let accented = String(repeating: "\u{E9}", count: 64)

    /// Frames the fast parser reads itself.
    static let plainFrames = [
        #"{"type":"RequestToggleCompleteTodoViewModel","id":7,"payload":{"todo":{"id":"x","version":3}}}"#,
        #"{"op":"subscribe","types":["Response*","*"],"id":"a"}"#,
        #"{"op":"subscribe","types":[],"id":-9223372036854775808}"#,
        #"{"op":"resume","epoch":"e","after":12}"#,
        #"{"op":"resume","epoch":"e","after":0,"id":9223372036854775807}"#,
        #"{"op":"auth","token":"s3cret","mid":"m"}"#,
        "  {\"op\":\"ping\"}\r\n\t ",
        "{}",
        // Present but of the wrong type, or null: invalid.
        #"{"type":null,"op":5,"id":null,"mid":null,"types":null,"token":null,"epoch":null,"after":null}"#,
        #"{"type":true,"op":{},"id":true,"mid":7,"types":"x","token":[],"epoch":1,"after":"1"}"#,
        #"{"types":["a",1],"after":-1,"id":[],"mid":{"a":1}}"#,
        #"{"types":[null],"id":{},"mid":["m"]}"#,
        // Strings of characters, not bytes or scalars.
        #"{"id":"","mid":""}"#,
        "{\"id\":\"\(long)\",\"mid\":\"\(long)\"}",
        "{\"id\":\"\(long)x\",\"mid\":\"\(long)x\"}",
        "{\"id\":\"\(accented)\",\"mid\":\"\(accented)\"}",
        "{\"id\":\"\(accented)e\",\"mid\":\"e\(accented)\"}",
        "{\"type\":\"Caf\u{E9} \u{1F600}\",\"id\":\"\u{1F1EB}\u{1F1F7}\"}",
        // Unknown fields are ignored, however deep.
        #"{"op":"ping","extra":{"deep":[1,{"a":null,"b":[true,false]}]},"more":[[[]]]}"#,
    ]

    /// Frames left to JSONDecoder: escapes, numbers other than Int64 integers, duplicate keys,
    /// nesting beyond the limit, not JSON at all, or not an object.
    static let otherFrames = [
        #"{"type":"Request\u0054odoViewModels","id":"a\"b"}"#,
        #"{"op":"ping","id":"\n"}"#,
        #"{"op":"ping","id":1.5}"#,
        #"{"op":"ping","id":1.0}"#,
        #"{"op":"ping","id":1e3}"#,
        #"{"op":"ping","id":-0}"#,
        #"{"op":"ping","id":9223372036854775808}"#,
        #"{"op":"resume","epoch":"e","after":18446744073709551615}"#,
        #"{"op":"resume","epoch":"e","after":-0}"#,
        #"{"op":"resume","epoch":"e","after":2.0}"#,
        #"{"op":"resume","epoch":"e","after":18446744073709551616}"#,
        #"{"type":"A","type":"B"}"#,
        #"{"op":"ping","id":1,"id":"x"}"#,
        #"{"op":"ping","x":{"a":1,"a":2}}"#,
        "{\"op\":\"ping\",\"x\":" + String(repeating: "[", count: 80) + String(repeating: "]", count: 80) + "}",
        "\u{FEFF}{\"op\":\"ping\"}",
        #"{"op":"ping"} x"#,
        #"{"op":"ping"}{}"#,
        #"{"op":"ping""#,
        #"{"op":"ping",}"#,
        #"{"op":"ping","x":[1,]}"#,
        #"{"op":"ping","x":"\q"}"#,
        #"{"op":"ping","x":01}"#,
        "{\"op\":\"ping\",\"x\":\"\t\"}",
        "",
        "[1]",
        #""x""#,
        "5",
        "null",
    ]

    @Test(arguments: plainFrames)
    func readsPlainFramesItselfAsJSONDecoderDoes(_ text: String) throws {
        let bytes = Array(text.utf8)
        let parsed = try #require(ClientFrame.parse(bytes))
        #expect(parsed.root != nil, "read by JSONDecoder, not by JSONValue.parse")
        #expect(parsed.frame == ClientFrame.decoded(from: bytes))
    }

    @Test(arguments: otherFrames)
    func leavesOtherFramesToJSONDecoder(_ text: String) {
        let bytes = Array(text.utf8)
        let parsed = ClientFrame.parse(bytes)
        #expect(parsed?.root == nil)
        #expect(parsed?.frame == ClientFrame.decoded(from: bytes))
    }

    /// What JSONDecoder reads though it is not JSON is no frame (`invalid_json`).
    @Test(arguments: [
        #"{"op":"ping",}"#, #"{"op":"ping","x":[1,]}"#, #"{"op":"ping","x":"\q"}"#, #"{"op":"ping","x":01}"#,
        "{\"op\":\"ping\",\"x\":\"\t\"}", "{\"op\":\"pi\u{1}ng\"}",
    ])
    func whatIsNotJSONIsNoFrame(_ text: String) {
        #expect(ClientFrame.parse(Array(text.utf8)) == nil)
    }

    @Test func readsEachFieldWithItsRules() throws {
        let frame = try #require(
            ClientFrame.parse(
                Array(
                    #"{"type":"T","id":"\#(Self.accented)","mid":"m","types":["a"],"after":5,"token":7,"op":null}"#.utf8
                )
            )?.frame
        )
        #expect(frame.type == .value("T"))
        #expect(frame.op == .invalid)
        #expect(frame.id == .value(.string(Self.accented)))
        #expect(frame.mid == .value("m"))
        #expect(frame.types == .value(["a"]))
        #expect(frame.after == .value(5))
        #expect(frame.token == .invalid)
        #expect(frame.epoch == .absent)
        let negative = try #require(ClientFrame.parse(Array(#"{"after":-1,"id":-3,"mid":""}"#.utf8))?.frame)
        #expect(negative.after == .invalid)
        #expect(negative.id == .value(.integer(-3)))
        #expect(negative.mid == .invalid)
    }

    /// An integer id that fits 64 bits is one however it is written, also where a Double cannot
    /// hold it (near ±2^63): its decimal digits decide.
    @Test(arguments: [
        ("9223372036854775807.0", CorrelationID.integer(.max)),
        ("9223372036854775807e0", .integer(.max)),
        ("9223372036854775800.0", .integer(9_223_372_036_854_775_800)),
        ("-9223372036854775808.0", .integer(.min)),
        ("-9.223372036854775808e18", .integer(.min)),
        ("92233720368547758.07e2", .integer(.max)),
        ("1000e-3", .integer(1)),
    ])
    func integerIDsNearTheLimitsAreReadExactly(_ text: String, _ expected: CorrelationID) throws {
        let frame = try #require(ClientFrame.parse(Array(#"{"op":"ping","id":\#(text)}"#.utf8))?.frame)
        #expect(frame.id == .value(expected))
    }

    /// A number whose value is not an integer is no id, however close to one a Double reads it
    /// (JSONDecoder's own integer decoding took `1.0000000000000000001` for 1 and `1e-400` for
    /// 0, so two ids were answered with the same `re`).
    @Test(arguments: [
        "9223372036854775808.0", "-9223372036854775809.0", "9.3e18", "1.5", "5e-1", "1e400",
        "1.0000000000000000001", "1e-400", "-1e-400", "0.000000000000000000001", "4.0000000000000000000001e0",
    ])
    func numbersThatAreNotInt64IntegersAreNotIDs(_ text: String) throws {
        let frame = try #require(ClientFrame.parse(Array(#"{"op":"ping","id":\#(text)}"#.utf8))?.frame)
        #expect(frame.id == .invalid)
    }

    /// `after` is read exactly too: `1e-400` is not 0.
    @Test(arguments: ["1e-400", "0.0000000000000000001", "2.0000000000000000001", "1e400", "-1"])
    func afterThatIsNotAnExactIntegerIsInvalid(_ text: String) throws {
        let frame = try #require(ClientFrame.parse(Array(#"{"op":"resume","epoch":"e","after":\#(text)}"#.utf8))?.frame)
        #expect(frame.after == .invalid)
    }

    /// 1–64 characters, counted as Unicode scalars: one grapheme of 65 scalars is too long, 64
    /// emoji (each one scalar, four bytes) are not. Both parsers agree.
    @Test func identifiersAreCountedInUnicodeScalars() throws {
        let combined = "a" + String(repeating: "\u{301}", count: 64)
        let emoji = String(repeating: "\u{1F600}", count: 64)
        for escaped in [false, true] {
            func frame(_ value: String) throws -> ClientFrame {
                let text = escaped ? value.utf16.map { String(format: "\\u%04x", $0) }.joined() : value
                let json = #"{"op":"ping","id":"\#(text)","mid":"\#(text)"}"#
                let bytes = Array(json.utf8)
                #expect(ClientFrame.parse(bytes)?.frame == ClientFrame.decoded(from: bytes))
                return try #require(ClientFrame.parse(bytes)?.frame)
            }
            #expect(try frame(combined).id == .invalid)
            #expect(try frame(combined).mid == .invalid)
            #expect(
                try frame(String(combined.unicodeScalars.dropLast())).id
                    == .value(.string(String(combined.unicodeScalars.dropLast())))
            )
            #expect(try frame(emoji).id == .value(.string(emoji)))
            #expect(try frame(emoji).mid == .value(emoji))
            #expect(try frame(emoji + "x").id == .invalid)
        }
    }
}

@Suite struct FrameUTF8Tests {
    @Test func asciiAndUTF8AreValidWhereverTheirBytesFall() {
        #expect(isValidUTF8([]))
        #expect(isValidUTF8(Array("{\"type\":\"RequestTodoViewModels\"}".utf8)))
        // A multi-byte character in the first word, across a word boundary, and in the tail.
        for text in ["é{\"a\":1}", "{\"a\":\"1234é\"}", "{\"title\":\"ok\"}ü", "日本語のタイトル"] {
            #expect(isValidUTF8(Array(text.utf8)), "\(text)")
        }
    }

    @Test func invalidUTF8IsRefusedWhereverItsBytesFall() {
        let ascii = Array("{\"title\":\"abcdefgh\"}".utf8)
        for position in [0, 7, 8, 15, ascii.count - 1] {
            var bytes = ascii
            bytes[position] = 0xFF
            #expect(!isValidUTF8(bytes), "0xFF at \(position)")
        }
        // A lead byte without its continuation, at the very end.
        #expect(!isValidUTF8(ascii + [0xC3]))
        // An overlong encoding of "/".
        #expect(!isValidUTF8(ascii + [0xC0, 0xAF]))
    }

    /// A WebSocket message's text is checked in its buffer, from its reader index on: the
    /// same answers as for its bytes.
    @Test func aBufferGetsTheSameAnswersFromItsReadableBytes() {
        let samples: [[UInt8]] = [
            [], Array("{\"a\":\"12345678\"}".utf8), Array("日本語のタイトル".utf8), Array("{\"a\":1}".utf8) + [0xFF],
            Array("{\"title\":\"abcdefgh\"}".utf8) + [0xC3], [0xC0, 0xAF],
        ]
        for bytes in samples {
            var buffer = ByteBuffer(bytes: [0xFF, 0xFE] + bytes)
            buffer.moveReaderIndex(forwardBy: 2)
            #expect(isValidUTF8(buffer) == isValidUTF8(bytes), "\(bytes)")
        }
        #expect(!isValidUTF8(ByteBuffer(bytes: [0x7B, 0xFF])))
    }
}
