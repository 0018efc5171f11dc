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
        var journal: [JournalEntry] = []
        var failCommits = false
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
            let head = state.journal.last?.seq ?? 0
            return LoadedState(
                todos: Array(state.todos.values),
                position: JournalPosition(epoch: epoch, head: head, oldest: state.journal.first?.seq ?? head + 1)
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
            if let prune { state.journal.removeAll { $0.seq < prune.keepFrom } }
        }
    }

    func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry] {
        state.withLockedValue { state in state.journal.filter { $0.seq > after && $0.seq <= through } }
    }

    func oldestRetained() async throws -> UInt64? {
        state.withLockedValue { $0.journal.first?.seq }
    }

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
