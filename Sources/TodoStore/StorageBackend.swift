import EventStream
import Foundation
import TodoApp

/// One committed change: the todo as saved and the journal entry of the broadcast it causes.
struct CommitRecord: Sendable {
    /// Creation order, used to order todos with equal `createdAt`.
    let rowID: Int64
    let todo: Todo
    let entry: JournalEntry
}

/// What a backend holds when it is opened.
struct LoadedState: Sendable {
    var todos: [(rowID: Int64, todo: Todo)]
    var position: JournalPosition
}

/// Where a `GroupCommitStore` keeps its data. A backend commits a whole batch atomically or
/// nothing of it.
protocol StorageBackend: Sendable {
    func load() async throws -> LoadedState
    /// Commits the batch (todos and journal entries) in one transaction; with `prune`, the
    /// same transaction drops journal entries beyond the retention.
    nonisolated(nonsending) func commit(_ batch: [CommitRecord], prune: Bool) async throws
    func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry]
    func oldestRetained() async throws -> UInt64?
    func close() async
}
