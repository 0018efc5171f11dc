import Testing

@testable import EventStream

/// When the sequencer waits for more requests before it runs a batch (`BatchGathering`), with
/// a manual clock.
@Suite struct BatchGatheringTests {
    let start = ContinuousClock.now
    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }
    func sessions(_ ids: ClosedRange<UInt64>) -> Set<SessionID> { Set(ids.map(SessionID.init)) }

    @Test func groupsThatTakeTurnsWaitForEachOther() {
        var gathering = BatchGathering(maxWait: .milliseconds(2), maxBatch: 256)
        #expect(gathering.decide(count: 16, now: at(0)) == .run, "nothing ran yet: nothing to wait for")
        gathering.ran(sessions: sessions(1...16), duration: .milliseconds(3))
        gathering.ran(sessions: sessions(17...32), duration: .milliseconds(3))
        #expect(
            gathering.decide(count: 16, now: at(10)) == .wait(want: 32, until: at(10) + .microseconds(1500)),
            "half the last run, for as many sessions as the last two batches had"
        )
        #expect(gathering.decide(count: 32, now: at(10)) == .run)
        gathering.ran(sessions: sessions(1...32), duration: .milliseconds(10))
        #expect(
            gathering.decide(count: 1, now: at(20)) == .wait(want: 32, until: at(22)),
            "at most maxWait"
        )
    }

    @Test func oneClientAloneNeverWaits() {
        var gathering = BatchGathering(maxWait: .milliseconds(2), maxBatch: 256)
        for step in 0..<4 {
            #expect(gathering.decide(count: 1, now: at(step)) == .run)
            gathering.ran(sessions: sessions(7...7), duration: .milliseconds(1))
        }
    }

    @Test func aSessionThatStopsSendingDropsOutTwoBatchesLater() {
        var gathering = BatchGathering(maxWait: .milliseconds(2), maxBatch: 256)
        gathering.ran(sessions: sessions(1...2), duration: .milliseconds(2))
        gathering.ran(sessions: sessions(1...1), duration: .milliseconds(2))
        #expect(gathering.decide(count: 1, now: at(0)) == .wait(want: 2, until: at(1)), "session 2 may come back")
        gathering.ran(sessions: sessions(1...1), duration: .milliseconds(2))
        #expect(gathering.decide(count: 1, now: at(5)) == .run, "it did not")
    }

    @Test func itDoesNotWaitWhenNotSharedOffFullOrWithoutARunTime() {
        var gathering = BatchGathering(maxWait: .milliseconds(2), maxBatch: 8)
        gathering.ran(sessions: sessions(1...20), duration: .milliseconds(2))
        #expect(gathering.decide(count: 3, now: at(0), shared: false) == .run, "no other daemon commits")
        #expect(gathering.decide(count: 8, now: at(0)) == .run, "a full batch")
        #expect(gathering.decide(count: 3, now: at(0)) == .wait(want: 8, until: at(1)), "never more than maxBatch")
        var off = BatchGathering(maxWait: .zero, maxBatch: 8)
        off.ran(sessions: sessions(1...20), duration: .milliseconds(2))
        #expect(off.decide(count: 3, now: at(0)) == .run)
        var instant = BatchGathering(maxWait: .milliseconds(2), maxBatch: 8)
        instant.ran(sessions: sessions(1...20), duration: .zero)
        #expect(instant.decide(count: 3, now: at(0)) == .run, "a batch that took no time is not worth waiting for")
    }
}
