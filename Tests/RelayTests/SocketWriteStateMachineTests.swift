import NIOCore
import Testing

@testable import Relay

@Suite struct SocketWriteStateMachineTests {
    private func texts(_ action: SocketWriteStateMachine.FlushAction) -> [String] {
        guard case .send(let buffers) = action else { return [] }
        return buffers.map { String(buffer: $0) }
    }

    private func texts(_ action: SocketWriteStateMachine.SentAction) -> [String]? {
        guard case .handToChannel(let buffers) = action else { return nil }
        return buffers.map { String(buffer: $0) }
    }

    /// Writes `frames` to a machine going straight to its socket, then flushes: what it sends.
    private func gatherAndFlush(_ machine: inout SocketWriteStateMachine, _ frames: String...) -> [ByteBuffer] {
        for frame in frames { _ = machine.write(ByteBuffer(string: frame)) }
        guard case .send(let buffers) = machine.flush() else {
            Issue.record("nothing to send")
            return []
        }
        return buffers
    }

    @Test func framesAreGatheredAndSentTogetherAtTheFlush() {
        var machine = SocketWriteStateMachine(direct: true)
        #expect(!machine.hasGathered)
        #expect(machine.write(ByteBuffer(string: "a\n")) == .gathered)
        #expect(machine.write(ByteBuffer(string: "bc\n")) == .gathered)
        #expect(machine.hasGathered)
        let flush = machine.flush()
        #expect(texts(flush) == ["a\n", "bc\n"])
        #expect(!machine.hasGathered)
        guard case .send(let buffers) = flush else { return }
        #expect(machine.sent(5, of: buffers) == .done)
        // Still straight to the socket.
        #expect(machine.write(ByteBuffer(string: "d\n")) == .gathered)
    }

    /// What is gathered stays within the outbound bound: the frame that would take it over
    /// asks for a send first (what the kernel leaves of a send goes to the channel whole, past
    /// the reach of a cut). A single frame larger than the bound is still gathered.
    @Test func gatheringStopsAtTheLimitAndAsksForASendFirst() {
        var machine = SocketWriteStateMachine(direct: true)
        #expect(machine.write(ByteBuffer(string: "aaaa\n"), gatheringAtMost: 8) == .gathered)
        #expect(machine.gatheredBytes == 5)
        #expect(machine.write(ByteBuffer(string: "bbbb\n"), gatheringAtMost: 8) == .sendGatheredFirst)
        #expect(machine.gatheredBytes == 5, "nothing gathered by the refused write")
        guard case .send(let buffers) = machine.flush() else {
            Issue.record("nothing to send")
            return
        }
        #expect(machine.gatheredBytes == 0)
        #expect(machine.sent(5, of: buffers) == .done)
        #expect(machine.write(ByteBuffer(string: "bbbb\n"), gatheringAtMost: 8) == .gathered)
        // Alone, a frame over the limit is gathered: nothing is ahead of it.
        _ = machine.flush()
        #expect(machine.write(ByteBuffer(string: "cccccccccc\n"), gatheringAtMost: 8) == .gathered)
        #expect(machine.gatheredBytes == 11)
        #expect(machine.close().count == 1)
        #expect(machine.gatheredBytes == 0)
    }

    @Test func aFlushWithNothingGatheredSendsNothing() {
        var machine = SocketWriteStateMachine(direct: true)
        guard case .none = machine.flush() else {
            Issue.record("sent with nothing gathered")
            return
        }
    }

    @Test func withoutASocketEverythingGoesThroughTheChannelUncounted() {
        var machine = SocketWriteStateMachine(direct: false)
        #expect(!machine.writesToSocket)
        #expect(machine.write(ByteBuffer(string: "a\n")) == .channel)
        #expect(!machine.countsChannelWrites)
        machine.handedToChannel()
        machine.channelWriteCompleted(queueEmpty: true)
        #expect(machine.write(ByteBuffer(string: "b\n")) == .channel)
    }

    @Test func whatTheKernelLeavesGoesToTheChannelAndLaterWritesFollowIt() {
        var machine = SocketWriteStateMachine(direct: true)
        let buffers = gatherAndFlush(&machine, "abc\n", "def\n", "ghi\n")
        // The kernel took "abc\nde": the rest of the second frame and the third remain.
        #expect(texts(machine.sent(6, of: buffers)) == ["f\n", "ghi\n"])
        #expect(!machine.writesToSocket)
        #expect(machine.write(ByteBuffer(string: "jkl\n")) == .channel)
        machine.handedToChannel()
        // Three writes in the channel: back to the socket only when all three completed.
        machine.channelWriteCompleted(queueEmpty: true)
        machine.channelWriteCompleted(queueEmpty: true)
        #expect(machine.write(ByteBuffer(string: "mno\n")) == .channel)
        machine.handedToChannel()
        machine.channelWriteCompleted(queueEmpty: true)
        machine.channelWriteCompleted(queueEmpty: true)
        #expect(machine.writesToSocket)
        #expect(machine.write(ByteBuffer(string: "pqr\n")) == .gathered)
    }

    @Test func aFullSocketOrAFailedSendHandsEverythingToTheChannel() {
        var machine = SocketWriteStateMachine(direct: true)
        let buffers = gatherAndFlush(&machine, "a\n", "b\n")
        #expect(texts(machine.sent(0, of: buffers)) == ["a\n", "b\n"])
        #expect(machine.write(ByteBuffer(string: "c\n")) == .channel)
    }

    @Test func framesWaitingInTheSessionsQueueKeepWritesInTheChannel() {
        var machine = SocketWriteStateMachine(direct: true)
        let buffers = gatherAndFlush(&machine, "a\n")
        _ = machine.sent(0, of: buffers)
        // The channel completed its write, but frames wait in the session's queue (the
        // channel was full): they go through the channel first.
        machine.channelWriteCompleted(queueEmpty: false)
        #expect(machine.write(ByteBuffer(string: "b\n")) == .channel)
        machine.handedToChannel()
        machine.channelWriteCompleted(queueEmpty: true)
        #expect(machine.write(ByteBuffer(string: "c\n")) == .gathered)
    }

    @Test func aChannelWriteWhileDirectIsCountedUntilItCompletes() {
        var machine = SocketWriteStateMachine(direct: true)
        #expect(machine.countsChannelWrites)
        // A last frame written through the channel (a close): the channel holds it now.
        machine.handedToChannel()
        #expect(machine.write(ByteBuffer(string: "a\n")) == .channel)
        machine.channelWriteCompleted(queueEmpty: true)
        #expect(machine.write(ByteBuffer(string: "b\n")) == .gathered)
    }

    @Test func closingReturnsWhatWasGatheredAndLeavesTheChannelEverything() {
        var machine = SocketWriteStateMachine(direct: true)
        _ = machine.write(ByteBuffer(string: "a\n"))
        #expect(machine.close().map { String(buffer: $0) } == ["a\n"])
        #expect(!machine.countsChannelWrites)
        #expect(machine.write(ByteBuffer(string: "b\n")) == .channel)
        machine.channelWriteCompleted(queueEmpty: true)
        #expect(machine.write(ByteBuffer(string: "c\n")) == .channel)
    }
}
