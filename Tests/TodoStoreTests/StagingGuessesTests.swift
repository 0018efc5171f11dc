import Foundation
import NIOConcurrencyHelpers
import Testing
import TodoApp

@testable import TodoStore

/// What a PostgreSQL daemon stages a batch of writes on without reading it first
/// (`StagingGuesses`), and which entries' payloads its journal follower need not read
/// (`LocalClaims.withheld`).
@Suite struct StagingGuessesTests {
    let now = Timestamp(millisecondsSince1970: 1_700_000_000_000)

    @Test func aBatchOfWritesToTodosItWroteIsStagedOnTheirLastWrittenState() throws {
        var guesses = StagingGuesses(limit: 100)
        let first = Todo(createdAt: now, title: "first", version: 3)
        let second = Todo(createdAt: now, title: "second", version: 7)
        guesses.remember([first, second])
        guesses.remember([Todo(id: first.id, createdAt: now, title: "first, renamed", version: 4)])
        let writes = [
            TodoWrite(id: first.id, expectedVersion: nil, change: .toggleComplete),
            TodoWrite(id: second.id, expectedVersion: 7, change: .delete),
            TodoWrite(id: first.id, expectedVersion: nil, change: .delete),
        ]
        let stored = try #require(guesses.stored(for: writes, time: now, known: nil))
        #expect(stored.count == 2)
        #expect(stored[first.id]?.todo.title == "first, renamed" && stored[first.id]?.todo.version == 4)
        #expect(stored[second.id]?.todo.version == 7)
    }

    @Test func aTodoNotGuessedIsTakenAsNewOnlyByAWriteThatWouldCreateIt() throws {
        let guesses = StagingGuesses(limit: 100)
        let fresh = UUID()
        let creations = [
            TodoWrite(id: fresh, expectedVersion: nil, change: .update(TodoEdit(title: "new"))),
            TodoWrite(id: fresh, expectedVersion: nil, change: .toggleComplete),  // after its creation
        ]
        let stored = try #require(guesses.stored(for: creations, time: now, known: nil))
        #expect(stored.isEmpty, "absent: the commit's check confirms that it is new")
        for change in [TodoChange.toggleComplete, .delete] {
            #expect(
                guesses.stored(
                    for: [TodoWrite(id: UUID(), expectedVersion: nil, change: change)],
                    time: now,
                    known: nil
                )
                    == nil,
                "a \(change) of a todo the daemon has not seen is read first"
            )
        }
        let edit = TodoWrite(id: UUID(), expectedVersion: 4, change: .update(TodoEdit(title: "edited")))
        #expect(guesses.stored(for: [edit], time: now, known: nil) == nil, "an edit of a version not seen is read")
    }

    @Test func theTodosKnownFromAFullReadAreGuessesTooAndAbsenceThereIsAGuessOfAbsence() throws {
        let guesses = StagingGuesses(limit: 100)
        let listed = Todo(createdAt: now, title: "listed", version: 2)
        let known = KnownTodos(head: 10, generation: 1, rows: [(rowID: 5, todo: listed)])
        let stored = try #require(
            guesses.stored(
                for: [TodoWrite(id: listed.id, expectedVersion: 2, change: .toggleComplete)],
                time: now,
                known: known
            )
        )
        #expect(stored[listed.id]?.todo == listed)
        #expect(
            guesses.stored(for: [TodoWrite(id: UUID(), expectedVersion: nil, change: .delete)], time: now, known: known)
                == nil,
            "a todo the known todos lack is only taken as new by a creation"
        )
    }

    @Test func aRefusedGuessIsForgottenAndNoLimitMeansNoGuesses() {
        var guesses = StagingGuesses(limit: 100)
        let todo = Todo(createdAt: now, title: "t", version: 1)
        let toggle = [TodoWrite(id: todo.id, expectedVersion: nil, change: .toggleComplete)]
        guesses.remember([todo])
        #expect(guesses.stored(for: toggle, time: now, known: nil) != nil)
        guesses.forget([todo.id])
        #expect(guesses.stored(for: toggle, time: now, known: nil) == nil)

        var none = StagingGuesses(limit: 0)
        none.remember([todo])
        #expect(none.count == 0)
        #expect(none.stored(for: toggle, time: now, known: nil) == nil, "0: every batch reads")
    }

    @Test func pastTheLimitTheOldestHalfIsDropped() {
        var guesses = StagingGuesses(limit: 10)
        let todos = (0..<11).map { Todo(createdAt: now, title: "t\($0)", version: 1) }
        guesses.remember(todos[0..<10])
        #expect(guesses.count == 10)
        // The first is written again: it is now among the newest.
        guesses.remember([todos[0]])
        guesses.remember([todos[10]])
        #expect(guesses.count == 5)
        let kept = todos.filter {
            guesses.stored(for: [TodoWrite(id: $0.id, expectedVersion: 1, change: .delete)], time: now, known: nil)
                != nil
        }
        #expect(kept.map(\.title) == ["t0", "t7", "t8", "t9", "t10"])
    }

    @Test func theFollowerReadsThePayloadsOfOtherProcessesAndOfAbandonedBatchesOnly() {
        let claims = LocalClaims(instance: "aaaa")
        let committed = claims.begin()
        let abandoned = claims.begin()
        #expect(claims.withheld().prefix == "aaaa:")
        #expect(claims.withheld().except.isEmpty)
        #expect(claims.settleInDoubt(abandoned) == nil)
        #expect(claims.withheld().except == [abandoned], "an abandoned batch's entries are published: read them")
        claims.finish(committed)
        claims.finish(abandoned)
        #expect(claims.withheld().except.isEmpty)
        #expect(LocalClaims.Withheld.nothing.prefix.isEmpty, "no prefix: nothing withheld (see originEntries)")
    }

    @Test func theFollowerStepsOverARunOfThisProcesssCommitsOnlyFromItsCursorOn() {
        let claims = LocalClaims(instance: "aaaa")
        claims.committed(first: 11, last: 14)
        claims.committed(first: 15, last: 15)
        claims.committed(first: 20, last: 22)  // 16...19 are another daemon's
        #expect(claims.ownThrough(after: 9) == nil, "10 is not this process's: read it")
        #expect(claims.ownThrough(after: 10) == 15, "11...14 and 15 follow each other")
        #expect(claims.ownThrough(after: 15) == nil, "16 is another daemon's")
        #expect(claims.ownThrough(after: 19) == 22)
        #expect(claims.ownThrough(after: 22) == nil, "every range was passed and forgotten")
        claims.committed(first: 30, last: 31)
        #expect(claims.ownThrough(after: 35) == nil, "a range the cursor passed by reading is forgotten")
        #expect(claims.ownThrough(after: 29) == nil)
    }

    @Test func committedRangesAreBounded() {
        let claims = LocalClaims(instance: "aaaa")
        for seq in 1...UInt64(LocalClaims.maxCommittedRanges + 10) { claims.committed(first: seq, last: seq) }
        #expect(claims.ownThrough(after: 0) == nil, "the oldest ranges were dropped: the follower reads them")
        #expect(claims.ownThrough(after: 10) == UInt64(LocalClaims.maxCommittedRanges + 10))
    }

    /// The follower's wake-up is called at the end of every commit. Held as a bare closure in a
    /// generic box it gained two reabstraction thunks per call, so the chain the next call
    /// walked grew with every commit until the stack overflowed. On a thread with a small
    /// stack, that overflow comes within a few thousand commits; here 20,000 must pass.
    @Test func theFollowersWakeUpDoesNotGrowWithEveryCommit() async {
        let claims = LocalClaims(instance: "aaaa")
        let calls = NIOLockedValueBox(0)
        claims.whenSettled { calls.withLockedValue { $0 += 1 } }
        let rounds = 20_000
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let thread = Thread {
                for _ in 0..<rounds { claims.finish(claims.begin()) }
                done.resume()
            }
            thread.stackSize = 256 * 1024
            thread.start()
        }
        #expect(calls.withLockedValue { $0 } == rounds)
        claims.whenSettled(nil)
        claims.finish(claims.begin())
        #expect(calls.withLockedValue { $0 } == rounds, "no wake-up once it is taken away")
    }
}
