import NIOCore
import Testing

@testable import Relay

@Suite struct SessionStateMachineTests {
    private func frame(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    @Test func startsOnceAndHoldsLiveOutputWhenAHoldIsConfigured() {
        var machine = SessionStateMachine()
        #expect(!machine.isStarted)
        #expect(!machine.isRegistered)
        #expect(machine.start(initialHoldMilliseconds: 250) == .greet(holdMilliseconds: 250))
        #expect(machine.isStarted)
        #expect(machine.isRegistered)
        #expect(machine.isHoldingLiveOutput)
        #expect(machine.start(initialHoldMilliseconds: 250) == .none)
    }

    @Test func withoutAHoldLiveOutputFlowsAtOnce() {
        var machine = SessionStateMachine()
        #expect(machine.start(initialHoldMilliseconds: 0) == .greet(holdMilliseconds: nil))
        #expect(machine.state == .live)
        #expect(machine.hold(frame("a"), seq: 1, maxBytes: 100, maxFrames: 10) == .notHeld)
    }

    /// A session that had to authenticate starts without a hold (it receives nothing live
    /// yet) and gets one when it authenticates; one already holding, or with the hold off,
    /// does not get a second.
    @Test func authenticatingStartsTheHoldOnlyOnceLiveOutputFlows() {
        var machine = SessionStateMachine()
        _ = machine.start(initialHoldMilliseconds: 0)
        #expect(machine.authenticated(initialHoldMilliseconds: 250) == 250)
        #expect(machine.isHoldingLiveOutput)
        #expect(machine.authenticated(initialHoldMilliseconds: 250) == nil)
        #expect(machine.hold(frame("a"), seq: 1, maxBytes: 100, maxFrames: 10) == .held)
        #expect(machine.releaseStartHold() == .write([frame("a")]))

        var off = SessionStateMachine()
        _ = off.start(initialHoldMilliseconds: 0)
        #expect(off.authenticated(initialHoldMilliseconds: 0) == nil)
        #expect(off.state == .live)

        var closing = SessionStateMachine()
        _ = closing.start(initialHoldMilliseconds: 0)
        _ = closing.close(.afterLastFrame)
        #expect(closing.authenticated(initialHoldMilliseconds: 250) == nil)
    }

    @Test func releasingTheStartHoldSendsWhatWaitedInOrderOnce() {
        var machine = SessionStateMachine()
        _ = machine.start(initialHoldMilliseconds: 250)
        #expect(machine.hold(frame("a"), seq: 7, maxBytes: 100, maxFrames: 10) == .held)
        #expect(machine.hold(frame("b"), seq: nil, maxBytes: 100, maxFrames: 10) == .held)
        #expect(machine.releaseStartHold() == .write([frame("a"), frame("b")]))
        #expect(machine.state == .live)
        // The timer firing after the client's first frame released it changes nothing.
        #expect(machine.releaseStartHold() == .none)
        #expect(machine.hold(frame("c"), seq: 8, maxBytes: 100, maxFrames: 10) == .notHeld)
    }

    /// More than the bound arriving during the start hold ends the hold: everything held goes
    /// out, in order, and what follows is live. The client is not cut for it.
    @Test func tooMuchHeldAtStartEndsTheHold() {
        var machine = SessionStateMachine()
        _ = machine.start(initialHoldMilliseconds: 250)
        #expect(machine.hold(frame("12345"), seq: 1, maxBytes: 8, maxFrames: 10) == .held)
        #expect(
            machine.hold(frame("67890"), seq: 2, maxBytes: 8, maxFrames: 10)
                == .released([frame("12345"), frame("67890")])
        )
        #expect(machine.state == .live)
        #expect(!machine.isClosing)
        #expect(machine.hold(frame("c"), seq: 3, maxBytes: 8, maxFrames: 10) == .notHeld)
        #expect(machine.releaseStartHold() == .none)
    }

    @Test func theFrameBoundCountsToo() {
        var machine = SessionStateMachine()
        _ = machine.start(initialHoldMilliseconds: 250)
        #expect(machine.hold(frame("a"), seq: 1, maxBytes: 1_000, maxFrames: 2) == .held)
        #expect(machine.hold(frame("b"), seq: 2, maxBytes: 1_000, maxFrames: 2) == .held)
        #expect(
            machine.hold(frame("c"), seq: 3, maxBytes: 1_000, maxFrames: 2)
                == .released([frame("a"), frame("b"), frame("c")])
        )
        #expect(machine.state == .live)
    }

    @Test func aDisconnectedSessionsHoldEndsTheSameWay() {
        var machine = SessionStateMachine()
        _ = machine.start(initialHoldMilliseconds: 250)
        _ = machine.stop()
        #expect(machine.hold(frame("1234"), seq: 1, maxBytes: 6, maxFrames: 10) == .held)
        #expect(
            machine.hold(frame("5678"), seq: 2, maxBytes: 6, maxFrames: 10)
                == .released([frame("1234"), frame("5678")])
        )
        #expect(machine.state == .disconnected(held: nil))
        #expect(!machine.isHoldingLiveOutput)
    }

    @Test func aResumeTakesTheStartHoldOver() {
        var machine = SessionStateMachine()
        _ = machine.start(initialHoldMilliseconds: 250)
        _ = machine.hold(frame("a"), seq: 4, maxBytes: 100, maxFrames: 10)
        let taken = machine.resumeStarted()
        #expect(taken?.items == [HeldOutput.Item(seq: 4, frame: frame("a"))])
        #expect(machine.state == .live)
        // The start-hold timer firing during the resume sends nothing: the resume has it.
        #expect(machine.releaseStartHold() == .none)
        #expect(machine.resumeStarted() == nil)
    }

    @Test func closesOnceWhateverTheReason() {
        for reason in [SessionStateMachine.CloseReason.slowConsumer, .afterLastFrame, .inputClosed] {
            var machine = SessionStateMachine()
            _ = machine.start(initialHoldMilliseconds: 0)
            let expected: SessionStateMachine.CloseAction =
                switch reason {
                case .slowConsumer: .cutSlowConsumer
                case .afterLastFrame: .sendLastFrameAndClose
                case .inputClosed: .closeWhenFlushed
                }
            #expect(machine.close(reason) == expected)
            #expect(machine.state == .closing(reason))
            #expect(machine.close(.slowConsumer) == .none)
            #expect(machine.close(.afterLastFrame) == .none)
            #expect(machine.state == .closing(reason))
        }
    }

    @Test func stopUnregistersOnce() {
        var machine = SessionStateMachine()
        _ = machine.start(initialHoldMilliseconds: 0)
        _ = machine.close(.afterLastFrame)
        #expect(machine.stop() == .unregister)
        #expect(machine.state == .closed(.afterLastFrame))
        #expect(!machine.isRegistered)
        #expect(machine.isClosing)
        // channelInactive, then handlerRemoved.
        #expect(machine.stop() == .none)
    }

    @Test func stopBeforeStartUnregistersNothingAndTheSessionCanStillStart() {
        var machine = SessionStateMachine()
        #expect(machine.stop() == .none)
        #expect(machine.start(initialHoldMilliseconds: 0) == .greet(holdMilliseconds: nil))
    }

    @Test func aDisconnectedSessionIsNotClosingAndKeepsItsStartHold() {
        var machine = SessionStateMachine()
        _ = machine.start(initialHoldMilliseconds: 250)
        _ = machine.hold(frame("a"), seq: 1, maxBytes: 100, maxFrames: 10)
        #expect(machine.stop() == .unregister)
        #expect(!machine.isRegistered)
        #expect(!machine.isClosing)
        #expect(machine.isHoldingLiveOutput)
        #expect(machine.stop() == .none)
        #expect(machine.releaseStartHold() == .write([frame("a")]))
        #expect(machine.state == .disconnected(held: nil))
        // Closing it later does not unregister it again.
        #expect(machine.close(.afterLastFrame) == .sendLastFrameAndClose)
        #expect(machine.state == .closed(.afterLastFrame))
        #expect(machine.stop() == .none)
    }

    @Test func aLiveSessionThatDisconnectsHoldsNothing() {
        var machine = SessionStateMachine()
        _ = machine.start(initialHoldMilliseconds: 0)
        #expect(machine.stop() == .unregister)
        #expect(machine.state == .disconnected(held: nil))
        #expect(machine.hold(frame("a"), seq: 1, maxBytes: 100, maxFrames: 10) == .notHeld)
        #expect(machine.resumeStarted() == nil)
    }
}

@Suite struct HeldOutputTests {
    @Test func countsBytesAndKeepsOrder() {
        var held = HeldOutput()
        let first = held.append(ByteBuffer(string: "abc"), seq: 1, maxBytes: 10, maxFrames: 10)
        let second = held.append(ByteBuffer(string: "de"), seq: nil, maxBytes: 10, maxFrames: 10)
        #expect(!first && !second)
        #expect(held.bytes == 5)
        #expect(held.count == 2)
        #expect(held.frames == [ByteBuffer(string: "abc"), ByteBuffer(string: "de")])
    }

    @Test func exactlyAtTheBoundIsNotOver() {
        var held = HeldOutput()
        let atBound = held.append(ByteBuffer(string: "12345"), seq: 1, maxBytes: 5, maxFrames: 1)
        #expect(!atBound)
        let overBytes = held.append(ByteBuffer(string: "6"), seq: 2, maxBytes: 5, maxFrames: 5)
        #expect(overBytes)
        var counted = HeldOutput()
        _ = counted.append(ByteBuffer(string: "a"), seq: 1, maxBytes: 100, maxFrames: 1)
        let overFrames = counted.append(ByteBuffer(string: "b"), seq: 2, maxBytes: 100, maxFrames: 1)
        #expect(overFrames)
    }

    @Test func skipsBroadcastsAlreadyCoveredButNeverReplies() {
        var held = HeldOutput()
        for (seq, text) in [(UInt64?.some(3), "s3"), (nil, "reply"), (4, "s4"), (5, "s5")] {
            _ = held.append(ByteBuffer(string: text), seq: seq, maxBytes: 1_000, maxFrames: 100)
        }
        #expect(held.frames(after: 4) == [ByteBuffer(string: "reply"), ByteBuffer(string: "s5")])
        #expect(held.frames(after: 0) == held.frames)
    }
}
