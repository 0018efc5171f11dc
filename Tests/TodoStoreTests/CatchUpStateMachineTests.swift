import Testing

@testable import TodoStore

/// When the journal follower reads the journal (`CatchUpStateMachine`), with a manual clock.
@Suite struct CatchUpStateMachineTests {
    let start = ContinuousClock.now
    let interval = Duration.seconds(1)

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    @Test func aNewConnectionReadsFirstAndThenOnlyWhatWentFurtherThanTheCursor() {
        var pace = CatchUpStateMachine(interval: interval)
        #expect(pace.wake(cursor: 0, now: at(0), committing: { false }) == .wantThenRead, "taking the listen key")
        pace.heard(head: 10)
        #expect(pace.wake(cursor: 10, now: at(5), committing: { false }) == .skip, "its own commits reached 10")
        pace.heard(head: 12)
        #expect(pace.wake(cursor: 10, now: at(6), committing: { false }) == .read, "11 and 12 are someone else's")
        pace.connected()
        #expect(
            pace.wake(cursor: 12, now: at(7), committing: { false }) == .wantThenRead,
            "a new connection reads first, with the listen key taken again"
        )
    }

    @Test func theJournalIsReadAtLeastOnceAnInterval() {
        var pace = CatchUpStateMachine(interval: interval)
        #expect(pace.wake(cursor: 0, now: at(0), committing: { false }) == .wantThenRead)
        #expect(pace.wake(cursor: 0, now: at(999), committing: { false }) == .skip)
        #expect(pace.wake(cursor: 0, now: at(1000), committing: { false }) == .read, "a notification may be lost")
        #expect(pace.wake(cursor: 0, now: at(1500), committing: { false }) == .skip, "counted from the last read")
    }

    @Test func aReadIsPutOffOnceForABatchOfThisProcessBeingCommitted() {
        var pace = CatchUpStateMachine(interval: interval)
        #expect(pace.wake(cursor: 0, now: at(0), committing: { true }) == .wantThenRead)
        pace.heard(head: 5)
        #expect(pace.wake(cursor: 0, now: at(1), committing: { true }) == .skip, "likely that batch's own")
        #expect(pace.wake(cursor: 0, now: at(2), committing: { true }) == .read, "only once: another daemon's waits")
        pace.heard(head: 9)
        #expect(pace.wake(cursor: 5, now: at(3), committing: { true }) == .skip, "a read settles the deferral")
        // That batch took 6...9: the cursor stepped over it, which settles the deferral too.
        #expect(pace.wake(cursor: 9, now: at(4), committing: { false }) == .skip)
        pace.heard(head: 12)
        #expect(pace.wake(cursor: 9, now: at(5), committing: { true }) == .skip)
    }

    @Test func committingIsAskedOnlyWhenItDecides() {
        var pace = CatchUpStateMachine(interval: interval)
        var asked = 0
        _ = pace.wake(
            cursor: 0,
            now: at(0),
            committing: {
                asked += 1
                return true
            }
        )
        pace.heard(head: 3)
        _ = pace.wake(
            cursor: 3,
            now: at(1),
            committing: {
                asked += 1
                return true
            }
        )
        #expect(asked == 0, "a first read and a head the cursor reached need not ask")
    }

    @Test func aNotificationWakesTheFollowerUnlessABatchOfThisProcessIsBeingCommitted() {
        var pace = CatchUpStateMachine(interval: interval)
        let woken = pace.heard(head: 4, committing: false)
        let wokenWhileCommitting = pace.heard(head: 5, committing: true)
        let wokenWithoutHead = pace.heard(head: nil, committing: false)
        #expect(woken)
        #expect(!wokenWhileCommitting, "the batch's end wakes it instead")
        #expect(wokenWithoutHead, "a payload without a head still wakes it")
        _ = pace.wake(cursor: 0, now: at(0), committing: { false })
        #expect(
            pace.wake(cursor: 4, now: at(1), committing: { false }) == .read,
            "the head heard while committing counts"
        )
    }

    @Test func whileCommitsBringTheJournalAReadWaitsForTheNextCommit() {
        var pace = CatchUpStateMachine(interval: interval, grace: .milliseconds(2))
        #expect(pace.wake(cursor: 0, now: at(0), committing: { false }) == .wantThenRead)
        pace.commitBrought(at: at(10))
        pace.heard(head: 20)
        #expect(
            pace.wake(cursor: 12, now: at(10), committing: { true }) == .skip,
            "a batch is being committed: its answer brings 13...20 if they precede it, and its end wakes again"
        )
        #expect(
            pace.wake(cursor: 12, now: at(11), committing: { true }) == .skip,
            "not only once, unlike a read put off without such commits"
        )
        #expect(
            pace.wake(cursor: 12, now: at(11), committing: { false }) == .wait(until: at(12)),
            "between two batches: ask again once the grace has passed"
        )
        #expect(pace.wake(cursor: 12, now: at(12), committing: { false }) == .read, "no batch came: read")
        pace.commitBrought(at: at(20))
        #expect(pace.wake(cursor: 20, now: at(20), committing: { false }) == .skip, "the commit brought all of it")
    }

    @Test func aCommitThatBroughtNothingBringsTheUsualReadsBack() {
        var pace = CatchUpStateMachine(interval: interval, grace: .milliseconds(2))
        #expect(pace.wake(cursor: 0, now: at(0), committing: { false }) == .wantThenRead)
        pace.commitBrought(at: at(10))
        pace.commitMissed()
        pace.heard(head: 20)
        #expect(pace.wake(cursor: 12, now: at(10), committing: { true }) == .skip, "put off once, as before")
        #expect(pace.wake(cursor: 12, now: at(10), committing: { true }) == .read, "and then read")
        pace.commitBrought(at: at(11))
        pace.heard(head: 30)
        #expect(pace.wake(cursor: 20, now: at(11), committing: { false }) == .wait(until: at(13)))
        pace.connected()
        #expect(
            pace.wake(cursor: 20, now: at(12), committing: { true }) == .wantThenRead,
            "a new connection reads first"
        )
    }

    @Test func commitsThatBringTheJournalStillLetItBeReadEveryInterval() {
        var pace = CatchUpStateMachine(interval: interval, grace: .milliseconds(2))
        #expect(pace.wake(cursor: 0, now: at(0), committing: { false }) == .wantThenRead)
        pace.heard(head: 5)
        pace.commitBrought(at: at(999))
        #expect(pace.wake(cursor: 3, now: at(999), committing: { true }) == .skip)
        #expect(pace.wake(cursor: 3, now: at(1000), committing: { true }) == .read, "a notification may be lost")
    }

    @Test func commitsThatKeepBringingTheJournalStopTheNotificationsUntilTheNextRead() {
        var pace = CatchUpStateMachine(interval: interval, grace: .milliseconds(2), quietAfter: .milliseconds(20))
        #expect(pace.wake(cursor: 0, now: at(0), committing: { false }) == .wantThenRead)
        #expect(pace.notifications == .wanted)
        pace.commitBrought(at: at(10))
        pace.heard(head: 20)
        #expect(pace.wake(cursor: 12, now: at(29), committing: { true }) == .skip, "not for 20 ms yet")
        pace.commitBrought(at: at(30))
        #expect(
            pace.wake(cursor: 12, now: at(31), committing: { false }) == .wait(until: at(32)),
            "never while no commit is under way: no commit's end would wake the follower"
        )
        #expect(pace.wake(cursor: 12, now: at(31), committing: { true }) == .quiet)
        #expect(pace.notifications == .quiet)
        #expect(pace.wake(cursor: 20, now: at(32), committing: { true }) == .skip, "released once")
        // The commits stop: once the grace after the last has passed, the follower reads, and
        // takes the key first. The heads heard before do not count while it is quiet: nothing
        // notifies it then.
        pace.commitBrought(at: at(40))
        #expect(pace.wake(cursor: 20, now: at(41), committing: { false }) == .wait(until: at(42)))
        #expect(pace.wake(cursor: 20, now: at(42), committing: { false }) == .wantThenRead)
        #expect(pace.notifications == .wanted)
        // The streak starts again after a read.
        pace.commitBrought(at: at(50))
        pace.heard(head: 30)
        #expect(pace.wake(cursor: 20, now: at(60), committing: { true }) == .skip)
        #expect(pace.wake(cursor: 20, now: at(70), committing: { true }) == .quiet)
    }

    @Test func aQuietFollowerReadsWithTheKeyAfterAMissedCommitAndEveryInterval() {
        var pace = CatchUpStateMachine(interval: interval, grace: .milliseconds(2), quietAfter: .milliseconds(20))
        _ = pace.wake(cursor: 0, now: at(0), committing: { false })
        pace.heard(head: 5)
        pace.commitBrought(at: at(10))
        #expect(pace.wake(cursor: 5, now: at(30), committing: { true }) == .quiet)
        pace.commitMissed()
        #expect(pace.wake(cursor: 5, now: at(31), committing: { false }) == .wantThenRead, "not skipped as heard")
        pace.commitBrought(at: at(40))
        #expect(pace.wake(cursor: 5, now: at(60), committing: { true }) == .quiet)
        #expect(pace.wake(cursor: 5, now: at(1031), committing: { true }) == .wantThenRead, "the periodic read")
    }
}
