import EventStream
import Foundation
import TodoApp

/// The todo store: todos cached in memory, every write committed durably through a backend in
/// group commits.
///
/// Writes queue up while a batch commits; the next batch takes all of them at once (up to
/// `maxBatch`), so many concurrent writes cost one transaction. Each write is applied to the
/// stored todo as it will be after the writes before it in the batch, gets the next seq, and
/// is answered only after its batch commits. A failed commit answers every write of the batch
/// with `unavailable` and changes nothing.
public actor GroupCommitStore: TodoStore, JournalReader {
    private let backend: any StorageBackend
    private let now: @Sendable () -> Timestamp

    private var todos: [UUID: (rowID: Int64, todo: Todo)] = [:]
    private var nextRowID: Int64 = 1
    private var epoch: String
    private var head: UInt64
    /// Not bounded here: each session has at most `max_pipelined_frames` requests in flight.
    private var queue: WriteQueue
    private var healthy = true

    init(backend: any StorageBackend, state: LoadedState, maxBatch: Int, now: @escaping @Sendable () -> Timestamp) {
        self.backend = backend
        self.queue = WriteQueue(maxBatch: maxBatch)
        self.now = now
        self.epoch = state.position.epoch
        self.head = state.position.head
        for entry in state.todos {
            todos[entry.todo.id] = entry
            nextRowID = max(nextRowID, entry.rowID + 1)
        }
    }

    /// Whether the last commit succeeded.
    public var isHealthy: Bool { healthy }

    public var count: Int { todos.count }

    /// Commit latency (one observation per group commit), and the writes waiting for the
    /// next commit.
    public var metrics: (commitLatency: LatencyHistogram, pendingWrites: Int) { queue.metrics }

    public func readTodos(id: UUID?) async throws(AppError) -> [Todo] {
        if let id { return todos[id].map { [$0.todo] } ?? [] }
        return todos.values
            .sorted { lhs, rhs in
                lhs.todo.createdAt != rhs.todo.createdAt
                    ? lhs.todo.createdAt > rhs.todo.createdAt : lhs.rowID > rhs.rowID
            }
            .map(\.todo)
    }

    public func write(_ write: TodoWrite) async -> Result<SavedTodo, AppError> {
        let ticket = RequestTicket.current
        return await withCheckedContinuation { continuation in
            if queue.enqueue(write, continuation, ticket: ticket) { Task { await self.commitLoop() } }
        }
    }

    private func commitLoop() async {
        while let batch = queue.nextBatch() { await commit(batch) }
    }

    private func commit(_ batch: [(write: TodoWrite, answer: WriteQueue.Answer)]) async {
        let time = now()
        var staged: [UUID: (rowID: Int64, todo: Todo)] = [:]
        var rowID = nextRowID
        var seq = head
        var records: [CommitRecord] = []
        var results: [Result<SavedTodo, AppError>] = []
        for item in batch {
            let stored = staged[item.write.id] ?? todos[item.write.id]
            switch item.write.apply(to: stored?.todo, now: time) {
            case .success(let todo):
                let row: Int64
                if let stored {
                    row = stored.rowID
                } else {
                    row = rowID
                    rowID += 1
                }
                seq += 1
                let record = TodoWireCodec.broadcastRecord(for: todo)
                records.append(
                    CommitRecord(
                        rowID: row,
                        todo: todo,
                        entry: JournalEntry(seq: seq, type: record.type, payload: record.payload)
                    )
                )
                staged[todo.id] = (row, todo)
                results.append(.success(SavedTodo(todo: todo, seq: seq)))
            case .failure(let error):
                results.append(.failure(error))
            }
        }
        if !records.isEmpty {
            let prune = queue.pruneDue()
            let started = ContinuousClock.now
            defer { queue.recordCommit(since: started) }
            do {
                try await backend.commit(records, prune: prune)
                healthy = true
                for (id, entry) in staged { todos[id] = entry }
                nextRowID = rowID
                head = seq
            } catch {
                healthy = false
                results = results.map { result in
                    if case .success = result { return .failure(.unavailable) }
                    return result
                }
            }
        }
        for (item, result) in zip(batch, results) { item.answer.resume(returning: result) }
    }

    // MARK: JournalReader

    public func position() async throws -> JournalPosition {
        let head = self.head
        let oldest = try await backend.oldestRetained() ?? head + 1
        return JournalPosition(epoch: epoch, head: head, oldest: min(oldest, head + 1))
    }

    public func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry] {
        try await backend.entries(after: after, through: min(through, head))
    }

    public func close() async {
        await backend.close()
    }
}
