import Foundation
import TodoApp

/// Every todo in a PostgreSQL database as of one head, kept by a daemon so that a list or
/// detail read is answered without reading every row again: only the journal's entries after
/// that head.
///
/// A full list read sets it; this daemon's own commits move it on when they follow it directly
/// (nothing else committed in between); the journal's entries after its head move it on
/// otherwise (another daemon's commits: each entry's payload holds its todo as saved). When
/// that cannot be (the journal no longer holds them, the pool moved to another server), the
/// next full read replaces it. A read trusts it only at the durable head it finds in the
/// database (PostgresStore+Durability), on the same server (`generation`, the pool's client).
struct KnownTodos {
    /// The head these todos are the state at.
    private(set) var head: Int64
    /// `FailoverPool.clientGeneration` when they were read.
    let generation: Int
    private var todos: [UUID: (rowID: Int64, todo: Todo)]
    private var sorted: [Todo]?

    init(head: Int64, generation: Int, rows: [(rowID: Int64, todo: Todo)]) {
        self.head = head
        self.generation = generation
        var todos: [UUID: (rowID: Int64, todo: Todo)] = [:]
        todos.reserveCapacity(rows.count)
        for row in rows { todos[row.todo.id] = row }
        self.todos = todos
    }

    /// Every todo in list order (newest first, as the database's list query orders them).
    mutating func list() -> [Todo] {
        if let sorted { return sorted }
        let list = GroupCommitStore.listOrder(todos).map(\.todo)
        sorted = list
        return list
    }

    func todo(id: UUID) -> Todo? { todos[id]?.todo }

    /// The creation order of the todo with `id` when a save at `seq` is its first here: a
    /// todo's creation order is the seq of its first save, and a later save keeps it.
    func creationOrder(of id: UUID, firstSavedAt seq: Int64) -> Int64 {
        todos[id]?.rowID ?? seq
    }

    /// A commit of this daemon took the seqs `first`... and left the head at `newHead`, writing
    /// `rows` (each todo's final state and the offset of its first save in the batch). Applies
    /// it and returns true when it follows this state directly; false when something else
    /// committed in between (or on another server): this state is then behind.
    mutating func committed(
        first: Int64,
        newHead: Int64,
        rows: [(offset: Int64, todo: Todo)],
        generation: Int
    ) -> Bool {
        guard generation == self.generation, first - 1 == head else { return false }
        for row in rows {
            todos[row.todo.id] = (creationOrder(of: row.todo.id, firstSavedAt: first - 1 + row.offset), row.todo)
        }
        head = newHead
        sorted = nil
        return true
    }

    /// The journal's entries after this head, in seq order through `newHead` (each one's payload
    /// a broadcast holding its todo as saved), move these todos on. Entries at or before this
    /// head are already applied and skipped. False, with nothing changed, when they do not reach
    /// from here to `newHead` without a gap or one cannot be read.
    mutating func learned(_ entries: [(seq: Int64, payload: [UInt8])], through newHead: Int64) -> Bool {
        guard newHead > head else { return true }
        var expected = head + 1
        var changes: [UUID: (rowID: Int64, todo: Todo)] = [:]
        for entry in entries where entry.seq > head {
            guard entry.seq == expected, let todo = TodoWireCodec.todo(inBroadcastPayload: entry.payload) else {
                return false
            }
            let rowID = changes[todo.id]?.rowID ?? creationOrder(of: todo.id, firstSavedAt: entry.seq)
            changes[todo.id] = (rowID, todo)
            expected += 1
        }
        guard expected - 1 == newHead else { return false }
        for (id, change) in changes { todos[id] = change }
        head = newHead
        sorted = nil
        return true
    }

    /// These todos as a batch's writes change them, for the batch's reads.
    func view() -> View { View(base: self) }

    /// The known todos with a batch's saves laid over them, in the batch's order.
    struct View {
        private var base: KnownTodos
        private var saves: [UUID: (rowID: Int64, todo: Todo)] = [:]

        fileprivate init(base: KnownTodos) { self.base = base }

        /// A write of the batch saved `todo` at `seq` (its creation order, if it is new).
        mutating func saved(_ todo: Todo, seq: UInt64) {
            let rowID = saves[todo.id]?.rowID ?? base.creationOrder(of: todo.id, firstSavedAt: Int64(seq))
            saves[todo.id] = (rowID, todo)
        }

        /// The todo with `id`, or every todo in list order, as the saves so far left them.
        mutating func read(id: UUID?) -> [Todo] {
            if let id { return (saves[id]?.todo ?? base.todo(id: id)).map { [$0] } ?? [] }
            guard !saves.isEmpty else { return base.list() }
            return GroupCommitStore.listOrder(base.todos.merging(saves) { _, saved in saved }).map(\.todo)
        }
    }
}
