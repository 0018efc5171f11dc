import EventStream
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import TodoApp

/// A store that answers from memory, for observer tests.
actor FakeStore: TodoStore {
    var todos: [Todo] = []
    var seq: UInt64 = 0
    var fail = false

    init(_ todos: [Todo] = []) { self.todos = todos }

    func setFail(_ fail: Bool) { self.fail = fail }

    func execute(_ batch: [ModelRequest]) async -> [ModelAnswer] {
        batch.map { request in
            switch request {
            case .read(let read):
                if fail { return .read(.failure(.unavailable)) }
                return .read(.success(todos.filter { read.id == nil || $0.id == read.id }))
            case .write(let write):
                return .write(apply(write))
            }
        }
    }

    private func apply(_ write: TodoWrite) -> Result<SavedTodo, AppError> {
        if fail { return .failure(.unavailable) }
        let index = todos.firstIndex { $0.id == write.id }
        switch write.apply(to: index.map { todos[$0] }, now: t1) {
        case .success(let todo):
            if let index { todos[index] = todo } else { todos.append(todo) }
            seq += 1
            return .success(SavedTodo(todo: todo, seq: seq))
        case .failure(let error):
            return .failure(error)
        }
    }
}

final class Recorder: EventSink, Sendable {
    let events = NIOLockedValueBox<[(Event, Scope)]>([])
    func deliver(_ deliveries: [Delivery<Event>], answering requests: [Origin]) {
        events.withLockedValue { $0 += deliveries.map { ($0.event, $0.scope) } }
    }
    var all: [(Event, Scope)] { events.withLockedValue { $0 } }
    var names: [String] { all.map(\.0.name) }
}

let origin = Origin(session: SessionID(1), correlation: .string("1"))

@Suite struct ViewModelServerObserverTests {
    let server = ViewModelServer(now: { t1 })

    @Test func listRequestBecomesAModelRead() async {
        let out = server.handle(.requestTodoViewModels)
        #expect(out.map(\.event) == [.requestReadTodos(ReadTodos(id: nil, purpose: .list))])
        #expect(out.map(\.scope) == [.internal])
    }

    @Test func toggleAndDeleteBecomeWritesOfTheReferencedId() async {
        let reference = TodoReference(id: stored().id, version: 3)
        #expect(
            server.handle(.requestToggleCompleteTodoViewModel(reference)).map(\.event)
                == [.requestWriteTodo(TodoWrite(id: reference.id, expectedVersion: 3, change: .toggleComplete))]
        )
        #expect(
            server.handle(.requestDeleteTodoViewModel(reference)).map(\.event)
                == [.requestWriteTodo(TodoWrite(id: reference.id, expectedVersion: 3, change: .delete))]
        )
    }

    @Test func newDetailIsAFreshUnsavedTodo() async throws {
        let out = server.handle(.requestNewTodoDetailViewModel)
        guard case .responseTodoDetailViewModel(.success(let detail)) = try #require(out.first?.event) else {
            Issue.record("expected a detail view model")
            return
        }
        #expect(detail.todo.version == 0)
        #expect(detail.title == "")
        #expect(out.first?.scope == .reply)
    }

    @Test func blankTitleIsRefusedBeforeTheStore() async {
        let input = TodoDetailInput(todo: TodoReference(id: UUID()), edit: TodoEdit(title: "  "))
        let out = server.handle(.requestUpdateDetailViewModel(input))
        guard case .responseUpdateDetailViewModel(.failure(let error)) = out.first?.event else {
            Issue.record("expected a validation failure")
            return
        }
        #expect(error.field == "title")
        #expect(out.first?.scope == .reply)
    }

    @Test func listResponsesHideDeletedTodos() async {
        let out = server.handle(
            .responseTodos(ReadTodos(id: nil, purpose: .list), .success([stored(deleted: true), stored(4)]))
        )
        #expect(out.map(\.event) == [.responseTodoViewModels(.success([TodoViewModel(todo: stored(4))]))])
    }

    @Test func detailOfAnUnknownIdIsNotFound() async {
        let out = server.handle(.responseTodos(ReadTodos(id: UUID(), purpose: .detail), .success([])))
        guard case .responseTodoDetailViewModel(.failure(let error)) = out.first?.event else {
            Issue.record("expected not_found")
            return
        }
        #expect(error.code == .notFound)
    }

    @Test func detailWithAStaleVersionIsAConflict() async {
        let todo = stored(4)
        let stale = server.handle(
            .responseTodos(ReadTodos(id: todo.id, purpose: .detail, expectedVersion: 3), .success([todo]))
        )
        guard case .responseTodoDetailViewModel(.failure(let error)) = stale.first?.event else {
            Issue.record("expected conflict")
            return
        }
        #expect(error.code == .conflict)
        #expect(error.current == TodoViewModel(todo: todo))
        for version in [4, nil] {
            let read = ReadTodos(id: todo.id, purpose: .detail, expectedVersion: version)
            let out = server.handle(.responseTodos(read, .success([todo])))
            #expect(out.map(\.event) == [.responseTodoDetailViewModel(.success(TodoDetailViewModel(todo: todo)))])
        }
    }

    @Test func savedWritesBroadcastWithTheirSeq() async {
        let saved = SavedTodo(todo: stored(4), seq: 42)
        let toggle = server.handle(
            .responseTodo(TodoWrite(id: saved.todo.id, expectedVersion: nil, change: .toggleComplete), .success(saved))
        )
        #expect(toggle.map(\.scope) == [.broadcast(seq: 42)])
        let update = server.handle(
            .responseTodo(
                TodoWrite(id: saved.todo.id, expectedVersion: nil, change: .update(TodoEdit())),
                .success(saved)
            )
        )
        #expect(update.map(\.event.name) == ["ResponseUpdateDetailViewModel", "ResponseTodoViewModel"])
        #expect(update.map(\.scope) == [.reply, .broadcast(seq: 42)])
        #expect(update.first?.encodedPayload == nil, "no broadcast payload to make the answer from")
    }

    /// A save's answer is made from its broadcast's payload (the two share the todo's text):
    /// the bytes the codec writes for it, encoded without writing the todo again.
    @Test func aSavesAnswerIsMadeFromItsBroadcastsPayload() {
        let todo = stored(4)
        let row = TodoWireCodec.rowJSON(for: todo)
        let saved = SavedTodo(todo: todo, seq: 42, broadcastPayload: row)
        let update = server.handle(
            .responseTodo(TodoWrite(id: todo.id, expectedVersion: nil, change: .update(TodoEdit())), .success(saved))
        )
        let answer = TodoWireCodec().encodeBody(
            .responseUpdateDetailViewModel(.success(TodoDetailViewModel(todo: todo)))
        )
        #expect(update.map(\.encodedPayload).map { $0.map(EncodedBody.payload) } == [answer, .payload(row)])
        // A save already applied (its mid seen) is answered with the same two payloads.
        let again = server.handle(
            .responseTodo(
                TodoWrite(id: todo.id, expectedVersion: nil, change: .update(TodoEdit()), mid: "m"),
                .success(SavedTodo(todo: todo, seq: 42, broadcastPayload: row, duplicate: true))
            )
        )
        // Both answers again, as replies: the detail, then the list row first broadcast.
        #expect(again.map(\.encodedPayload).map { $0.map(EncodedBody.payload) } == [answer, .payload(row)])
        #expect(again.map(\.scope) == [.reply, .reply])
    }

    @Test func failedWritesAreRepliesOnly() async {
        let failed = server.handle(
            .responseTodo(TodoWrite(id: UUID(), expectedVersion: nil, change: .delete), .failure(.unavailable))
        )
        #expect(failed.map(\.event) == [.responseTodoViewModel(.failure(.unavailable))])
        #expect(failed.map(\.scope) == [.reply])
    }
}

@Suite struct ModelServerObserverTests {
    @Test func readsAndWritesGoToTheStore() async {
        let store = FakeStore([stored()])
        let server = ModelServer(store: store)
        let read = ReadTodos(id: nil, purpose: .list)
        #expect(
            await server.handle(batch: [.requestReadTodos(read)]).first?.map(\.event) == [
                .responseTodos(read, .success([stored()]))
            ]
        )
        let write = TodoWrite(id: stored().id, expectedVersion: nil, change: .delete)
        let out = await server.handle(batch: [.requestWriteTodo(write)]).first ?? []
        guard case .responseTodo(_, .success(let saved)) = out.first?.event else {
            Issue.record("expected a saved todo")
            return
        }
        #expect(saved.todo.deleted)
        #expect(saved.seq == 1)
    }

    @Test func storageFailuresAreUnavailable() async {
        let store = FakeStore()
        await store.setFail(true)
        let read = ReadTodos(id: nil, purpose: .list)
        #expect(
            await ModelServer(store: store).handle(batch: [.requestReadTodos(read)]).first?.map(\.event) == [
                .responseTodos(read, .failure(.unavailable))
            ]
        )
    }
}

/// One view request in, the expected events out at the boundary, through both servers.
@Suite struct ViewRequestIntegrationTests {
    func run(_ event: Event, store: FakeStore) async -> Recorder {
        let recorder = Recorder()
        let bus = EventBus<Event>(servers: [ViewModelServer(now: { t1 })], model: ModelServer(store: store))
        recorder.deliver(await bus.run([(event, origin)]), answering: [origin])
        return recorder
    }

    @Test func aBatchIsAnsweredRequestByRequestAndAReadSeesTheWritesBeforeIt() async throws {
        let store = FakeStore([stored()])
        let bus = EventBus<Event>(servers: [ViewModelServer(now: { t1 })], model: ModelServer(store: store))
        let first = Origin(session: SessionID(1), correlation: .string("a"))
        let second = Origin(session: SessionID(2), correlation: .string("b"))
        let reference = TodoReference(id: stored().id)
        let out = await bus.run([
            (.requestToggleCompleteTodoViewModel(reference), first), (.requestTodoDetailViewModel(reference), second),
        ])
        // Each request's events depth first, the requests in arrival order, although both
        // waited for the store together.
        #expect(
            out.map(\.event.name) == [
                "RequestToggleCompleteTodoViewModel", "RequestWriteTodo", "ResponseTodo", "ResponseTodoViewModel",
                "RequestTodoDetailViewModel", "RequestReadTodos", "ResponseTodos", "ResponseTodoDetailViewModel",
            ]
        )
        #expect(out.map(\.origin) == Array(repeating: first, count: 4) + Array(repeating: second, count: 4))
        guard case .responseTodoDetailViewModel(.success(let detail)) = try #require(out.last?.event) else {
            Issue.record("expected a detail")
            return
        }
        #expect(detail.completed, "the read comes after the toggle in the order, so it sees it")
    }

    @Test func requestTodoViewModels() async {
        let recorder = await run(.requestTodoViewModels, store: FakeStore([stored()]))
        #expect(
            recorder.names == ["RequestTodoViewModels", "RequestReadTodos", "ResponseTodos", "ResponseTodoViewModels"]
        )
        #expect(recorder.all.last?.0 == .responseTodoViewModels(.success([TodoViewModel(todo: stored())])))
    }

    @Test func requestToggleCompleteTodoViewModel() async {
        let recorder = await run(
            .requestToggleCompleteTodoViewModel(TodoReference(id: stored().id)),
            store: FakeStore([stored()])
        )
        #expect(
            recorder.names == [
                "RequestToggleCompleteTodoViewModel", "RequestWriteTodo", "ResponseTodo", "ResponseTodoViewModel",
            ]
        )
        #expect(recorder.all.last?.1 == .broadcast(seq: 1))
    }

    @Test func requestDeleteTodoViewModel() async {
        let recorder = await run(
            .requestDeleteTodoViewModel(TodoReference(id: stored().id)),
            store: FakeStore([stored()])
        )
        guard case .responseTodoViewModel(.success(let viewModel)) = recorder.all.last?.0 else {
            Issue.record("no response")
            return
        }
        #expect(viewModel.deleted)
    }

    @Test func requestNewTodoDetailViewModel() async {
        let recorder = await run(.requestNewTodoDetailViewModel, store: FakeStore())
        #expect(recorder.names == ["RequestNewTodoDetailViewModel", "ResponseTodoDetailViewModel"])
    }

    @Test func requestTodoDetailViewModel() async {
        let recorder = await run(
            .requestTodoDetailViewModel(TodoReference(id: stored().id)),
            store: FakeStore([stored()])
        )
        #expect(recorder.all.last?.0 == .responseTodoDetailViewModel(.success(TodoDetailViewModel(todo: stored()))))
    }

    @Test func requestUpdateDetailViewModel() async {
        let id = UUID()
        let input = TodoDetailInput(
            todo: TodoReference(id: id, version: 0),
            edit: TodoEdit(title: "Call mum", priority: .high)
        )
        let recorder = await run(.requestUpdateDetailViewModel(input), store: FakeStore())
        #expect(recorder.names.suffix(2) == ["ResponseUpdateDetailViewModel", "ResponseTodoViewModel"])
        #expect(recorder.all.map(\.1).suffix(2) == [.reply, .broadcast(seq: 1)])
    }
}
