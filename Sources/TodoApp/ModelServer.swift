import EventStream

/// The seed's ModelServer: answers model-layer requests from the store.
///
/// `RequestReadTodos` → `ResponseTodos`; `RequestWriteTodo` → `ResponseTodo` (once committed).
public struct ModelServer: EventServer {
    public let store: any TodoStore

    public init(store: any TodoStore) { self.store = store }

    public var observes: Set<String> {
        [Event.Kind.requestReadTodos.rawValue, Event.Kind.requestWriteTodo.rawValue]
    }

    public func handle(_ event: Event) async -> [Emission<Event>] {
        switch event {
        case .requestReadTodos(let read):
            // A pipelined read sees the writes its session sent before it (see `RequestTicket`).
            await RequestTicket.current?.awaitPredecessor()
            let result: Result<[Todo], AppError>
            do {
                result = .success(try await store.readTodos(id: read.id))
            } catch {
                result = .failure(error)
            }
            return [Emission(.responseTodos(read, result), .internal)]
        case .requestWriteTodo(let write):
            // Writes reach the store in the order their session sent them.
            await RequestTicket.current?.awaitPredecessorAdmitted()
            return [Emission(.responseTodo(write, await store.write(write)), .internal)]
        default:
            return []
        }
    }
}
