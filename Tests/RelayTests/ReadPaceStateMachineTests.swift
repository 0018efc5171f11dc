import NIOCore
import Testing

@testable import Relay

/// At most one read per pace, at most one waiting, none after the reader is gone.
@Suite struct ReadPaceStateMachineTests {
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    /// The actions for reads asked for at these milliseconds after `start`.
    private func asked(_ machine: inout ReadPaceStateMachine, at milliseconds: Int64) -> ReadPaceStateMachine.ReadAction
    {
        machine.readRequested(now: start + .milliseconds(milliseconds))
    }

    private func came(_ machine: inout ReadPaceStateMachine, at milliseconds: Int64) -> Bool {
        machine.scheduledTimeCame(now: start + .milliseconds(milliseconds))
    }

    @Test func theFirstReadGoesAtOnceAndTheNextWaitsForThePace() {
        var machine = ReadPaceStateMachine(pace: .milliseconds(10))
        let first = asked(&machine, at: 0)
        let second = asked(&machine, at: 3)
        let third = asked(&machine, at: 4)
        #expect(first == .read)
        #expect(second == .readAt(start + .milliseconds(10)))
        #expect(third == .none, "one waits, however often asked")
        let made = came(&machine, at: 10)
        let again = came(&machine, at: 11)
        #expect(made)
        #expect(!again, "made once")
        let next = asked(&machine, at: 15)
        #expect(next == .readAt(start + .milliseconds(20)))
    }

    @Test func aReadAskedForAfterAQuietWhileGoesAtOnce() {
        var machine = ReadPaceStateMachine(pace: .milliseconds(10))
        let actions = [asked(&machine, at: 0), asked(&machine, at: 10), asked(&machine, at: 5_000)]
        #expect(actions == [.read, .read, .read])
    }

    @Test func aWaitingReadIsNotMadeOnceTheReaderIsGone() {
        var machine = ReadPaceStateMachine(pace: .milliseconds(10))
        let actions = [asked(&machine, at: 0), asked(&machine, at: 1)]
        #expect(actions == [.read, .readAt(start + .milliseconds(10))])
        machine.stopped()
        let made = came(&machine, at: 10)
        let later = asked(&machine, at: 1_000)
        #expect(!made)
        #expect(later == .none)
    }
}
