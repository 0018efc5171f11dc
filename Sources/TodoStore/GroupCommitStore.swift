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
    private let maxBatch: Int
    private let now: @Sendable () -> Timestamp

    private var todos: [UUID: (rowID: Int64, todo: Todo)] = [:]
    private var nextRowID: Int64 = 1
    private var epoch: String
    private var head: UInt64
    private var pending: [(write: TodoWrite, continuation: CheckedContinuation<Result<SavedTodo, AppError>, Never>)] =
        []
    private var committing = false
    private var healthy = true
    private var commitsSincePrune = 0
    private var commitLatency = LatencyHistogram()

    init(backend: any StorageBackend, state: LoadedState, maxBatch: Int, now: @escaping @Sendable () -> Timestamp) {
        self.backend = backend
        self.maxBatch = max(1, maxBatch)
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
    public var metrics: (commitLatency: LatencyHistogram, pendingWrites: Int) { (commitLatency, pending.count) }

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
            pending.append((write, continuation))
            // Queued in order: the session's next write may queue behind it (see `RequestTicket`).
            ticket?.admitted()
            if !committing {
                committing = true
                Task { await self.commitLoop() }
            }
        }
    }

    private func commitLoop() async {
        while !pending.isEmpty {
            let take = min(maxBatch, pending.count)
            let batch = Array(pending.prefix(take))
            pending.removeFirst(take)
            await commit(batch)
        }
        committing = false
    }

    private func commit(
        _ batch: [(write: TodoWrite, continuation: CheckedContinuation<Result<SavedTodo, AppError>, Never>)]
    ) async {
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
            commitsSincePrune += 1
            let prune = commitsSincePrune >= 64
            if prune { commitsSincePrune = 0 }
            let started = ContinuousClock.now
            defer { commitLatency.record(ContinuousClock.now - started) }
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
        for (item, result) in zip(batch, results) { item.continuation.resume(returning: result) }
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
