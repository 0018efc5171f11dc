import Testing

@testable import Relay

@Suite struct CloseGraceStateMachineTests {
    private func progress(_ unsent: Int, _ acknowledged: UInt64 = 0) -> CloseGraceStateMachine.Progress {
        .init(unsentBytes: unsent, acknowledgedBytes: acknowledged)
    }

    @Test func aClientThatTakesNothingForAPeriodIsClosed() {
        var machine = CloseGraceStateMachine()
        machine.started(progress(50_000, 1_000))
        let first = machine.check(progress(50_000, 1_000))
        #expect(first == .close)
        #expect(machine.state == .closed)
        let again = machine.check(progress(50_000, 1_000))
        #expect(again == .none)
        let written = machine.lastFramesWritten(progress(0, 1_000))
        #expect(!written, "closed already: no second close")
    }

    @Test func aSlowReaderKeepsTheConnectionWhileItTakesBytes() {
        var machine = CloseGraceStateMachine()
        machine.started(progress(50_000, 0))
        // The daemon's backlog shrank.
        let shrank = machine.check(progress(40_000, 0))
        #expect(shrank == .checkAgain)
        // Only the client's kernel took more (the daemon's backlog waits for the socket to be
        // writable again, which a slow reader makes rare): progress too.
        let acknowledged = machine.check(progress(40_000, 8_192))
        #expect(acknowledged == .checkAgain)
        // Compared with the last look, not the first: no progress since then closes.
        let stalled = machine.check(progress(40_000, 8_192))
        #expect(stalled == .close)
    }

    /// The last frames written: the output is shut once, and the connection lingers while the
    /// client takes them, until it closes its side or takes nothing for a period.
    @Test func theLastFramesWrittenShutTheOutputOnceAndLinger() {
        var machine = CloseGraceStateMachine()
        let early = machine.lastFramesWritten(progress(10))
        #expect(!early, "nothing was cut yet")
        machine.started(progress(10))
        let written = machine.lastFramesWritten(progress(0, 100))
        #expect(written)
        #expect(machine.state == .lingering(since: progress(0, 100)))
        let twice = machine.lastFramesWritten(progress(0, 100))
        #expect(!twice)
        // The client's kernel takes more: it is reading.
        let reading = machine.check(progress(0, 5_000))
        #expect(reading == .checkAgain)
        #expect(machine.state == .lingering(since: progress(0, 5_000)))
        // It has read everything and closes.
        let ended = machine.inputEnded()
        #expect(ended)
        #expect(machine.state == .closed)
        let after = machine.check(progress(0, 5_000))
        #expect(after == .none)
    }

    @Test func aLingeringClientThatTakesNothingForAPeriodIsClosed() {
        var machine = CloseGraceStateMachine()
        machine.started(progress(10))
        _ = machine.lastFramesWritten(progress(0, 100))
        let stalled = machine.check(progress(0, 100))
        #expect(stalled == .close)
        let ended = machine.inputEnded()
        #expect(!ended, "closed already")
    }

    @Test func inputEndingBeforeTheLastFramesAreWrittenClosesNothing() {
        var machine = CloseGraceStateMachine()
        let idle = machine.inputEnded()
        #expect(!idle)
        machine.started(progress(10))
        let draining = machine.inputEnded()
        #expect(!draining, "the notice is not out yet")
        #expect(machine.state == .draining(since: progress(10)))
    }

    @Test func aConnectionGoneEndsTheLooks() {
        var machine = CloseGraceStateMachine()
        machine.started(progress(10))
        machine.connectionClosed()
        let look = machine.check(progress(10))
        #expect(look == .none)
        let written = machine.lastFramesWritten(progress(0))
        #expect(!written)
    }

    @Test func aSecondStartDoesNotMoveTheMark() {
        var machine = CloseGraceStateMachine()
        machine.started(progress(100))
        machine.started(progress(10))
        #expect(machine.state == .draining(since: progress(100)))
        let look = machine.check(progress(100))
        #expect(look == .close)
    }

    @Test func moreUnsentBytesThanBeforeIsNoProgress() {
        var machine = CloseGraceStateMachine()
        machine.started(progress(100, 5))
        let look = machine.check(progress(120, 5))
        #expect(look == .close)
    }
}
