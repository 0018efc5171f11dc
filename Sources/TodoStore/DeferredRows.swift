import Foundation
import TodoApp

/// The todos whose newest change the SQLite journal holds but the `todos` table does not yet:
/// which rows a commit writes, as a state machine with no I/O (`SQLiteWriter` runs it).
///
/// A commit must make its batch durable, and the journal entry of a change holds the whole todo
/// (its payload is the todo's list row, with its row id beside it). Writing the todo's row in
/// the same commit as well cost a random page of the table per change: with 64 todos edited in
/// turn, 8 of a batch's 21 WAL pages, and with 10,000 todos, 27 of 46. So a change's row waits
/// here, and a todo changed again meanwhile is written once for all its changes.
///
/// Bounds: at most `limit` todos wait (past it, the oldest are written with the next commit);
/// none waits more than `maxLag` seqs (so that a restart, which applies the journal after the
/// table's watermark, reads at most about that many entries); and a prune never drops the
/// journal entry of a todo still waiting (the todos it would drop are written first, in the
/// same commit). The lag is at most half the journal the store keeps, so that rows come due a
/// few per commit as the lag passes them, not in a burst at the prune that would drop their
/// entries. With `limit` 0, every row is written with its own commit.
///
/// The watermark: every journal entry up to it is in the table; after a crash, the store applies
/// the entries after it to the table's rows (`SQLiteBackend.load`).
struct DeferredRows {
    struct Row: Equatable {
        var rowID: Int64
        var todo: Todo
        /// The seq of the oldest change not in the table, and when it was recorded (ms).
        let since: UInt64
        let sinceRecordedAt: Int64
    }

    /// Todos that may wait at most.
    let limit: Int
    /// Seqs that a todo may wait at most.
    let maxLag: UInt64

    private(set) var rows: [UUID: Row] = [:]
    /// The waiting todos, oldest change first: `order[front...]` holds each key of `rows` once
    /// (a row is taken only at the front, and a todo changed again while it waits keeps its
    /// place).
    private var order: [UUID] = []
    private var front = 0

    /// Entries of the journal a todo may wait for, per todo that may wait.
    static let lagPerTodo: UInt64 = 8

    /// `retainedEntries`: the journal entries the store keeps at most.
    init(limit: Int, retainedEntries: UInt64 = .max) {
        let limit = max(0, limit)
        self.init(limit: limit, maxLag: min(UInt64(limit) * Self.lagPerTodo, retainedEntries / 2))
    }

    private init(limit: Int, maxLag: UInt64) {
        self.limit = limit
        self.maxLag = maxLag
    }

    /// The same bounds, with nothing waiting.
    var emptied: DeferredRows { DeferredRows(limit: limit, maxLag: maxLag) }

    var isEmpty: Bool { rows.isEmpty }

    /// Entries in the list of waiting todos, passed ones included (bounded by compaction).
    var listed: Int { order.count }

    /// A change of `todo` (row `rowID`) with `seq`, recorded at `recordedAt`, is in the journal.
    mutating func changed(_ todo: Todo, rowID: Int64, seq: UInt64, recordedAt: Int64) {
        if var row = rows[todo.id] {
            row.todo = todo
            row.rowID = rowID
            rows[todo.id] = row
        } else {
            rows[todo.id] = Row(rowID: rowID, todo: todo, since: seq, sinceRecordedAt: recordedAt)
            order.append(todo.id)
        }
    }

    /// Takes the rows the commit that moves the head to `head` writes (oldest first): past the
    /// limit, waiting longer than `maxLag`, or holding a journal entry that `prune` drops.
    mutating func takeDue(head: UInt64, prune: JournalPrune?) -> [Row] {
        var due: [Row] = []
        while let oldest {
            let blocksPrune =
                prune.map { prune in
                    oldest.since < prune.keepFrom || prune.cutoff.map { oldest.sinceRecordedAt < $0 } ?? false
                } ?? false
            guard rows.count > limit || oldest.since &+ maxLag <= head || blocksPrune else { break }
            rows[oldest.todo.id] = nil
            front += 1
            due.append(oldest)
        }
        compact()
        return due
    }

    /// Takes every waiting row (oldest first): the store is closing.
    mutating func takeAll() -> [Row] {
        var all: [Row] = []
        while let oldest {
            rows[oldest.todo.id] = nil
            front += 1
            all.append(oldest)
        }
        compact()
        return all
    }

    /// Every journal entry up to this seq is in the table, for a journal whose head is `head`.
    func watermark(head: UInt64) -> UInt64 {
        guard let oldest else { return head }
        return oldest.since - 1
    }

    /// The row waiting longest.
    private var oldest: Row? { front < order.count ? rows[order[front]] : nil }

    /// The waiting rows, oldest change first.
    var waiting: [Row] { order[front...].compactMap { rows[$0] } }

    /// The todo that the journal entry `seq` holds, for a restart that applies it to the table:
    /// its payload is the todo's list row, and `rowID` its row id (nil only in entries from
    /// before the watermark was kept, which no restart applies).
    static func todo(inEntry seq: UInt64, payload: [UInt8], rowID: Int64?) throws(StoreError) -> Todo {
        guard rowID != nil, let todo = TodoWireCodec.todo(inBroadcastPayload: payload) else {
            throw StoreError(message: "Journal entry \(seq) after the watermark holds no todo and row id.")
        }
        return todo
    }

    /// Drops the entries already passed once they are half of `order` (amortised: each entry
    /// is moved at most once per entry passed).
    private mutating func compact() {
        guard front > 0, front * 2 >= order.count else { return }
        order.removeFirst(front)
        front = 0
    }
}
