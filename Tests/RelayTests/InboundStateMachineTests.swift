import NIOCore
import Testing

@testable import Relay

@Suite struct InboundStateMachineTests {
    private func frame(_ text: String) -> FrameEvent { .frame(ByteBuffer(string: text)) }

    /// The text of the frame a step hands out, and whether it was taken off the queue.
    private enum Step: Equatable {
        case handle(String)
        case tryJoining(String)
        case wait
    }

    private func step(_ machine: inout InboundStateMachine, maxInFlight: Int = 64) -> Step {
        switch machine.nextFrame(maxInFlight: maxInFlight) {
        case .handle(let event): .handle(text(event))
        case .tryJoining(let event): .tryJoining(text(event))
        case .wait: .wait
        }
    }

    private func text(_ event: FrameEvent) -> String {
        switch event {
        case .frame(let buffer): String(buffer: buffer)
        case .tooLarge: "<too large>"
        case .binary: "<binary>"
        }
    }

    @Test func withNothingInFlightFramesAreHandledOneByOne() {
        var machine = InboundStateMachine()
        #expect(step(&machine) == .wait)
        machine.frameReceived(frame("a"))
        machine.frameReceived(.tooLarge)
        #expect(step(&machine) == .handle("a"))
        #expect(step(&machine) == .handle("<too large>"))
        #expect(step(&machine) == .wait)
        #expect(machine.isIdle)
    }

    @Test func framesAfterARequestTryToJoinIt() {
        var machine = InboundStateMachine()
        machine.frameReceived(frame("r1"))
        machine.frameReceived(frame("r2"))
        machine.frameReceived(frame("ping"))
        #expect(step(&machine) == .handle("r1"))
        machine.requestSubmitted()
        #expect(machine.state == .pipelining(inFlight: 1))
        #expect(step(&machine) == .tryJoining("r2"))
        machine.headJoined()
        #expect(machine.state == .pipelining(inFlight: 2))
        #expect(step(&machine) == .tryJoining("ping"))
        machine.headMustWait()
        #expect(machine.state == .headWaiting(inFlight: 2))
        // The waiting head is not looked at again until every request is answered.
        #expect(step(&machine) == .wait)
        machine.requestAnswered()
        #expect(machine.state == .headWaiting(inFlight: 1))
        #expect(step(&machine) == .wait)
        machine.requestAnswered()
        #expect(machine.state == .idle)
        #expect(step(&machine) == .handle("ping"))
        #expect(machine.isIdle)
    }

    @Test func atMostMaxInFlightRequestsOverlap() {
        var machine = InboundStateMachine()
        for name in ["r1", "r2", "r3"] { machine.frameReceived(frame(name)) }
        #expect(step(&machine, maxInFlight: 2) == .handle("r1"))
        machine.requestSubmitted()
        #expect(step(&machine, maxInFlight: 2) == .tryJoining("r2"))
        machine.headJoined()
        #expect(step(&machine, maxInFlight: 2) == .wait)
        machine.requestAnswered()
        #expect(step(&machine, maxInFlight: 2) == .tryJoining("r3"))
    }

    @Test func readsStopWhileTheReadAheadIsFullAndResumeOnceItHasRoom() {
        var machine = InboundStateMachine()
        #expect(machine.readRequested(maxQueued: 2) == .read)
        machine.frameReceived(frame("a"))
        machine.frameReceived(frame("b"))
        #expect(machine.readRequested(maxQueued: 2) == .none)
        #expect(machine.reads == .held)
        // Still full: no read yet.
        #expect(machine.drained(paused: true, maxQueued: 2) == .none)
        #expect(step(&machine) == .handle("a"))
        #expect(machine.drained(paused: false, maxQueued: 2) == .read)
        #expect(machine.reads == .flowing)
        #expect(machine.drained(paused: false, maxQueued: 2) == .none)
    }

    @Test func inputClosedWithRequestsInFlightClosesOnlyOnceAllAreAnswered() {
        var machine = InboundStateMachine()
        machine.frameReceived(frame("r1"))
        machine.frameReceived(frame("r2"))
        #expect(step(&machine) == .handle("r1"))
        machine.requestSubmitted()
        #expect(step(&machine) == .tryJoining("r2"))
        machine.headJoined()
        machine.inputClosed()
        #expect(machine.drained(paused: false, maxQueued: 64) == .none)
        machine.requestAnswered()
        #expect(machine.drained(paused: false, maxQueued: 64) == .none)
        machine.requestAnswered()
        #expect(machine.drained(paused: false, maxQueued: 64) == .close)
    }

    @Test func inputClosedWithFramesQueuedClosesOnlyOnceTheyAreHandled() {
        var machine = InboundStateMachine()
        machine.frameReceived(frame("ping"))
        machine.inputClosed()
        #expect(machine.drained(paused: false, maxQueued: 64) == .none)
        #expect(step(&machine) == .handle("ping"))
        #expect(machine.drained(paused: false, maxQueued: 64) == .close)
    }

    @Test func inputClosedDoesNotCloseWhilePaused() {
        var machine = InboundStateMachine()
        machine.inputClosed()
        #expect(machine.drained(paused: true, maxQueued: 64) == .none)
        #expect(machine.drained(paused: false, maxQueued: 64) == .close)
    }

    @Test func closingTakesPrecedenceOverAnOwedRead() {
        var machine = InboundStateMachine()
        machine.frameReceived(frame("a"))
        #expect(machine.readRequested(maxQueued: 1) == .none)
        #expect(step(&machine) == .handle("a"))
        machine.inputClosed()
        #expect(machine.drained(paused: false, maxQueued: 1) == .close)
        #expect(machine.reads == .held)
    }

    @Test func aCutReadsAgainOnlyIfReadsWereHeld() {
        var machine = InboundStateMachine()
        #expect(machine.readsResumedForClose() == .none)
        machine.frameReceived(frame("a"))
        #expect(machine.readRequested(maxQueued: 1) == .none)
        #expect(machine.readsResumedForClose() == .read)
        #expect(machine.readsResumedForClose() == .none)
    }

    @Test func aRequestInFlightKeepsTheSessionBusy() {
        var machine = InboundStateMachine()
        machine.frameReceived(frame("r1"))
        #expect(step(&machine) == .handle("r1"))
        machine.requestSubmitted()
        #expect(!machine.isIdle)
        machine.requestAnswered()
        #expect(machine.isIdle)
        // An answer nobody waits for changes nothing.
        machine.requestAnswered()
        #expect(machine.state == .idle)
    }
}
