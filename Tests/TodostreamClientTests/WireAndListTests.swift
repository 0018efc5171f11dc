import EventStream
import Foundation
import Testing
import TodoApp
import TodostreamClient

@Suite struct WireAndListTests {
    let codec = TodoWireCodec()

    func todo(_ title: String, version: Int = 1, createdAt: Int64 = 1_000, completed: Bool = false) -> Todo {
        Todo(
            id: UUID(),
            createdAt: Timestamp(millisecondsSince1970: createdAt),
            title: title,
            subtitle: "s",
            priority: .high,
            completedAt: completed ? Timestamp(millisecondsSince1970: createdAt + 5) : nil,
            version: version
        )
    }

    /// A frame as the daemon writes it: the envelope, then the encoded body.
    func frame(_ event: Event) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("seq", 7)
        writer.field("type", event.name)
        let body = codec.encodeBody(event)
        if let bytes = body.payloadBytes {
            writer.key("payload")
            writer.raw(bytes)
        } else if case .error(let bytes) = body {
            writer.key("error")
            writer.raw(bytes)
        }
        writer.endObject()
        return writer.bytes
    }

    @Test func responsesDecodeToWhatWasEncoded() throws {
        let first = todo("Buy milk", completed: true)
        let second = todo("Walk", version: 3, createdAt: 2_000)
        var detail = TodoDetailViewModel(todo: second)
        detail.title = "Walk the dog"
        let events: [Event] = [
            .responseTodoViewModels(.success([TodoViewModel(todo: second), TodoViewModel(todo: first)])),
            .responseTodoViewModel(.success(TodoViewModel(todo: first))),
            .responseTodoDetailViewModel(.success(detail)),
            .responseUpdateDetailViewModel(
                .failure(AppError(code: .validationFailed, message: "Please add a title.", field: "title"))
            ),
            .responseTodoViewModel(
                .failure(AppError(code: .conflict, message: "changed", current: TodoViewModel(todo: second)))
            ),
        ]
        for event in events {
            #expect(try codec.decodeResponse(named: event.name, frame: frame(event)) == event)
        }
    }

    @Test func requestsAndBrokenPayloadsAreNotDecodedAsResponses() {
        #expect(throws: PayloadError.self) {
            try codec.decodeResponse(
                named: "RequestTodoViewModels",
                frame: Array(#"{"type":"RequestTodoViewModels"}"#.utf8)
            )
        }
        #expect(throws: PayloadError.self) {
            try codec.decodeResponse(
                named: "ResponseTodoViewModel",
                frame: Array(#"{"type":"ResponseTodoViewModel","payload":{"todo":{"id":"nope"}}}"#.utf8)
            )
        }
    }

    @Test func listKeepsTheNewestVersionOfEachRow() {
        var list = TodoList()
        let older = todo("a", createdAt: 1_000)
        let newer = todo("b", createdAt: 2_000)
        list.apply(.responseTodoViewModels(.success([TodoViewModel(todo: older), TodoViewModel(todo: newer)])))
        #expect(list.rows.map(\.title) == ["b", "a"])
        var toggled = older
        toggled.completedAt = Timestamp(millisecondsSince1970: 3_000)
        toggled.version = 2
        let changed = list.apply(.responseTodoViewModel(.success(TodoViewModel(todo: toggled))))
        #expect(changed)
        // A late, older copy does not undo it.
        let undone = list.apply(.responseTodoViewModel(.success(TodoViewModel(todo: older))))
        #expect(!undone)
        #expect(list.todos[older.id]?.complete == true)
        var deleted = newer
        deleted.deleted = true
        deleted.version = 2
        list.apply(.responseTodoViewModel(.success(TodoViewModel(todo: deleted))))
        #expect(list.rows.map(\.title) == ["a"])
    }
}
