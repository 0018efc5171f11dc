import Foundation
import Testing
import TodoApp

@testable import TodoStore

/// A todo made at `createdAt` (ms since 1970), version 1.
private func todo(_ title: String, createdAt: Int64) -> Todo {
    Todo(
        id: UUID(),
        createdAt: Timestamp(millisecondsSince1970: createdAt),
        title: title,
        subtitle: "",
        priority: .normal,
        completedAt: nil,
        deleted: false,
        version: 1
    )
}

/// `todo` saved once more with the title "a renamed".
private func renamed(_ todo: Todo) -> Todo {
    var renamed = todo
    renamed.title = "a renamed"
    renamed.version += 1
    return renamed
}

/// The todos a PostgreSQL daemon keeps as of a head (`KnownTodos`): moved on only by commits
/// that follow it directly, answering only for its own head and server.
@Suite struct KnownTodosTests {
    @Test func listsNewestFirstAndTheLaterStoredFirstWithinAMillisecond() {
        let old = todo("old", createdAt: 1_000)
        let first = todo("first", createdAt: 2_000)
        let second = todo("second", createdAt: 2_000)
        var known = KnownTodos(head: 9, generation: 1, rows: [(3, old), (5, first), (7, second)])
        let list = known.list()
        #expect(list.map(\.title) == ["second", "first", "old"])
        #expect(known.todo(id: first.id)?.title == "first")
        #expect(known.todo(id: UUID()) == nil)
    }

    @Test func aCommitThatFollowsDirectlyMovesItOnKeepingEachTodosCreationOrder() {
        let a = todo("a", createdAt: 1_000)
        var known = KnownTodos(head: 10, generation: 1, rows: [(4, a)])
        let renamed = renamed(a)
        let b = todo("b", createdAt: 1_000)
        // Seqs 11 and 12: the update of a (offset 1) and the creation of b (offset 2).
        let rows: [(offset: Int64, todo: Todo)] = [(1, renamed), (2, b)]
        let moved = known.committed(first: 11, newHead: 12, rows: rows, generation: 1)
        #expect(moved)
        #expect(known.head == 12)
        // b's creation order is its first seq (12), a keeps 4: b lists first within the millisecond.
        let list = known.list()
        #expect(list.map(\.title) == ["b", "a renamed"])
        #expect(known.todo(id: a.id)?.version == 2)
    }

    @Test func aCommitAfterAGapOrOnAnotherServerLeavesItUntouched() {
        let a = todo("a", createdAt: 1_000)
        var known = KnownTodos(head: 10, generation: 1, rows: [(4, a)])
        let b = todo("b", createdAt: 2_000)
        let rows: [(offset: Int64, todo: Todo)] = [(1, b)]
        let afterGap = known.committed(first: 12, newHead: 12, rows: rows, generation: 1)
        #expect(!afterGap, "seq 11 is someone else's")
        let elsewhere = known.committed(first: 11, newHead: 11, rows: rows, generation: 2)
        #expect(!elsewhere, "the pool moved")
        let list = known.list()
        #expect(known.head == 10 && list.map(\.title) == ["a"])
    }

    /// The journal entry a commit of `todo` at `seq` leaves (its broadcast's payload).
    private func entry(_ todo: Todo, seq: Int64) -> (seq: Int64, payload: [UInt8]) {
        (seq, TodoWireCodec.broadcastRecord(for: todo).payload)
    }

    @Test func journalEntriesAfterItsHeadMoveItOnEachNewTodoCreatedAtItsFirstSeq() {
        let a = todo("a", createdAt: 1_000)
        var known = KnownTodos(head: 10, generation: 1, rows: [(4, a)])
        let renamed = renamed(a)
        let b = todo("b", createdAt: 1_000)
        var bDone = b
        bDone.completedAt = Timestamp(millisecondsSince1970: 3_000)
        bDone.version = 2
        // Seq 10 is already applied and skipped; b is created at 12 and saved again at 13.
        let entries = [entry(a, seq: 10), entry(renamed, seq: 11), entry(b, seq: 12), entry(bDone, seq: 13)]
        let moved = known.learned(entries, through: 13)
        #expect(moved)
        #expect(known.head == 13)
        let list = known.list()
        #expect(list.map(\.title) == ["b", "a renamed"], "b's creation order is 12, after a's 4")
        #expect(known.todo(id: b.id)?.completedAt == Timestamp(millisecondsSince1970: 3_000))
        // A head already reached changes nothing.
        let again = known.learned([], through: 12)
        #expect(again && known.head == 13)
    }

    @Test func entriesWithAGapShortOfTheHeadOrUnreadableChangeNothing() {
        let a = todo("a", createdAt: 1_000)
        let b = todo("b", createdAt: 2_000)
        let start = KnownTodos(head: 10, generation: 1, rows: [(4, a)])
        let cases: [(entries: [(seq: Int64, payload: [UInt8])], head: Int64, why: String)] = [
            ([entry(b, seq: 12)], 12, "seq 11 is missing (pruned)"),
            ([entry(b, seq: 11)], 12, "short of the head (a change made by hand)"),
            ([(11, Array("{}".utf8))], 11, "not a todo's broadcast"),
            ([], 11, "no entries at all"),
        ]
        for (entries, head, why) in cases {
            var known = start
            let moved = known.learned(entries, through: head)
            let list = known.list()
            #expect(!moved, "\(why)")
            #expect(known.head == 10, "\(why)")
            #expect(list.map(\.title) == ["a"], "\(why)")
        }
    }
}

/// A batch's reads answered from the known todos and the batch's own saves before them.
@Suite struct KnownTodosViewTests {
    @Test func aReadSeesTheSavesBeforeItAndANewTodoTakesItsSeqAsCreationOrder() {
        let a = todo("a", createdAt: 5_000)
        let known = KnownTodos(head: 10, generation: 1, rows: [(4, a)])
        var view = known.view()
        let before = view.read(id: nil)
        #expect(before.map(\.title) == ["a"])
        let b = todo("b", createdAt: 5_000)
        view.saved(b, seq: 11)
        var renamed = a
        renamed.title = "a renamed"
        view.saved(renamed, seq: 12)
        let after = view.read(id: nil)
        // Same millisecond: b (creation order 11) lists before a (4).
        #expect(after.map(\.title) == ["b", "a renamed"])
        let detail = view.read(id: a.id)
        #expect(detail.map(\.title) == ["a renamed"])
        let missing = view.read(id: UUID())
        #expect(missing.isEmpty)
        var untouched = known
        let list = untouched.list()
        #expect(list.map(\.title) == ["a"], "the known todos themselves are not changed by a view")
    }
}
