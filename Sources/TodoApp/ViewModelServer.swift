import EventStream
import Foundation

/// The seed's ViewModelServer: turns view requests into model requests, and model responses
/// into view responses. Pure: its output depends only on the event (and the clock for a fresh
/// todo).
public struct ViewModelServer: EventServer {
    private let now: @Sendable () -> Timestamp

    public init(now: @escaping @Sendable () -> Timestamp = Timestamp.now) { self.now = now }

    public var observes: Set<String> {
        let kinds: [Event.Kind] = [
            .requestTodoViewModels, .requestToggleCompleteTodoViewModel, .requestDeleteTodoViewModel,
            .requestNewTodoDetailViewModel, .requestTodoDetailViewModel, .requestUpdateDetailViewModel,
            .responseTodos, .responseTodo,
        ]
        return Set(kinds.map(\.rawValue))
    }

    public func handle(_ event: Event) -> [Emission<Event>] { handle(event, mid: nil) }

    /// A write request with a `mid` becomes a write the store applies at most once (see
    /// `TodoWrite.mid`); on any other request the `mid` has no effect.
    public func handle(_ event: Event, origin: Origin) -> [Emission<Event>] { handle(event, mid: origin.mid) }

    private func handle(_ event: Event, mid: String?) -> [Emission<Event>] {
        switch event {
        case .requestTodoViewModels:
            return [Emission(.requestReadTodos(ReadTodos(id: nil, purpose: .list)), .internal)]

        case .requestToggleCompleteTodoViewModel(let reference):
            return [write(reference, .toggleComplete, mid: mid)]

        case .requestDeleteTodoViewModel(let reference):
            return [write(reference, .delete, mid: mid)]

        case .requestNewTodoDetailViewModel:
            let fresh = Todo(createdAt: now())
            return [Emission(.responseTodoDetailViewModel(.success(TodoDetailViewModel(todo: fresh))), .reply)]

        case .requestTodoDetailViewModel(let reference):
            return [
                Emission(
                    .requestReadTodos(
                        ReadTodos(id: reference.id, purpose: .detail, expectedVersion: reference.version)
                    ),
                    .internal
                )
            ]

        case .requestUpdateDetailViewModel(let input):
            // Check what can be checked without the store; the store checks the rest.
            if let title = input.edit.title, case .failure(let error) = Todo.validatedTitle(title) {
                return [Emission(.responseUpdateDetailViewModel(.failure(error)), .reply)]
            }
            if let subtitle = input.edit.subtitle, case .failure(let error) = Todo.validatedSubtitle(subtitle) {
                return [Emission(.responseUpdateDetailViewModel(.failure(error)), .reply)]
            }
            return [write(input.todo, .update(input.edit), mid: mid)]

        case .responseTodos(let read, let result):
            switch read.purpose {
            case .list:
                let viewModels = result.map(Self.listRows)
                return [Emission(.responseTodoViewModels(viewModels), .reply)]
            case .detail:
                let detail = result.flatMap { todos -> Result<TodoDetailViewModel, AppError> in
                    guard let todo = todos.first(where: { $0.id == read.id }) else {
                        return .failure(.notFound(read.id?.lowercased ?? ""))
                    }
                    if let expected = read.expectedVersion, expected != todo.version {
                        return .failure(.conflict(stored: todo, expected: expected))
                    }
                    return .success(TodoDetailViewModel(todo: todo))
                }
                return [Emission(.responseTodoDetailViewModel(detail), .reply)]
            }

        case .responseTodo(let write, .success(let saved)) where saved.duplicate:
            return duplicateAnswers(write, saved)

        case .responseTodo(let write, let result):
            let mark = write.mid.map { MutationMark(mid: $0) }
            switch (write.change, result) {
            case (.update, .success(let saved)):
                return [
                    Emission(
                        .responseUpdateDetailViewModel(.success(TodoDetailViewModel(todo: saved.todo))),
                        .reply,
                        encodedPayload: Self.detailPayload(saved)
                    ),
                    Emission(
                        .responseTodoViewModel(.success(TodoViewModel(todo: saved.todo))),
                        .broadcast(seq: saved.seq),
                        encodedPayload: saved.broadcastPayload,
                        mark: mark
                    ),
                ]
            case (.update, .failure(let error)):
                return [Emission(.responseUpdateDetailViewModel(.failure(error)), .reply)]
            case (_, .success(let saved)):
                return [
                    Emission(
                        .responseTodoViewModel(.success(TodoViewModel(todo: saved.todo))),
                        .broadcast(seq: saved.seq),
                        encodedPayload: saved.broadcastPayload,
                        mark: mark
                    )
                ]
            case (_, .failure(let error)):
                return [Emission(.responseTodoViewModel(.failure(error)), .reply)]
            }

        default:
            return []
        }
    }

    /// The list's rows: every todo not deleted, in one pass (a list holds every todo, and a
    /// filtered copy before the rows cost each one's strings a retain and a release more).
    private static func listRows(_ todos: [Todo]) -> [TodoViewModel] {
        var rows: [TodoViewModel] = []
        rows.reserveCapacity(todos.count)
        for todo in todos where !todo.deleted { rows.append(TodoViewModel(todo: todo)) }
        return rows
    }

    /// A save's answer, made from the broadcast's payload (the saved todo's list row) when
    /// there is one: the two share the todo's text, encoded once (`TodoWireCodec.detailPayload`).
    private static func detailPayload(_ saved: SavedTodo) -> [UInt8]? {
        saved.broadcastPayload.flatMap { TodoWireCodec.detailPayload(for: saved.todo, row: $0) }
    }

    private func write(_ reference: TodoReference, _ change: TodoChange, mid: String?) -> Emission<Event> {
        Emission(
            .requestWriteTodo(
                TodoWrite(id: reference.id, expectedVersion: reference.version, change: change, mid: mid)
            ),
            .internal
        )
    }

    /// The answers to a write whose `mid` was already applied: replies only, nothing broadcast,
    /// the responses the original produced, in the retry's response types. A toggle or delete
    /// gets the `ResponseTodoViewModel` first broadcast, byte for byte; a save gets the
    /// `ResponseUpdateDetailViewModel` its first attempt got (the detail of the todo as that write
    /// saved it), then that `ResponseTodoViewModel`. Each says `duplicate` and the seq the write
    /// was applied with.
    private func duplicateAnswers(_ write: TodoWrite, _ saved: SavedTodo) -> [Emission<Event>] {
        let mark = MutationMark(mid: write.mid ?? "", appliedSeq: saved.seq)
        let row = Emission<Event>(
            .responseTodoViewModel(.success(TodoViewModel(todo: saved.todo))),
            .reply,
            encodedPayload: saved.broadcastPayload,
            mark: mark
        )
        guard case .update = write.change else { return [row] }
        let detail = Emission<Event>(
            .responseUpdateDetailViewModel(.success(TodoDetailViewModel(todo: saved.todo))),
            .reply,
            encodedPayload: Self.detailPayload(saved),
            mark: mark
        )
        return [detail, row]
    }
}

extension Timestamp {
    /// The current wall-clock time.
    @Sendable public static func now() -> Timestamp {
        Timestamp(millisecondsSince1970: Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)))
    }
}
