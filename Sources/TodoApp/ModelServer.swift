import EventStream

/// The seed's ModelServer: answers model-layer requests from the store.
///
/// `RequestReadTodos` → `ResponseTodos`; `RequestWriteTodo` → `ResponseTodo` (once committed).
/// It answers a whole batch at once: the store applies the batch's reads and writes in order
/// (a read sees the writes before it) and commits the writes in one transaction.
public struct ModelServer: BatchServer {
    public let store: any TodoStore

    public init(store: any TodoStore) { self.store = store }

    public var observes: Set<String> {
        [Event.Kind.requestReadTodos.rawValue, Event.Kind.requestWriteTodo.rawValue]
    }

    public nonisolated(nonsending) func handle(batch: [Event]) async -> [[Emission<Event>]] {
        var requests: [ModelRequest] = []
        var positions: [Int?] = []
        requests.reserveCapacity(batch.count)
        for event in batch {
            switch event {
            case .requestReadTodos(let read):
                positions.append(requests.count)
                requests.append(.read(read))
            case .requestWriteTodo(let write):
                positions.append(requests.count)
                requests.append(.write(write))
            default:
                positions.append(nil)
            }
        }
        let answers = requests.isEmpty ? [] : await store.execute(requests)
        return zip(batch, positions).map { event, position in
            guard let position, position < answers.count else { return [] }
            switch (event, answers[position]) {
            case (.requestReadTodos(let read), .read(let result)):
                return [Emission(.responseTodos(read, result), .internal)]
            case (.requestWriteTodo(let write), .write(let result)):
                // A write whose mid was applied before wrote nothing: a monitor's copy says so
                // (`"duplicate":true,"applied_seq":N`), as the requester's replies do.
                var mark: MutationMark?
                if case .success(let saved) = result, saved.duplicate, let mid = write.mid {
                    mark = MutationMark(mid: mid, appliedSeq: saved.seq)
                }
                return [Emission(.responseTodo(write, result), .internal, mark: mark)]
            default:
                return []
            }
        }
    }
}
