import Foundation
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
}

extension Result where Failure == AppError {
    fileprivate var failureCode: AppError.Code? {
        if case .failure(let error) = self { return error.code }
        return nil
    }
}
