import Testing

@testable import TodoStore

/// The WAL's checkpoints as decisions: a background copy every so many commits, copies again
/// at once while a large WAL is not caught up, and the tail copied by the writer only when the
/// WAL is over its bound all the same.
@Suite struct CheckpointStateMachineTests {
    typealias Result = CheckpointStateMachine.CopyResult

    private func machine(
        copyEvery: Int = 1,
        restart: Int = 100,
        tail: Int = 1_000,
        limit: Int = 4_000,
        passes: Int = 3
    )
        -> CheckpointStateMachine
    {
        CheckpointStateMachine(
            copyEvery: copyEvery,
            restartFrames: restart,
            tailFrames: tail,
            limitFrames: limit,
            maxPasses: passes
        )
    }

    @Test func aCopyStartsEveryCopyEveryCommitsAndOnlyOneAtATime() {
        var machine = machine(copyEvery: 3)
        #expect(machine.committed(walFrames: 10) == .none)
        #expect(machine.committed(walFrames: 10) == .none)
        #expect(machine.committed(walFrames: 10) == .startCopy)
        #expect(machine.isCopying)
        // While it runs, commits go on and start nothing.
        for _ in 0..<10 { #expect(machine.committed(walFrames: 10) == .none) }
        #expect(machine.copyEnded(Result(walFrames: 10, copied: 5)) == .none)
        #expect(!machine.isCopying)
        // The commits made meanwhile count toward the next copy: it starts on the next commit.
        #expect(machine.committed(walFrames: 10) == .startCopy)
    }

    @Test func aSmallWALOrOneCaughtUpNeedsNothingMore() {
        var machine = machine()
        #expect(machine.committed(walFrames: 10) == .startCopy)
        #expect(machine.copyEnded(Result(walFrames: 99, copied: 50)) == .none)
        #expect(machine.beforeCommit() == .none)
        #expect(machine.committed(walFrames: 10) == .startCopy)
        #expect(machine.copyEnded(Result(walFrames: 5_000, copied: 5_000)) == .none)
        #expect(machine.beforeCommit() == .none)
    }

    @Test func aLargeWALLeftBehindIsCopiedAgainUpToMaxPasses() {
        var machine = machine(passes: 3)
        #expect(machine.committed(walFrames: 10) == .startCopy)
        #expect(machine.copyEnded(Result(walFrames: 500, copied: 400)) == .copyAgain)
        #expect(machine.isCopying)
        #expect(machine.committed(walFrames: 10) == .none)
        #expect(machine.copyEnded(Result(walFrames: 510, copied: 500)) == .copyAgain)
        // The third pass is the last; under `tailFrames`, nothing more until the next copy.
        #expect(machine.copyEnded(Result(walFrames: 515, copied: 510)) == .none)
        #expect(!machine.isCopying)
        #expect(machine.beforeCommit() == .none)
        #expect(machine.committed(walFrames: 10) == .startCopy)
    }

    @Test func passesThatCatchUpStopAtOnce() {
        var machine = machine(passes: 8)
        #expect(machine.committed(walFrames: 10) == .startCopy)
        #expect(machine.copyEnded(Result(walFrames: 500, copied: 400)) == .copyAgain)
        #expect(machine.copyEnded(Result(walFrames: 500, copied: 500)) == .none)
        #expect(machine.beforeCommit() == .none)
    }

    @Test func aWALOverTheBoundAfterEveryPassHasItsTailCopiedBeforeTheNextCommitOnce() {
        var machine = machine(copyEvery: 2, tail: 1_000, passes: 2)
        #expect(machine.committed(walFrames: 10) == .none)
        #expect(machine.committed(walFrames: 10) == .startCopy)
        #expect(machine.copyEnded(Result(walFrames: 1_000, copied: 900)) == .copyAgain)
        #expect(machine.beforeCommit() == .none)
        #expect(machine.committed(walFrames: 10) == .none)
        #expect(machine.copyEnded(Result(walFrames: 1_010, copied: 1_000)) == .none)
        // Commits that end before the next one begins start no copy while the tail is due.
        #expect(machine.committed(walFrames: 10) == .none)
        #expect(machine.beforeCommit() == .copyTail)
        #expect(machine.beforeCommit() == .none)
        // Two commits were counted since the copy started: the next copy starts at the next.
        #expect(machine.committed(walFrames: 10) == .startCopy)
    }

    /// Copies that each catch up with the WAL as it was when they ended, while the WAL does not
    /// start over (a commit was under way each time): once it holds `limitFrames`, the writer
    /// copies the tail before its next commit, once, and copies start again as before.
    @Test func copiesThatCatchUpWhileTheWALGrowsAllTheSameHaveItsTailCopiedAtTheLimit() {
        var machine = machine(copyEvery: 2, restart: 100, tail: 500, limit: 1_000, passes: 3)
        var frames = 0
        func commit() -> CheckpointStateMachine.CommitAction {
            frames += 4
            return machine.committed(walFrames: frames)
        }
        var copies = 0
        while frames < 1_000 {
            if commit() == .startCopy {
                copies += 1
                #expect(machine.copyEnded(Result(walFrames: frames, copied: frames)) == .none)
            }
            if frames < 1_000 { #expect(machine.beforeCommit() == .none) }
        }
        #expect(copies == 1_000 / 8 - 1)
        #expect(machine.beforeCommit() == .copyTail)
        #expect(machine.beforeCommit() == .none)
        // The WAL started over.
        frames = 0
        #expect(commit() == .startCopy)
    }

    @Test func aFailedCopyEndsTheRoundAndTheNextOneStartsOnTime() {
        var machine = machine(tail: 100)
        #expect(machine.committed(walFrames: 10) == .startCopy)
        #expect(machine.copyEnded(nil) == .none)
        #expect(machine.beforeCommit() == .none)
        #expect(machine.committed(walFrames: 10) == .startCopy)
    }

    @Test func aCopyEndingAfterCloseChangesNothingAndNoneStarts() {
        var machine = machine(tail: 100, passes: 1)
        #expect(machine.committed(walFrames: 10) == .startCopy)
        machine.close()
        #expect(machine.copyEnded(Result(walFrames: 5_000, copied: 1)) == .none)
        #expect(machine.beforeCommit() == .none)
        #expect(machine.committed(walFrames: 10) == .none)
    }
}
