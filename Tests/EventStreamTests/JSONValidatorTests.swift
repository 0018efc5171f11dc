import Testing

@testable import EventStream

@Suite struct JSONValidatorTests {
    @Test(arguments: [
        #"{}"#, #"[]"#, #" {"a" : [1, -2, 3.5, 1e3, 1E-3, -0.0, 0, true, false, null]} "#,
        #"{"s":"\" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00 \ud83d\ude00 \uFFFF","k":{}}"#, "\"caf\u{e9}\"", #"123"#,
        "\t[1]\r\n",
        #"{"a":{"b":{"c":[[[]]]}}}"#, "\u{FEFF}{\"op\":\"ping\"}",
    ])
    func acceptsJSON(_ text: String) {
        #expect(JSONValidator.isValid(Array(text.utf8)))
    }

    @Test(arguments: [
        // Trailing commas, missing parts.
        #"{"op":"ping","id":"tc",}"#, #"{"x":[1,]}"#, #"[,]"#, #"{,}"#, #"{"a"}"#, #"{"a":}"#, #"{"a" 1}"#,
        #"{"a":1"#, #"["#, "", " ", #"{"a":1}{"#, #"{"a":1} x"#, #"{'a':1}"#, #"{a:1}"#,
        // Escapes JSON does not have, or cut short.
        #"{"x":"\q"}"#, #"{"x":"\u12"}"#, #"{"x":"\u12G4"}"#, #"{"x":"\"#, #"{"x":"abc"#,
        // Surrogates that are not a pair: no character, so no text.
        #"{"x":"\ud800"}"#, #"{"x":"a\uDBFFb"}"#, #"{"x":"\udc00"}"#, #"{"x":"\ud800\u0041"}"#,
        #"{"x":"\ud800\ud800"}"#, #"{"x":"\uDE00\uD83D"}"#, #"{"\ud800":1}"#,
        // Numbers.
        #"{"x":01}"#, #"{"x":-01}"#, #"{"x":1.}"#, #"{"x":.5}"#, #"{"x":1e}"#, #"{"x":+1}"#, #"{"x":-}"#,
        #"{"x":0x10}"#, #"{"x":NaN}"#, #"{"x":Infinity}"#,
        // Literals.
        #"{"x":tru}"#, #"{"x":nul}"#, #"{"x":True}"#,
        // Raw control characters in strings.
        "\u{FEFF}", "\u{FEFF}\u{FEFF}{}", "{\"op\":\"pi\tng\"}", "{\"x\":\"a\u{0}b\"}", "{\"x\":\"a\u{1}b\"}",
        "{\"x\":\"a\nb\"}",
    ])
    func refusesWhatIsNotJSON(_ text: String) {
        #expect(!JSONValidator.isValid(Array(text.utf8)))
    }

    @Test func nestingIsBounded() {
        let deepest =
            String(repeating: "[", count: JSONValidator.maxDepth)
            + String(repeating: "]", count: JSONValidator.maxDepth)
        #expect(JSONValidator.isValid(Array(deepest.utf8)))
        let deeper = "[" + deepest + "]"
        #expect(!JSONValidator.isValid(Array(deeper.utf8)))
        // Far deeper than any stack would take with one frame a level, refused at the bound.
        let hostile = String(repeating: "[", count: 1_000_000)
        #expect(!JSONValidator.isValid(Array(hostile.utf8)))
    }
}
