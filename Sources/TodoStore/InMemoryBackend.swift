import EventStream
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import TodoApp

/// Keeps everything in memory: for tests, and for runs that need no durability.
/// `failCommits` makes commits fail, to test the `unavailable` path.
final class InMemoryBackend: StorageBackend {
    private struct State {
        var todos: [UUID: (rowID: Int64, todo: Todo)] = [:]
        /// The journal in seq order from `journalStart` on (the entries before it are pruned
        /// and dropped from the array once they are half of it, so a prune is not a pass over
        /// every entry kept).
        var journal: [JournalEntry] = []
        var journalStart = 0
        var failCommits = false

        var retained: ArraySlice<JournalEntry> { journal[journalStart...] }

        mutating func prune(keepFrom: UInt64) {
            // Entries are in seq order: the first one kept is found by bisection.
            var (low, high) = (journalStart, journal.count)
            while low < high {
                let middle = (low + high) / 2
                if journal[middle].seq < keepFrom { low = middle + 1 } else { high = middle }
            }
            journalStart = low
            if journalStart > 1024, journalStart * 2 > journal.count {
                journal.removeFirst(journalStart)
                journalStart = 0
            }
        }
    }

    private let state = NIOLockedValueBox(State())
    let epoch: String

    let retention: JournalRetention

    init(epoch: String = UUID().uuidString.lowercased(), retention: JournalRetention) {
        self.epoch = epoch
        self.retention = retention
    }

    func setFailCommits(_ fail: Bool) { state.withLockedValue { $0.failCommits = fail } }

    func load() async throws -> LoadedState {
        state.withLockedValue { state in
            let head = state.retained.last?.seq ?? 0
            return LoadedState(
                todos: Array(state.todos.values),
                position: JournalPosition(epoch: epoch, head: head, oldest: state.retained.first?.seq ?? head + 1)
            )
        }
    }

    struct CommitFailed: Error {}

    nonisolated(nonsending) func commit(_ batch: [CommitRecord], recordedAt: Int64, prune: JournalPrune?) async throws {
        try state.withLockedValue { state in
            if state.failCommits { throw CommitFailed() }
            for record in batch {
                state.todos[record.todo.id] = (record.rowID, record.todo)
                state.journal.append(record.entry)
            }
            // Entries are kept by count only: this backend records no times.
            if let prune { state.prune(keepFrom: prune.keepFrom) }
        }
    }

    func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry] {
        state.withLockedValue { state in state.retained.filter { $0.seq > after && $0.seq <= through } }
    }

    func oldestRetained() async throws -> UInt64? {
        state.withLockedValue { $0.retained.first?.seq }
    }

    nonisolated(nonsending) func probe() async throws {
        if state.withLockedValue({ $0.failCommits }) { throw CommitFailed() }
    }

    /// No files.
    nonisolated(nonsending) func checkFiles() async throws {}

    func close() async {}
}

extension GroupCommitStore {
    /// A store that keeps everything in memory, run by `executor` (by default an event loop:
    /// its commits never block).
    public static func inMemory(
        retention: JournalRetention = JournalRetention(),
        executor: any SerialExecutor = MultiThreadedEventLoopGroup.singleton.any().executor,
        now: @escaping @Sendable () -> Timestamp = Timestamp.now
    ) async -> (GroupCommitStore, InMemoryFaults) {
        let backend = InMemoryBackend(retention: retention)
        let state = LoadedState(todos: [], position: JournalPosition(epoch: backend.epoch, head: 0, oldest: 1))
        let store = GroupCommitStore(backend: backend, state: state, executor: executor, now: now)
        return (store, InMemoryFaults(backend: backend))
    }
}

/// Lets a test make an in-memory store's commits fail.
public struct InMemoryFaults: Sendable {
    fileprivate let backend: InMemoryBackend
    public func failCommits(_ fail: Bool) { backend.setFailCommits(fail) }
}
