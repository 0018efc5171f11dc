import EventStream
import Foundation
import NIOCore
import Testing
import TodoApp

@testable import TodoStore

/// The pure parts of the PostgreSQL commit path: which journal entries are this process's
/// (`LocalClaims`), and a batch applied to the todos it read (`PostgresStore.stage`).
@Suite struct PostgresCommitTests {
    @Test func theFollowerSkipsThisProcesssEntriesAndPublishesEveryoneElses() {
        let claims = LocalClaims(instance: "aaaa")
        let origin = claims.begin()
        #expect(origin.hasPrefix("aaaa:"))
        #expect(claims.begin() != origin, "every batch has an origin of its own")
        #expect(claims.passedByFollower(origin: origin, seq: 7))
        #expect(!claims.passedByFollower(origin: "bbbb:1", seq: 8), "another daemon's entry")
        #expect(!claims.passedByFollower(origin: "aaaab:1", seq: 9), "a prefix of the instance is not the instance")
        #expect(!claims.passedByFollower(origin: nil, seq: 10), "an entry written before origins existed")
        claims.finish(origin)
        #expect(claims.passedByFollower(origin: origin, seq: 7), "committed and finished: still left to the local path")
    }

    @Test func aBatchInDoubtThatTheFollowerSawCommittedAtTheFirstSeqItSaw() {
        let claims = LocalClaims(instance: "aaaa")
        let origin = claims.begin()
        #expect(claims.passedByFollower(origin: origin, seq: 41))
        #expect(claims.passedByFollower(origin: origin, seq: 42))
        #expect(claims.settleInDoubt(origin) == 41)
    }

    @Test func aBatchInDoubtThatNobodySawIsAbandonedAndThenPublishedIfItShowsUp() {
        let claims = LocalClaims(instance: "aaaa")
        let origin = claims.begin()
        #expect(claims.settleInDoubt(origin) == nil)
        #expect(!claims.passedByFollower(origin: origin, seq: 5), "it committed after all: every client must see it")
        #expect(!claims.passedByFollower(origin: origin, seq: 6))
        let next = claims.begin()
        #expect(claims.passedByFollower(origin: next, seq: 7), "other batches are unaffected")
    }

    @Test func abandonedBatchesAreBounded() {
        let claims = LocalClaims(instance: "aaaa")
        var origins: [String] = []
        for _ in 0..<(LocalClaims.maxAbandoned + 10) {
            let origin = claims.begin()
            #expect(claims.settleInDoubt(origin) == nil)
            origins.append(origin)
        }
        let remembered = origins.filter { !claims.passedByFollower(origin: $0, seq: 1) }.count
        #expect(remembered == LocalClaims.maxAbandoned)
    }

    @Test func stagingAppliesTheWritesInOrderAndChecksEveryTodoRead() throws {
        let now = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        let existing = Todo(createdAt: now, title: "kept", version: 3)
        let fresh = UUID()
        let missing = UUID()
        let writes = [
            TodoWrite(id: existing.id, expectedVersion: 3, change: .toggleComplete),
            TodoWrite(id: fresh, expectedVersion: nil, change: .update(TodoEdit(title: "new"))),
            TodoWrite(id: existing.id, expectedVersion: 3, change: .delete),  // stale: the toggle made it 4
            TodoWrite(id: missing, expectedVersion: nil, change: .toggleComplete),
            TodoWrite(id: existing.id, expectedVersion: 4, change: .update(TodoEdit(title: "renamed"))),
        ]
        let batch = PostgresStore.stage(
            writes,
            ids: [existing.id, fresh, missing],
            stored: [existing.id: (rowID: 12, todo: existing)],
            head: 100,
            time: now
        )
        #expect(batch.headAtRead == 100)
        #expect(batch.checks.map(\.id) == [existing.id.lowercased, fresh.lowercased, missing.lowercased])
        #expect(batch.checks.map(\.version) == [3, -1, -1])
        #expect(batch.entries.count == 3, "the toggle, the new todo and the rename")
        // One row per todo, as it is after the whole batch, with the offset of its first save.
        #expect(batch.rows.map(\.offset) == [1, 2])
        #expect(batch.rows[0].todo.title == "renamed" && batch.rows[0].todo.version == 5)
        #expect(batch.rows[1].todo.title == "new" && batch.rows[1].todo.version == 1)
        let results = batch.results(first: 101)
        #expect(try results[0].get().seq == 101)
        #expect(try results[1].get().seq == 102)
        #expect(results[2].failureCode == .conflict)
        #expect(results[3].failureCode == .notFound)
        #expect(try results[4].get().seq == 103)
    }

    @Test func stagingAnswersAMidAlreadyAppliedFromItsJournalEntryAndWritesNothingForIt() throws {
        let now = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        let todo = Todo(createdAt: now, title: "kept", version: 3)
        let earlier = TodoWireCodec.broadcastRecord(for: Todo(createdAt: now, title: "as it was", version: 2))
        let applied = JournalEntry(seq: 57, type: earlier.type, payload: earlier.payload, mid: "m:1")
        let writes = [
            TodoWrite(id: todo.id, expectedVersion: nil, change: .toggleComplete, mid: "m:1"),  // in the journal
            TodoWrite(id: todo.id, expectedVersion: nil, change: .toggleComplete, mid: "m:2"),  // new
            TodoWrite(id: todo.id, expectedVersion: nil, change: .delete, mid: "m:2"),  // earlier in this batch
            TodoWrite(id: todo.id, expectedVersion: nil, change: .toggleComplete),
        ]
        let batch = PostgresStore.stage(
            writes,
            ids: [todo.id],
            stored: [todo.id: (rowID: 12, todo: todo)],
            applied: [MutationKey("m:1"): applied],
            head: 100,
            time: now
        )
        #expect(batch.entries.map(\.mid) == ["m:2", nil], "only the new write and the one without a mid")
        let results = batch.results(first: 101)
        let journaled = try results[0].get()
        #expect(journaled.duplicate && journaled.seq == 57 && journaled.todo.title == "as it was")
        #expect(journaled.broadcastPayload == earlier.payload)
        let new = try results[1].get()
        #expect(!new.duplicate && new.seq == 101)
        let repeated = try results[2].get()
        #expect(repeated.duplicate && repeated.seq == 101 && repeated.broadcastPayload == new.broadcastPayload)
        #expect(try results[3].get().seq == 102)
    }

    // MARK: The entries a commit brings back (schema step 8)

    typealias Row = PostgresStore.CommitCall.Row

    func row(_ seqs: [Int64], origins: [String], head: Int64 = 100) -> Row {
        Row(
            head: head,
            seqs: seqs,
            types: seqs.map { _ in "ResponseTodoViewModel" },
            payloads: seqs.map { ByteBuffer(string: "{\"n\":\($0)}") },
            origins: origins,
            mids: seqs.map { $0 == 12 ? "m-12" : "" }
        )
    }

    @Test func aCommitsAnswerBecomesAPageOfTheEntriesBeforeItsBatch() throws {
        let answer = row([11, 12, 13], origins: ["bbbb:1", "aaaa:4", ""])
        let page = try #require(answer.followed(after: 10, through: 13, ownPrefix: "aaaa:"))
        #expect(page.entries.map(\.entry.seq) == [11, 12, 13])
        #expect(page.entries.map(\.withheld) == [false, true, false], "this process's own come without payloads")
        #expect(page.entries[0].entry.payload == Array("{\"n\":11}".utf8))
        #expect(page.entries[1].entry.payload.isEmpty)
        #expect(page.entries[1].entry.mid == "m-12")
        #expect(page.entries[0].entry.mid == nil, "an empty mid is none")
        #expect(page.entries[2].origin == nil, "an empty origin is none")
    }

    @Test func aCommitsAnswerThatDoesNotLineUpIsNoPage() {
        #expect(
            row([11, 13], origins: ["b:1", "b:2"]).followed(after: 10, through: 13, ownPrefix: "a:") == nil,
            "a gap"
        )
        #expect(
            row([11, 12], origins: ["b:1", "b:2"]).followed(after: 10, through: 13, ownPrefix: "a:") == nil,
            "short"
        )
        #expect(
            row([12, 13], origins: ["b:1", "b:2"]).followed(after: 10, through: 13, ownPrefix: "a:") == nil,
            "late"
        )
        var unequal = row([11, 12, 13], origins: ["b:1", "b:2", "b:3"])
        unequal.types = ["ResponseTodoViewModel"]
        #expect(unequal.followed(after: 10, through: 13, ownPrefix: "a:") == nil, "columns of different lengths")
        let nothing = Row(head: 100, seqs: nil, types: nil, payloads: nil, origins: nil, mids: nil)
        #expect(nothing.followed(after: 10, through: 13, ownPrefix: "a:") == nil, "too far behind: nothing came back")
        let none = nothing.followed(after: 13, through: 13, ownPrefix: "a:")
        #expect(
            none?.entries.isEmpty == true && none?.isContiguous == true,
            "nothing precedes the batch: an empty page"
        )
    }
}

extension Result where Failure == AppError {
    fileprivate var failureCode: AppError.Code? {
        if case .failure(let error) = self { return error.code }
        return nil
    }
}
