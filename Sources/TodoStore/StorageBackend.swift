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
    /// The journal's entries that carry a client mutation id (`mid`).
    var mutations: [RememberedMutations.Applied] = []
}

/// Where a `GroupCommitStore` keeps its data. A backend commits a whole batch atomically or
/// nothing of it.
protocol StorageBackend: Sendable {
    /// How much of the journal to keep.
    var retention: JournalRetention { get }
    func load() async throws -> LoadedState
    /// Commits the batch (todos and journal entries, each recorded at `recordedAt`, ms since
    /// 1970) in one transaction; with `prune`, the same transaction drops the journal entries
    /// it names.
    nonisolated(nonsending) func commit(_ batch: [CommitRecord], recordedAt: Int64, prune: JournalPrune?) async throws
    func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry]
    func oldestRetained() async throws -> UInt64?
    /// A small write that storage must accept, changing nothing the store reads: after a failed
    /// commit, how the store learns that storage takes writes again. Throws what a commit would.
    nonisolated(nonsending) func probe() async throws
    /// Whether storage's files are still there, with no write (what `/healthz` asks while
    /// commits succeed). Throws what a commit would once they are not.
    nonisolated(nonsending) func checkFiles() async throws
    func close() async
}
