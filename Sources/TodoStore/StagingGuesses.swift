import Foundation
import TodoApp

/// The last state this daemon saw of the todos it wrote on PostgreSQL, so that a batch of writes
/// can be staged without reading its todos first: one round trip per batch instead of two.
///
/// They are guesses, never answers. The commit procedure checks every touched todo's version
/// under the `stream_state` lock and refuses the whole batch when one differs (another daemon
/// changed it, or it exists where the guess said it did not); the batch is then staged again
/// from a read, and the guesses for its todos are dropped. A batch whose writes all failed
/// would commit nothing, so nothing would check them: such a batch is read too (`stored`'s
/// caller sees no journal entries and reads).
///
/// A todo not guessed is taken as absent only for a write that would create it (a save with no
/// expected version): the check then confirms it is new. Any other write to a todo not guessed
/// is read first, so a daemon that has not seen a todo never pays for a refused commit to learn
/// it. Every todo the daemon knows from a full read (`KnownTodos`) is a guess too.
struct StagingGuesses {
    /// Todos remembered at most; past it, the oldest half is dropped (0: none, every batch reads).
    let limit: Int
    private var todos: [UUID: (todo: Todo, stamp: UInt64)] = [:]
    private var stamp: UInt64 = 0

    init(limit: Int) {
        self.limit = max(0, limit)
    }

    var count: Int { todos.count }

    /// The todos to stage `writes` on, as `PostgresStore.stage` takes them (creation order
    /// unknown: 0, which staging does not use), or nil when one of them must be read.
    func stored(
        for writes: [TodoWrite],
        time: Timestamp,
        known: KnownTodos?
    ) -> [UUID: (rowID: Int64, todo: Todo)]? {
        guard limit > 0 else { return nil }
        var stored: [UUID: (rowID: Int64, todo: Todo)] = [:]
        stored.reserveCapacity(writes.count)
        var absent = Set<UUID>()
        for write in writes where stored[write.id] == nil && !absent.contains(write.id) {
            if let guess = todos[write.id]?.todo ?? known?.todo(id: write.id) {
                stored[write.id] = (0, guess)
            } else if case .success = write.apply(to: nil, now: time) {
                absent.insert(write.id)
            } else {
                return nil
            }
        }
        return stored
    }

    /// A commit wrote these todos in this state.
    mutating func remember(_ written: some Sequence<Todo>) {
        guard limit > 0 else { return }
        for todo in written {
            stamp += 1
            todos[todo.id] = (todo, stamp)
        }
        if todos.count > limit { dropOldestHalf() }
    }

    /// A commit staged on guesses for these todos was refused: at least one of them is wrong.
    mutating func forget(_ ids: some Sequence<UUID>) {
        for id in ids { todos[id] = nil }
    }

    private mutating func dropOldestHalf() {
        let keep = limit / 2
        guard keep > 0 else {
            todos.removeAll()
            return
        }
        let cutoff = todos.values.map(\.stamp).sorted(by: >)[keep - 1]
        todos = todos.filter { $0.value.stamp >= cutoff }
    }
}
