import EventStream
import Logging
import NIOCore
import NIOEmbedded

/// Entry points into the relay's hot path for the microbenchmarks (`Benchmarks/`), which live
/// in a package of their own and see only public API. Nothing in the daemon calls these.
public enum RelayProbe {
    /// Parses a client frame's control fields, as a session does for every frame it reads;
    /// returns whether it is a JSON object.
    public static func parseClientFrame(_ bytes: [UInt8]) -> Bool {
        ClientFrame.parse(bytes) != nil
    }

    /// Parses a client frame and decodes its request, as a session does for every request it
    /// publishes (the frame is parsed once for both); nil when the frame names no type or its
    /// payload does not decode.
    public static func decodeRequest<Codec: EventCodec>(_ bytes: [UInt8], codec: Codec) -> Codec.Event? {
        guard let parsed = ClientFrame.parse(bytes), case .value(let name) = parsed.frame.type else { return nil }
        return try? codec.decodeRequest(named: name, frame: bytes, parsed: parsed.root)
    }

    /// Builds an event frame exactly as the daemon sends it.
    public static func eventFrame(
        seq: UInt64?,
        type: String,
        correlation: CorrelationID?,
        body: EncodedBody
    ) -> ByteBuffer {
        OutboundFrame.event(seq: seq, type: type, correlation: correlation, body: body)
    }
}

/// A hub with `subscribers` sessions on one embedded event loop, each on an in-memory channel
/// whose writes are counted and dropped (where a socket would take them): `broadcast` runs
/// the whole fan-out (encode once, order, enqueue to every subscriber, flush).
///
/// Invariant for `@unchecked Sendable`: used from one thread at a time (a benchmark's body);
/// the embedded loop runs only inside `init` and `broadcast`.
public final class FanOutProbe<Codec: EventCodec>: @unchecked Sendable {
    private let loop = EmbeddedEventLoop()
    private let hub: Hub<Codec>
    private var channels: [EmbeddedChannel] = []
    private let sink = WriteCounter()
    private var seq: UInt64 = 0

    public init(codec: Codec, subscribers: Int) throws {
        hub = Hub(codec: codec, epoch: "probe", head: 0, loops: [loop])
        var configuration = RelayConfiguration()
        configuration.initialHoldMs = 0
        configuration.maxConnections = subscribers + 1
        configuration.maxConnectionsPerIP = subscribers + 1
        let services = RelayServices<Codec>(
            hub: hub,
            submit: { _, _ in false },
            journal: EmptyJournal(),
            settings: RelaySettings(configuration: configuration, auth: AuthConfiguration()),
            logger: Logger(label: "probe", factory: { _ in SwiftLogNoOpLogHandler() })
        )
        for _ in 0..<subscribers {
            let channel = EmbeddedChannel(loop: loop)
            let session = SessionHandler(
                services: services,
                loop: loop,
                transport: "tcp",
                remoteIP: "127.0.0.1",
                startMode: .onActive
            )
            try channel.pipeline.syncOperations.addHandlers([sink, session])
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            channels.append(channel)
        }
        loop.run()
    }

    /// Broadcasts `event` (the next seq) to every subscriber and runs the loop until it is
    /// written.
    public func broadcast(_ event: Codec.Event) {
        seq += 1
        hub.deliver(
            [Delivery(event, .broadcast(seq: seq), Origin(session: SessionID(0), correlation: nil))],
            answering: []
        )
        loop.run()
    }

    /// Bytes written by all sessions so far.
    public var bytesWritten: Int { sink.bytes }

    public func close() {
        for channel in channels { _ = try? channel.finish() }
        channels = []
    }
}

/// Counts and drops what the sessions write. Shared by all the probe's channels, which run on
/// one embedded loop (hence `@unchecked Sendable`).
private final class WriteCounter: ChannelOutboundHandler, @unchecked Sendable {
    typealias OutboundIn = ByteBuffer
    var bytes = 0

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        bytes += unwrapOutboundIn(data).readableBytes
        promise?.succeed(())
    }

    func flush(context: ChannelHandlerContext) {}
}

private struct EmptyJournal: JournalReader {
    func position() async throws -> JournalPosition { JournalPosition(epoch: "probe", head: 0, oldest: 1) }
    func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry] { [] }
}
