import NIOCore

/// What a client cut as a slow consumer still sends: read and dropped at the front of the
/// pipeline, before TLS, WebSocket or line decoding see it, one read of at most 64 KiB at a
/// time and at most one read per `pace`.
///
/// The connection reads on after the cut (see `CloseGraceStateMachine`): closing a socket with
/// unread input resets it, which loses the notice, and a client blocked on sending would never
/// read it. But nothing it sends matters any more, and reading it through the pipeline at the
/// client's pace cost a core for the whole grace period: an outside audit's client sent 73 MB
/// in 10 s, parsed line by line for nothing (9.5 s of CPU). Dropped here, unparsed and paced,
/// it costs a few reads a second; the client's input's end (its close) still passes.
final class CutInputDrain: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = NIOAny

    /// The least time between two reads: at most 64 KiB per `pace` reach the daemon.
    static let pace = TimeAmount.milliseconds(10)
    static let readBytes = 64 << 10

    private var pace: ReadPaceStateMachine
    /// Bytes read and dropped.
    private(set) var droppedBytes = 0

    init(pace: TimeAmount = CutInputDrain.pace) {
        self.pace = ReadPaceStateMachine(pace: pace)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // One read of at most `readBytes` per read event, not up to 16 growing ones.
        guard let options = context.channel.syncOptions else { return }
        try? options.setOption(.maxMessagesPerRead, value: 1)
        try? options.setOption(
            .recvAllocator,
            value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: Self.readBytes)
        )
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        pace.stopped()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        droppedBytes += unwrapInboundIn(data).readableBytes
    }

    func read(context: ChannelHandlerContext) {
        switch pace.readRequested(now: context.eventLoop.now) {
        case .read:
            context.read()
        case .readAt(let deadline):
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(deadline: deadline) {
                let (drain, context) = bound.value
                if drain.pace.scheduledTimeCame(now: context.eventLoop.now) { context.read() }
            }
        case .none:
            break
        }
    }
}
