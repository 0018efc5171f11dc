import EventStream
import Foundation
import Testing

@testable import TodoApp

/// `decodeRequest(named:frame:parsed:)` reads payloads from the parsed frame; it must give the
/// event, or the error message, that JSONDecoder's reading (`decodeRequest(named:frame:)`) gives.
@Suite struct WireFastPathTests {
    let codec = TodoWireCodec()

    static let id = "6f1c0000-0000-0000-0000-000000000001"
    static let names = Event.Kind.allCases.map(\.rawValue) + ["Nope", ""]

    static func frame(_ payload: String) -> String { #"{"type":"T","id":1,"payload":"# + payload + "}" }
    static func todo(_ fields: String) -> String { frame(#"{"todo":{"id":"\#(id)"\#(fields)}}"#) }
    static func edit(_ fields: String) -> String { frame(#"{"todo":{"id":"\#(id)"},"# + fields + "}") }

    static let frames: [String] = [
        // The plain shapes of each request.
        todo(""), todo(#","version":3"#), todo(#","version":0"#), todo(#","version":null"#),
        todo(#","version":9223372036854775807"#), todo(#","title":"stale","extra":{"a":[1,{"b":null}]}"#),
        edit(#""title":"t","subtitle":"xxx","priority":"normal""#),
        edit(#""title":null,"subtitle":null,"priority":null,"completed":null,"deleted":null"#),
        edit(#""completed":true,"deleted":false,"priority":"HIGH","x":1"#),
        edit(#""title":"Caf\#u{E9} \#u{1F600}","subtitle":"","priority":"High""#),
        // Plain shapes that the checks after reading refuse.
        frame(#"{"todo":{"id":"nope"}}"#), frame(#"{"todo":{"id":"6F1C0000-0000-0000-0000-000000000001"}}"#),
        frame(#"{"todo":{"id":""}}"#), todo(#","version":-1"#), todo(#","version":-9223372036854775808"#),
        edit(#""priority":"urgent""#), edit(#""priority":"""#), edit(#""priority":"h\#u{130}gh""#),
        // Wrong types, missing or null fields: JSONDecoder's messages.
        #"{"type":"T"}"#, #"{"payload":null}"#, #"{"payload":[]}"#, #"{"payload":"x"}"#, #"{"payload":5}"#,
        frame("{}"), frame(#"{"todo":null}"#), frame(#"{"todo":[]}"#), frame(#"{"todo":"x"}"#),
        frame(#"{"todo":{}}"#), frame(#"{"todo":{"id":5}}"#), frame(#"{"todo":{"id":null}}"#),
        frame(#"{"todo":{"id":true,"version":"3"}}"#),
        todo(#","version":"3""#), todo(#","version":true"#), todo(#","version":[]"#), todo(#","version":{}"#),
        edit(#""title":5"#), edit(#""subtitle":true"#), edit(#""priority":1"#), edit(#""completed":"yes""#),
        edit(#""completed":1"#), edit(#""deleted":0"#), edit(#""deleted":"false""#), edit(#""title":[]"#),
        edit(#""title":5,"completed":"yes""#),
        // Left to JSONDecoder whole: escapes, fractions, exponents, big numbers, duplicates,
        // trailing bytes, invalid JSON.
        todo(#","version":3.0"#), todo(#","version":3.5"#), todo(#","version":1e2"#), todo(#","version":-0"#),
        todo(#","version":9223372036854775808"#), todo(#","version":99999999999999999999"#),
        frame(#"{"todo":{"id":"6f1c0000-0000-0000-0000-00000000000\u0031"}}"#),
        edit(#""title":"a\"b\\c\n""#), edit(#""priority":"\u0068igh""#),
        todo(#","version":1,"version":2"#), frame(#"{"todo":{"id":"\#(id)"},"todo":{"id":"x"}}"#),
        #"{"payload":{"todo":{"id":"\#(id)"}},"payload":null}"#, edit(#""title":"a","title":"b""#),
        todo("") + " x", todo("") + "{}", String(todo("").dropLast()), "[]", "null", "", "{",
        "\u{FEFF}" + todo(#","version":2"#), "  " + todo(#","version":2"#) + "\r\n",
    ]

    private func outcome(_ decode: () throws(PayloadError) -> Event) -> Result<Event, PayloadError> {
        do {
            return .success(try decode())
        } catch {
            return .failure(error)
        }
    }

    @Test(arguments: frames)
    func readsPayloadsAsJSONDecoderDoes(_ text: String) {
        let bytes = Array(text.utf8)
        var root: JSONObject?
        if case .object(let object) = JSONValue.parse(bytes) { root = object }
        for name in Self.names {
            let slow = outcome { () throws(PayloadError) in try codec.decodeRequest(named: name, frame: bytes) }
            let fast = outcome { () throws(PayloadError) in
                try codec.decodeRequest(named: name, frame: bytes, parsed: root)
            }
            #expect(fast == slow, "\(name)")
        }
    }

    @Test func decodesFromTheTreeAlone() throws {
        // The bytes say nothing that decodes; what the tree holds is what is read.
        let root = JSONObject(members: [
            JSONObject.Member(
                key: "payload",
                value: .object(
                    JSONObject(members: [
                        JSONObject.Member(
                            key: "todo",
                            value: .object(
                                JSONObject(members: [
                                    JSONObject.Member(key: "id", value: .string(Self.id)),
                                    JSONObject.Member(key: "version", value: .integer(4)),
                                ])
                            )
                        ),
                        JSONObject.Member(key: "priority", value: .string("HIGH")),
                        JSONObject.Member(key: "completed", value: .bool(true)),
                    ])
                )
            )
        ])
        let uuid = try #require(UUID(uuidString: Self.id))
        let reference = TodoReference(id: uuid, version: 4)
        #expect(
            try codec.decodeRequest(named: "RequestDeleteTodoViewModel", frame: [], parsed: root)
                == .requestDeleteTodoViewModel(reference)
        )
        #expect(
            try codec.decodeRequest(named: "RequestUpdateDetailViewModel", frame: [], parsed: root)
                == .requestUpdateDetailViewModel(
                    TodoDetailInput(
                        todo: reference,
                        edit: TodoEdit(title: nil, subtitle: nil, priority: .high, completed: true, deleted: nil)
                    )
                )
        )
        // A shape it does not read is decoded from the bytes, with JSONDecoder's message.
        let wrong = JSONObject(members: [JSONObject.Member(key: "payload", value: .integer(1))])
        #expect(throws: PayloadError(message: "payload is not valid.")) {
            try codec.decodeRequest(named: "RequestDeleteTodoViewModel", frame: [], parsed: wrong)
        }
    }
}
