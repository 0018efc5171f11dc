import EventStream
import Foundation
import Testing

@testable import TodoApp

@Suite struct WireTests {
    let codec = TodoWireCodec()

    func decode(_ type: String, _ json: String) throws(PayloadError) -> Event {
        try codec.decodeRequest(named: type, frame: Array(json.utf8))
    }

    @Test func decodesOnlyIdAndVersionOfAViewModel() throws {
        let event = try decode(
            "RequestToggleCompleteTodoViewModel",
            #"{"type":"RequestToggleCompleteTodoViewModel","payload":{"todo":{"id":"6F1C0000-0000-0000-0000-000000000001","title":"stale","version":3},"complete":true}}"#
        )
        #expect(event == .requestToggleCompleteTodoViewModel(TodoReference(id: stored().id, version: 3)))
    }

    @Test func payloadErrorsNameTheFieldPath() {
        func message(_ json: String, _ type: String = "RequestDeleteTodoViewModel") -> String? {
            do {
                _ = try decode(type, json)
                return nil
            } catch {
                return error.message
            }
        }
        #expect(message(#"{"type":"x"}"#) == "payload is missing.")
        #expect(message(#"{"payload":{}}"#) == "payload.todo is missing.")
        #expect(message(#"{"payload":{"todo":{"id":5}}}"#) == "payload.todo.id must be a string.")
        #expect(message(#"{"payload":{"todo":{"id":"nope"}}}"#) == "payload.todo.id must be a UUID string.")
        // Numbers that are no Int: Foundation's own error names no field.
        let id = #""id":"6f1c0000-0000-0000-0000-000000000001""#
        let range = "payload.todo.version must be an integer from \(Int.min) to \(Int.max)."
        for (version, said) in [
            ("1.5", "payload.todo.version must be an integer."), ("2.5", "payload.todo.version must be an integer."),
            ("1e300", "payload.todo.version must be an integer."),
            ("\"1\"", "payload.todo.version must be an integer."),
            ("1.0000000000000000001", "payload.todo.version must be an integer."),
            ("1e-400", "payload.todo.version must be an integer."),
            // An integer, only too large: told so (it was "must be an integer").
            ("99999999999999999999999", range), ("9223372036854775808", range), ("-9223372036854775809", range),
        ] {
            #expect(message(#"{"payload":{"todo":{\#(id),"version":\#(version)}}}"#) == said, "\(version)")
            #expect(
                message(#"{"payload":{"todo":{\#(id),"version":\#(version)}}}"#, "RequestUpdateDetailViewModel") == said
            )
        }
        #expect(
            message(
                #"{"payload":{"todo":{"id":"6f1c0000-0000-0000-0000-000000000001"},"priority":"urgent"}}"#,
                "RequestUpdateDetailViewModel"
            )
                == "payload.priority must be \"high\" or \"normal\"."
        )
        #expect(
            message(
                #"{"payload":{"todo":{"id":"6f1c0000-0000-0000-0000-000000000001"},"completed":"yes"}}"#,
                "RequestUpdateDetailViewModel"
            )
                == "payload.completed must be true or false."
        )
    }

    @Test func requestsWithoutPayloadIgnoreOne() throws {
        #expect(try decode("RequestTodoViewModels", #"{"payload":[1,2]}"#) == .requestTodoViewModels)
    }

    @Test func encodesTheDocumentedShapes() throws {
        guard
            case .payload(let bytes) = codec.encodeBody(.responseTodoViewModel(.success(TodoViewModel(todo: stored()))))
        else {
            Issue.record("expected a payload")
            return
        }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        #expect(Set(object.keys) == ["todo", "title", "subtitle", "complete", "deleted", "completeActionTitle"])
        let todo = try #require(object["todo"] as? [String: Any])
        #expect(
            Set(todo.keys) == ["id", "createdAt", "title", "subtitle", "priority", "completedAt", "deleted", "version"]
        )
        #expect(todo["id"] as? String == "6f1c0000-0000-0000-0000-000000000001")
        #expect(todo["completedAt"] is NSNull)
    }

    @Test func errorsCarryCodeMessageFieldAndCurrent() throws {
        let conflict = AppError(code: .conflict, message: "m", current: TodoViewModel(todo: stored()))
        guard case .error(let bytes) = codec.encodeBody(.responseTodoViewModel(.failure(conflict))) else {
            Issue.record("expected an error body")
            return
        }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        #expect(object["code"] as? String == "conflict")
        #expect((object["current"] as? [String: Any])?["title"] as? String == "Milk")
    }

    @Test func theJournalRecordIsTheBroadcastBody() {
        let record = TodoWireCodec.broadcastRecord(for: stored())
        #expect(record.type == "ResponseTodoViewModel")
        #expect(
            codec.encodeBody(.responseTodoViewModel(.success(TodoViewModel(todo: stored()))))
                == .payload(record.payload)
        )
    }

    @Test func theCatalogHasAll14Events() {
        #expect(Event.catalog.descriptors.count == 14)
        #expect(Event.catalog.descriptors.filter(\.isPublishableByView).count == 6)
        #expect(Event.catalog.descriptors.filter { $0.layer == .model }.count == 4)
    }
}

@Suite struct UUIDFormTests {
    @Test func theFastFormsAgreeWithFoundation() {
        for _ in 0..<1_000 {
            let uuid = UUID()
            #expect(uuid.lowercased == uuid.uuidString.lowercased())
            #expect(UUID(canonical: uuid.uuidString) == uuid)
            #expect(UUID(canonical: uuid.lowercased) == uuid)
        }
    }

    @Test func malformedTextIsNotAUUID() {
        let good = "6f1c2a3b-0d4e-4f5a-8b9c-0d1e2f3a4b5c"
        #expect(UUID(canonical: good) != nil)
        for bad in [
            "", "6f1c2a3b0d4e4f5a8b9c0d1e2f3a4b5c", "6f1c2a3b-0d4e-4f5a-8b9c-0d1e2f3a4b5",
            "6f1c2a3b-0d4e-4f5a-8b9c-0d1e2f3a4b5cd",
            "6f1c2a3b-0d4e-4f5a-8b9c_0d1e2f3a4b5c", "6f1c2a3g-0d4e-4f5a-8b9c-0d1e2f3a4b5c",
            "6f1c2a3b--d4e-4f5a-8b9c-0d1e2f3a4b5c",
            "6f1c2a3b-0d4e-4f5a-8b9c-0d1e2f3a4b5é",
        ] {
            #expect(UUID(canonical: bad) == nil, "\(bad)")
        }
    }

    /// A save's answer made from its broadcast's payload is byte for byte the one written
    /// from the todo, whatever the text holds; from the row of another state of the todo, none
    /// is made.
    @Test func aDetailMadeFromTheRowIsTheDetailWrittenInFull() throws {
        let texts = [
            "", "plain", "Buy \"milk\"", "line\nbreak\t\\", "ünïcode ✓", "\u{0}\u{1F}",
            String(repeating: "x", count: 400),
        ]
        var checked = 0
        for (index, title) in texts.enumerated() {
            for subtitle in texts {
                let todo = Todo(
                    createdAt: Timestamp(millisecondsSince1970: 1_763_752_748_704 + Int64(index)),
                    title: title,
                    subtitle: subtitle,
                    priority: TodoPriority.allCases[index % TodoPriority.allCases.count],
                    completedAt: index % 2 == 0 ? nil : Timestamp(millisecondsSince1970: 1_763_752_749_001),
                    deleted: index % 3 == 0,
                    version: index + 1
                )
                let written = TodoWireCodec().encodeBody(
                    .responseUpdateDetailViewModel(.success(TodoDetailViewModel(todo: todo)))
                )
                let made = try #require(TodoWireCodec.detailPayload(for: todo, row: TodoWireCodec.rowJSON(for: todo)))
                #expect(
                    written == .payload(made),
                    "title \(title.debugDescription), subtitle \(subtitle.debugDescription)"
                )
                checked += 1
            }
        }
        #expect(checked == texts.count * texts.count)
        let todo = Todo(createdAt: Timestamp(millisecondsSince1970: 0), title: "t", version: 1)
        var done = todo
        done.completedAt = Timestamp(millisecondsSince1970: 5)
        #expect(TodoWireCodec.detailPayload(for: done, row: TodoWireCodec.rowJSON(for: todo)) == nil)
        #expect(TodoWireCodec.detailPayload(for: todo, row: Array("{}".utf8)) == nil)
        #expect(TodoWireCodec.detailPayload(for: todo, row: []) == nil)
    }

    @Test func aJournaledBroadcastReadsBackAsTheTodoItWasWrittenFrom() {
        for todo in [
            Todo(createdAt: Timestamp(millisecondsSince1970: 1_763_752_748_704), title: "Buy \"milk\"", version: 4),
            Todo(
                createdAt: Timestamp(millisecondsSince1970: 0),
                title: "é",
                subtitle: "line\nbreak",
                priority: .high,
                completedAt: Timestamp(millisecondsSince1970: 951_782_400_999),  // 2000-02-29
                deleted: true,
                version: 1
            ),
            // No escapes: read by the subset parser, not JSONDecoder.
            Todo(
                createdAt: Timestamp(millisecondsSince1970: 1_763_752_748_000),
                title: "plain ünïcode",
                subtitle: "",
                completedAt: Timestamp(millisecondsSince1970: 1_763_752_749_001),
                version: 12
            ),
        ] {
            let record = TodoWireCodec.broadcastRecord(for: todo)
            #expect(TodoWireCodec.todo(inBroadcastPayload: record.payload) == todo)
            // The escape-free payload is the one the subset parser takes.
            #expect((JSONValue.parse(record.payload) != nil) == (todo.version == 12))
        }
        #expect(TodoWireCodec.todo(inBroadcastPayload: Array("{}".utf8)) == nil)
        let plain = TodoWireCodec.broadcastRecord(for: Todo(createdAt: Timestamp(millisecondsSince1970: 0), title: "t"))
        let wrongType = String(decoding: plain.payload, as: UTF8.self).replacingOccurrences(
            of: "\"version\":0",
            with: "\"version\":\"0\""
        )
        #expect(wrongType.contains("\"version\":\"0\""))
        #expect(TodoWireCodec.todo(inBroadcastPayload: Array(wrongType.utf8)) == nil)
        #expect(Timestamp(rfc3339: "2026-11-21T19:06:04.123Z")?.rfc3339 == "2026-11-21T19:06:04.123Z")
        #expect(Timestamp(rfc3339: "2026-13-21T19:06:04.123Z") == nil)
        #expect(Timestamp(rfc3339: "2026-11-21T19:06:04Z") == nil)
    }
}
