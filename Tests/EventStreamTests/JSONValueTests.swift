import Testing

@testable import EventStream

@Suite struct JSONValueTests {
    private func parse(_ text: String) -> JSONValue? { JSONValue.parse(Array(text.utf8)) }

    private func object(_ members: [(String, JSONValue)]) -> JSONValue {
        .object(JSONObject(members: members.map { JSONObject.Member(key: $0.0, value: $0.1) }))
    }

    /// `depth` arrays, one inside the other.
    private func nested(_ depth: Int) -> String {
        String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
    }

    @Test func readsEveryKindOfValue() {
        #expect(parse("null") == .null)
        #expect(parse("true") == .bool(true))
        #expect(parse("false") == .bool(false))
        #expect(parse("0") == .integer(0))
        #expect(parse("-7") == .integer(-7))
        #expect(parse("9223372036854775807") == .integer(Int64.max))
        #expect(parse("-9223372036854775808") == .integer(Int64.min))
        #expect(parse(#""""#) == .string(""))
        #expect(parse(#""a b/c""#) == .string("a b/c"))
        #expect(parse(#""é ✓ 😀""#) == .string("é ✓ 😀"))
        #expect(parse("\"\u{7F}\"") == .string("\u{7F}"))
        #expect(parse("[]") == .array([]))
        #expect(parse("[1, \"x\" ,null]") == .array([.integer(1), .string("x"), .null]))
        #expect(parse("{}") == object([]))
        #expect(
            parse(#"{"b":{"c":[true,{}]},"a":1,"":"e"}"#)
                == object([
                    ("b", object([("c", .array([.bool(true), object([])]))])), ("a", .integer(1)), ("", .string("e")),
                ])
        )
    }

    @Test func takesJSONWhitespaceAroundEveryToken() {
        #expect(
            parse(" \t\r\n{ \"a\" :\t[ 1 , 2 ] ,\r\n\"b\":null } \n\r\t ")
                == object([
                    ("a", .array([.integer(1), .integer(2)])), ("b", .null),
                ])
        )
    }

    @Test func keepsMembersInOrderAndFindsThemByKey() throws {
        let value = try #require(parse(#"{"z":1,"a":"x","m":null}"#))
        guard case .object(let members) = value else {
            Issue.record("not an object: \(value)")
            return
        }
        #expect(members.members.map(\.key) == ["z", "a", "m"])
        #expect(members["a"] == .string("x"))
        #expect(members["m"] == .null)
        #expect(members["q"] == nil)
    }

    @Test func keysCompareAsSwiftStrings() throws {
        // "é" written as e + U+0301: equal, as a Swift string (and so to JSONDecoder), to U+00E9.
        guard case .object(let members) = try #require(parse("{\"caf\u{65}\u{301}\":1}")) else {
            Issue.record("not an object")
            return
        }
        #expect(members["caf\u{E9}"] == .integer(1))
    }

    @Test func nestsUpToTheLimit() {
        #expect(parse(nested(JSONValue.maxDepth)) != nil)
        #expect(parse(nested(JSONValue.maxDepth + 1)) == nil)
        let objects =
            String(repeating: #"{"a":"#, count: JSONValue.maxDepth) + "1"
            + String(repeating: "}", count: JSONValue.maxDepth)
        #expect(parse(objects) != nil)
        #expect(parse("[" + objects + "]") == nil)
    }

    @Test(arguments: [
        // Not JSON.
        "", " ", "{", "}", "[", "[1,]", "[,1]", "[1 2]", "{\"a\"}", "{\"a\":}", "{\"a\" 1}", "{,}", "{\"a\":1,}",
        "{a:1}", "{'a':1}", "{1:1}", "tru", "nul", "True", "NULL", "'a'", "\"abc", "[\"a]", "{\"a\":1",
        "undefined", "NaN", "Infinity", "-Infinity",
        // Escapes, in values and keys.
        #""a\"b""#, #""\n""#, #""\u0041""#, #""\\""#, #""\/""#, #"{"k\u0065y":1}"#, #"{"a":"\t"}"#,
        // Control bytes inside a string.
        "\"a\u{01}\"", "\"\t\"", "\"\n\"", "\"\r\"", "\"\u{1F}\"", "{\"a\u{0}\":1}",
        // Numbers other than integers of Int64.
        "1.0", "1.5", "1e5", "1E5", "1e-5", "-0", "-0.0", "0.0", "-", "01", "-01", "00", "+1", ".5", "5.",
        "9223372036854775808", "-9223372036854775809", "18446744073709551615", "99999999999999999999",
        "[1.5]", "{\"a\":2e3}", "{\"a\":-0}",
        // A key twice, at any depth, however long the object.
        #"{"a":1,"a":2}"#, #"{"a":1,"a":1}"#, #"{"b":{"c":null,"c":null}}"#, #"[{"x":1,"y":2,"x":3}]"#,
        "{\"caf\u{E9}\":1,\"caf\u{65}\u{301}\":2}",
        // Anything but whitespace after the value; whitespace JSON does not have.
        "{} x", "{}{}", "{}\u{0}", "1 2", "[] ]", "\"a\"\"b\"", "{}\u{0C}", "\u{0C}{}", "\u{A0}{}", "{}\u{A0}",
        "\u{FEFF}{}", "{}//", "/**/{}",
    ])
    func refusesWhatItMightReadOtherwiseThanJSONDecoder(_ text: String) {
        #expect(JSONValue.parse(Array(text.utf8)) == nil)
    }

    @Test(
        arguments: [
            [0x22, 0xFF, 0x22],  // a byte that is never UTF-8
            [0x22, 0xC3, 0x22],  // a sequence cut short
            [0x22, 0xE2, 0x9C, 0x22],
            [0x22, 0xC0, 0xAF, 0x22],  // an overlong "/"
            [0x22, 0xE0, 0x80, 0xAF, 0x22],
            [0x22, 0xED, 0xA0, 0x80, 0x22],  // a UTF-16 surrogate
            [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],  // above U+10FFFF
            [0x22, 0x80, 0x22],  // a continuation byte alone
            [0x7B, 0x22, 0xFE, 0x22, 0x3A, 0x31, 0x7D],  // in a key
            [0xC3, 0xA9],  // non-ASCII outside a string
            [0xEF, 0xBB, 0xBF, 0x7B, 0x7D],  // a byte order mark
        ] as [[UInt8]]
    )
    func refusesStringsThatAreNotUTF8(_ bytes: [UInt8]) {
        #expect(JSONValue.parse(bytes) == nil)
    }

    @Test func findsADuplicateKeyInALargeObject() {
        let members = (0..<40).map { "\"k\($0)\":\($0)" }
        let unique = "{" + members.joined(separator: ",") + "}"
        guard case .object(let object) = parse(unique) else {
            Issue.record("a large object without duplicates did not parse")
            return
        }
        #expect(object.members.count == 40)
        #expect(object["k39"] == .integer(39))
        for earlier in [0, 15, 16, 17, 38] {
            #expect(parse("{" + (members + ["\"k\(earlier)\":0"]).joined(separator: ",") + "}") == nil)
        }
        // Decomposed and precomposed forms of a key collide in the set too.
        let accented = members + ["\"caf\u{E9}\":1", "\"caf\u{65}\u{301}\":2"]
        #expect(parse("{" + accented.joined(separator: ",") + "}") == nil)
    }
}
