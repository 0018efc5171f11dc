import Foundation
import Testing

@testable import TodoApp
@testable import TodoStore

/// Which rows a commit writes when todos may wait in the journal: no database, seqs by hand.
@Suite struct DeferredRowsTests {
    private let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)

    private func todo(_ title: String, id: UUID = UUID(), version: Int = 1) -> Todo {
        Todo(id: id, createdAt: created, title: title, version: version)
    }

    @Test func aTodoChangedAgainWaitsOnceWithItsNewestChangeAndItsOldestSeq() {
        var rows = DeferredRows(limit: 4)
        let first = todo("a")
        var again = first
        again.title = "a2"
        again.version = 2
        rows.changed(first, rowID: 1, seq: 1, recordedAt: 10)
        rows.changed(again, rowID: 1, seq: 2, recordedAt: 20)
        #expect(rows.takeDue(head: 2, prune: nil).isEmpty)
        #expect(rows.rows.count == 1)
        #expect(rows.rows[first.id] == DeferredRows.Row(rowID: 1, todo: again, since: 1, sinceRecordedAt: 10))
        // Every entry before the oldest waiting change is in the table.
        #expect(rows.watermark(head: 2) == 0)
    }

    @Test func pastTheLimitTheOldestAreWrittenFirst() {
        var rows = DeferredRows(limit: 2)
        let todos = (0..<5).map { todo("t\($0)") }
        for (index, todo) in todos.enumerated() {
            rows.changed(todo, rowID: Int64(index + 1), seq: UInt64(index + 1), recordedAt: 0)
        }
        let due = rows.takeDue(head: 5, prune: nil)
        #expect(due.map(\.todo.title) == ["t0", "t1", "t2"])
        #expect(Set(rows.rows.keys) == [todos[3].id, todos[4].id])
        #expect(rows.watermark(head: 5) == 3)
        // A todo written and changed again waits anew, behind the others.
        rows.changed(todos[0], rowID: 1, seq: 6, recordedAt: 0)
        #expect(rows.takeDue(head: 6, prune: nil).map(\.todo.title) == ["t3"])
        #expect(rows.watermark(head: 6) == 4)
        #expect(rows.takeAll().map(\.todo.title) == ["t4", "t0"])
        #expect(rows.isEmpty)
        #expect(rows.watermark(head: 6) == 6)
    }

    @Test func noTodoWaitsLongerThanItsLagInSeqs() {
        var rows = DeferredRows(limit: 2)
        #expect(rows.maxLag == 16)
        let waiting = todo("old")
        rows.changed(waiting, rowID: 1, seq: 1, recordedAt: 0)
        #expect(rows.takeDue(head: 16, prune: nil).isEmpty)
        #expect(rows.takeDue(head: 17, prune: nil).map(\.todo.id) == [waiting.id])
        #expect(rows.watermark(head: 17) == 17)
    }

    /// Where the journal keeps few entries, a row waits at most half of them: it comes due by
    /// its lag, a few per commit, before the prune that would drop its entry.
    @Test func theLagIsAtMostHalfTheJournalKept() {
        #expect(DeferredRows(limit: 16_384, retainedEntries: 100_000).maxLag == 50_000)
        #expect(DeferredRows(limit: 1_024, retainedEntries: 100_000).maxLag == 8_192)
        #expect(DeferredRows(limit: 0, retainedEntries: 100_000).maxLag == 0)
        var rows = DeferredRows(limit: 100, retainedEntries: 10)
        #expect(rows.maxLag == 5)
        let steady = JournalPrune(head: 12, retention: JournalRetention(maxEntries: 10, maxAgeSeconds: 0), now: 0)
        #expect(steady.keepFrom == 3)
        // A row changed at seq 4 is due by its lag at head 9, before any prune reaches it.
        rows.changed(todo("lagging"), rowID: 1, seq: 4, recordedAt: 0)
        #expect(rows.takeDue(head: 8, prune: steady).isEmpty)
        #expect(rows.takeDue(head: 9, prune: nil).map(\.todo.title) == ["lagging"])
        // The bounds survive a start over (the writer's read back after a failed commit).
        #expect(rows.emptied.maxLag == 5 && rows.emptied.limit == 100 && rows.emptied.isEmpty)
    }

    @Test func aPruneTakesTheRowsWhoseEntriesItWouldDrop() {
        var rows = DeferredRows(limit: 100)
        let early = todo("early")
        let late = todo("late")
        rows.changed(early, rowID: 1, seq: 5, recordedAt: 1_000)
        rows.changed(late, rowID: 2, seq: 9, recordedAt: 5_000)
        let byCount = JournalPrune(head: 9, retention: JournalRetention(maxEntries: 4, maxAgeSeconds: 0), now: 0)
        #expect(byCount.keepFrom == 6)
        #expect(rows.takeDue(head: 9, prune: byCount).map(\.todo.id) == [early.id])
        #expect(rows.watermark(head: 9) == 8)
        // By age: what was recorded before the cutoff.
        let byAge = JournalPrune(head: 9, retention: JournalRetention(maxEntries: 100, maxAgeSeconds: 1), now: 6_500)
        #expect(byAge.cutoff == 5_500)
        #expect(rows.takeDue(head: 9, prune: byAge).map(\.todo.id) == [late.id])
        #expect(rows.watermark(head: 9) == 9)
    }

    @Test func withNoRoomEveryRowIsWrittenWithItsCommit() {
        var rows = DeferredRows(limit: 0)
        let one = todo("one")
        let two = todo("two")
        rows.changed(one, rowID: 1, seq: 1, recordedAt: 0)
        rows.changed(two, rowID: 2, seq: 2, recordedAt: 0)
        #expect(rows.takeDue(head: 2, prune: nil).map(\.todo.id) == [one.id, two.id])
        #expect(rows.watermark(head: 2) == 2)
        #expect(DeferredRows(limit: -3).limit == 0)
    }

    /// The list of waiting todos does not keep the ones already written: under a steady stream,
    /// it is compacted as it goes.
    @Test func aSteadyStreamKeepsTheWaitingListBounded() {
        var rows = DeferredRows(limit: 8)
        for seq in UInt64(1)...10_000 {
            rows.changed(todo("t\(seq)"), rowID: Int64(seq), seq: seq, recordedAt: 0)
            let due = rows.takeDue(head: seq, prune: nil)
            #expect(due.count == (seq > 8 ? 1 : 0))
        }
        #expect(rows.rows.count == 8)
        #expect(rows.watermark(head: 10_000) == 9_992)
        #expect(rows.listed <= 17)
    }

    @Test func anEntryWithoutItsTodoOrRowIDIsAnError() throws {
        let saved = todo("kept")
        let payload = TodoWireCodec.broadcastRecord(for: saved).payload
        #expect(try DeferredRows.todo(inEntry: 3, payload: payload, rowID: 7) == saved)
        #expect(throws: StoreError.self) { try DeferredRows.todo(inEntry: 3, payload: payload, rowID: nil) }
        #expect(throws: StoreError.self) { try DeferredRows.todo(inEntry: 3, payload: Array("{}".utf8), rowID: 7) }
    }
}
