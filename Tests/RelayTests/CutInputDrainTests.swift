import NIOCore
import NIOEmbedded
import Testing

@testable import Relay

/// What a cut client still sends: dropped before any decoder, and read at most once a pace.
@Suite struct CutInputDrainTests {
    /// Counts the reads that pass it towards the socket.
    private final class ReadCounter: ChannelOutboundHandler {
        typealias OutboundIn = NIOAny
        var reads = 0
        func read(context: ChannelHandlerContext) {
            reads += 1
            context.read()
        }
    }

    /// Records what reaches the handlers behind the drain.
    private final class Behind: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        var reads = 0
        var inputClosed = false
        func channelRead(context: ChannelHandlerContext, data: NIOAny) { reads += 1 }
        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let event = event as? ChannelEvent, event == .inputClosed { inputClosed = true }
        }
    }

    @Test func readsAreDroppedAndPacedAndTheInputsEndPasses() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        let counter = ReadCounter()
        let behind = Behind()
        let drain = CutInputDrain(pace: .milliseconds(10))
        try channel.pipeline.syncOperations.addHandlers([counter, drain, behind])

        try channel.writeInbound(ByteBuffer(string: #"{"op":"ping"}"# + "\n"))
        #expect(behind.reads == 0, "dropped before anything behind it")
        #expect(drain.droppedBytes == 14)

        channel.read()
        #expect(counter.reads == 1, "the first read goes at once")
        channel.read()
        channel.read()
        #expect(counter.reads == 1, "the next waits for the pace, however often asked")
        loop.advanceTime(by: .milliseconds(9))
        #expect(counter.reads == 1)
        loop.advanceTime(by: .milliseconds(1))
        #expect(counter.reads == 2, "then it goes, once")
        loop.advanceTime(by: .milliseconds(50))
        channel.read()
        #expect(counter.reads == 3, "after a quiet while, at once again")

        channel.pipeline.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        #expect(behind.inputClosed, "the client's close still reaches the session")
        _ = try channel.finish()
    }

    @Test func aReadDueAfterTheDrainIsRemovedIsNotMade() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        let counter = ReadCounter()
        let drain = CutInputDrain(pace: .milliseconds(10))
        try channel.pipeline.syncOperations.addHandlers([counter, drain])
        channel.read()
        channel.read()
        try channel.pipeline.syncOperations.removeHandler(drain).wait()
        loop.advanceTime(by: .milliseconds(20))
        #expect(counter.reads == 1)
        _ = try channel.finish()
    }
}
