import EventStream
import Foundation
import Glibc
import Logging
import NIOCore
import NIOSSL
import NIOTLS
import NIOWebSocket

/// One client connection, on any transport: parses its frames, keeps its subscriptions and
/// role, runs its requests in order, and owns its bounded outbound queue.
///
/// Everything here runs on the connection's event loop. The session only parses, validates
/// and authorises frames; a valid request goes to the sequencer, which answers the requests
/// of every connection in arrival order, a batch at a time. Consecutive requests overlap (at
/// most `maxPipelinedFrames` in flight), so one client's writes share commits; their answers
/// come back in request order. Anything else (a control op, a frame answered with an error)
/// waits until every request in flight has been answered, and the session reads ahead at most
/// `maxPipelinedFrames` frames meanwhile, then stops reading.
///
/// The decisions are made by small state machines that do no I/O (`SessionStateMachine`,
/// `AuthenticationStateMachine`, `ResumeStateMachine`, `InboundStateMachine`, and
/// `OutboundQueue`); this handler feeds them events and carries out the actions they return.
final class SessionHandler<Codec: EventCodec>: ChannelDuplexHandler {
    typealias InboundIn = FrameEvent
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    enum StartMode {
        /// Plain TCP: greet when the connection becomes active.
        case onActive
        /// TLS: greet once the handshake completes.
        case onTLSHandshake
        /// Added to an already open connection (after a WebSocket upgrade).
        case immediately
    }

    // The fields every frame written to this session reads, first and together: a fan-out
    // writes to every subscriber in turn, so each cache line of the session it touches is a
    // miss per subscriber (the object spans nine or so lines; these take the first four).

    /// Set by the shard to its pass number while this session gets a run's frames one by one.
    var ownFramesPass: UInt64 = 0
    private let services: RelayServices<Codec>
    private var context: ChannelHandlerContext?
    /// Whether the channel is below its high-water mark, as its last writability change left
    /// it (kept here: asking the channel reaches into two more of its objects per frame).
    private var channelWritable = false
    /// Frames were handed to the channel since it was last flushed.
    private var needsFlush = false
    /// The hub's pass has been told to call `flushPending` for this session.
    private var fanOutPending = false
    private let runFraming: RunFraming
    private var lifecycle = SessionStateMachine()
    private var authentication = AuthenticationStateMachine()
    /// The client's `resume`: while one runs, nothing else from the client is handled.
    private var resumption = ResumeStateMachine()
    /// Frames waiting for the channel to be writable again (bounded; see `OutboundQueue`).
    private var outbound = OutboundQueue()
    /// The settings' version that `configurationCopy` and `queueLimits` are of.
    private var configurationVersion: Int
    /// `max_queue_bytes` and `max_queue_frames` of `configurationCopy`, here (read per frame).
    private var queueLimits: (bytes: Int, frames: Int)
    /// The channel's high water mark (unknown: `Int.max`): a writable channel holds at most
    /// this many bytes unsent.
    private var highWaterMark = Int.max
    private var stallWatch = StallWatch.idle
    /// After a slow-consumer cut: when the connection closes.
    private var closeGrace = CloseGraceStateMachine()
    /// The last `tcpi_bytes_acked` read of the socket.
    private var lastAcknowledgedBytes: UInt64 = 0
    /// The connection's socket, when the session may write to it itself (plain TCP, and
    /// WebSocket without compression or TLS).
    private let socket: CInt?
    /// Whether writes go straight to `socket` or through the channel.
    private var socketWrites: SocketWriteStateMachine
    /// On WebSocket, NIO's frame encoder: bytes that were meant for the socket (a run the kernel
    /// took only part of, cut anywhere, even mid-frame), and the later parts of a large list
    /// answer, are written from its place in the pipeline, past the transport handler, which
    /// would frame them again.
    private var wireContext: ChannelHandlerContext?

    let id: SessionID
    let uuid = UUID().uuidString.lowercased()
    let loop: any EventLoop
    let transport: String
    /// How a run of broadcasts goes out on this session's transport.
    enum RunFraming {
        /// TCP and TLS: frames are lines, so a run is one buffer, the same for every session.
        case lines
        /// WebSocket without compression: the hub's run of complete text frames, the same for
        /// every such session (`WebSocketFraming`).
        case webSocketFrames
        /// WebSocket with permessage-deflate: each frame is its own (compressed) message.
        case oneByOne
    }

    /// TLS (and wss): what is handed to the channel is encrypted at its flush.
    private let encryptsAtFlush: Bool
    private let startMode: StartMode
    /// A role granted before the session started (a WebSocket upgrade that carried a token).
    private let preauthenticated: Role?
    private let remoteIP: String
    private let catalog: EventCatalog
    private let triage: FrameTriage
    /// This loop's sessions and counters (touched only on `loop`, like the session itself).
    private let shard: Shard<Codec>?
    private var logger: Logger

    /// Frames read and waiting, and requests with the sequencer.
    private var inbound = InboundStateMachine()
    /// What the answers of the requests in flight may bring, against the outbound bound.
    private var admission = AnswerAdmission()
    /// The subscriptions as written, and the event types they resolve to for the session's role.
    private var patterns: [TypePattern] = ["Response*"].compactMap(TypePattern.init)
    private var types = TypeSet()
    private var bucket: TokenBucket
    /// The seq the greeting named.
    private var helloSeq: UInt64 = 0
    /// Closes the session if no valid token comes in time (see `AuthenticationStateMachine`).
    private var idleTimer: Scheduled<Void>?
    /// A look at the backlog is scheduled (`lookAtTheBacklogLater`).
    private var backlogWatched = false
    /// Set when `draining` is sent: the daemon is stopping, and a request that is not in the
    /// sequencer yet is refused (`unavailable`, nothing applied) rather than committed with an
    /// answer the closing connection might never carry.
    private var drainingSent = false
    /// A page of a replay waiting for the client to take what was written of it, and the
    /// rest of the page (`writeReplayed`).
    private var replayWaiter: (promise: EventLoopPromise<Bool>, rest: ArraySlice<ByteBuffer>)?

    init(
        services: RelayServices<Codec>,
        loop: any EventLoop,
        transport: String,
        remoteIP: String,
        startMode: StartMode,
        preauthenticated: Role? = nil,
        webSocketCompression: Bool = false,
        socket: CInt? = nil,
        maxFrameBytes: Int? = nil
    ) {
        self.socket = socket
        self.socketWrites = SocketWriteStateMachine(direct: socket != nil)
        self.preauthenticated = preauthenticated
        self.services = services
        self.id = services.hub.makeSessionID()
        self.loop = loop
        self.transport = transport
        self.runFraming =
            transport == "tcp" || transport == "tls" ? .lines : webSocketCompression ? .oneByOne : .webSocketFrames
        self.remoteIP = remoteIP
        self.startMode = startMode
        self.encryptsAtFlush = transport == "tls" || transport == "wss"
        self.catalog = services.hub.codec.catalog
        self.triage = FrameTriage(catalog: services.hub.codec.catalog)
        self.shard = services.hub.shard(for: loop)
        let (version, configuration) = services.settings.versionedConfiguration
        self.configurationVersion = version
        self.configurationCopy = configuration
        self.queueLimits = (configuration.maxQueueBytes, configuration.maxQueueFrames)
        self.maxFrameBytes = maxFrameBytes ?? configuration.maxFrameBytes
        self.bucket = TokenBucket(burst: configuration.rateLimitBurst)
        var logger = services.logger
        logger[metadataKey: "connection.id"] = "\(id)"
        logger[metadataKey: "transport"] = "\(transport)"
        logger[metadataKey: "remote"] = "\(remoteIP)"
        self.logger = logger
    }

    /// The relay's configuration as of the last update seen: taken again only after a reload,
    /// not under the settings' lock on every frame. Lent, not copied: a copy would retain and
    /// release its strings and arrays, which every session shares, from both loops at once.
    private var configuration: RelayConfiguration {
        _read {
            if services.settings.version != configurationVersion { refreshConfiguration() }
            yield configurationCopy
        }
    }

    /// `max_queue_bytes` and `max_queue_frames` as of the last reload (without the rest of the
    /// configuration, which lies elsewhere in the session).
    private var limits: (bytes: Int, frames: Int) {
        if services.settings.version != configurationVersion { refreshConfiguration() }
        return queueLimits
    }

    private func refreshConfiguration() {
        (configurationVersion, configurationCopy) = services.settings.versionedConfiguration
        queueLimits = (configurationCopy.maxQueueBytes, configurationCopy.maxQueueFrames)
    }
    private var configurationCopy: RelayConfiguration
    /// The largest frame this connection's transport takes: set when it opened, as its framing
    /// was (a reload changes it for connections opened after it), and named in `frame_too_large`.
    private let maxFrameBytes: Int

    // MARK: Lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if case .webSocketFrames = runFraming {
            // Also on TLS (no socket of its own): a large list's later parts go there.
            wireContext = try? context.pipeline.syncOperations.context(handlerType: WebSocketFrameEncoder.self)
            // Without the encoder's place a cut run could only go through the transport
            // handler, which would frame it again: such a session writes through the channel.
            if wireContext == nil { _ = socketWrites.close() }
        }
        channelWritable = context.channel.isWritable
        if let waterMark = try? context.channel.syncOptions?.getOption(.writeBufferWaterMark) {
            highWaterMark = waterMark.high
        }
        if startMode == .immediately, context.channel.isActive { start() }
    }

    func channelActive(context: ChannelHandlerContext) {
        if startMode == .onActive { start() }
        context.fireChannelActive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is LeaveSocket {
            leaveSocket(context)
            // A frame of the transport's own follows (a pong, a close): the rest of a frame
            // begun goes first, or the transport's frame would land inside it.
            if finishFrameBegun(context) { context.flush() }
            return
        }
        if let channelEvent = event as? ChannelEvent, channelEvent == .inputClosed {
            // The client has finished sending (e.g. `nc -N`, a pipe at its end): answer
            // everything it sent, then close.
            inbound.inputClosed()
            // A cut client that has read its last frames and closed: done.
            if closeGrace.inputEnded() {
                context.close(promise: nil)
                return
            }
            if lifecycle.isStarted { drain() }
            return
        }
        if startMode == .onTLSHandshake, let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted = tlsEvent {
            start()
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// The daemon closes the connection (at the end of a drain, or a cut client's grace): what
    /// waits in the session's own queue goes to the channel first (a frame begun, `draining`),
    /// which writes what it can before the connection ends (TLS flushes it before its
    /// close_notify), rather than being dropped here.
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if mode != .input, !outbound.isEmpty {
            handOverQueued(context)
            context.flush()
        }
        context.close(mode: mode, promise: promise)
    }

    /// Hands the channel the rest of a frame begun that waits in the queue; whether there was
    /// any.
    @discardableResult
    private func finishFrameBegun(_ context: ChannelHandlerContext) -> Bool {
        let unfinished = outbound.takeUnfinished()
        for part in unfinished { channelWrite(context, part, raw: true) }
        return !unfinished.isEmpty
    }

    /// Hands the channel what waits in the queue, in order, while `more` says so.
    private func handOverQueued(_ context: ChannelHandlerContext, while more: () -> Bool = { true }) {
        while more(), let next = outbound.next() { channelWrite(context, next.buffer, raw: next.continuation) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        leaveSocket(context)
        stop()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stop()
        self.context = nil
        wireContext = nil
    }

    private func start() {
        guard !lifecycle.isStarted else { return }
        let configuration = self.configuration
        let auth = services.settings.auth
        let previousRole = authentication.role
        let access = authentication.start(
            required: auth.required,
            preauthenticated: preauthenticated,
            now: loop.now,
            idleTimeout: .seconds(Int64(configuration.unauthenticatedIdleSeconds))
        )
        // A session that must authenticate receives no live output before it has: its hold
        // starts with its authentication instead (`authenticate`).
        let holdAtGreeting: Int
        if case .awaitToken = access { holdAtGreeting = 0 } else { holdAtGreeting = configuration.initialHoldMs }
        guard case .greet(let holdMilliseconds) = lifecycle.start(initialHoldMilliseconds: holdAtGreeting)
        else { return }
        helloSeq = services.hub.register(self)
        resumption.greeted(helloSeq: helloSeq, types: types)
        services.hub.metrics.connected(transport)
        if case .granted(let role) = access { applySubscriptions(patterns, from: previousRole, to: role) }
        services.hub.settled(self)
        logger.debug("session started")
        let hello = OutboundFrame.op("hello", correlation: nil) { writer in
            writer.field("protocol", 1)
            // Protocol 1.1: request frames may carry `mid` (the app makes writes idempotent by it).
            OutboundFrame.stringArray(&writer, "features", ["mid"])
            writer.field("server", configuration.serverName)
            writer.field("session", uuid)
            writer.field("epoch", services.hub.epoch)
            writer.field("seq", helloSeq)
            // "required" only while this session has to authenticate: one that did with its
            // upgrade (a bearer token or a subprotocol) has nothing more to do.
            let awaitsToken: Bool
            if case .awaitToken = access { awaitsToken = true } else { awaitsToken = false }
            writer.field("auth", awaitsToken ? "required" : "none")
            OutboundFrame.stringArray(&writer, "subscriptions", patterns.map(\.text))
        }
        write(hello)
        flush()
        if let holdMilliseconds { releaseStartHold(after: holdMilliseconds) }
        if case .awaitToken(let deadline) = access {
            let seconds = configuration.unauthenticatedIdleSeconds
            let bound = NIOLoopBound(self, eventLoop: loop)
            idleTimer = loop.scheduleTask(deadline: deadline) {
                let session = bound.value
                guard case .close = session.authentication.idleTimeoutElapsed(now: session.loop.now) else { return }
                session.closeAfter(
                    session.errorFrame(.unauthorized, "No valid token within \(seconds) seconds; closing.", nil)
                )
            }
        }
        // Frames that arrived before the greeting (during a TLS handshake) wait until now.
        drain()
    }

    private func stop() {
        idleTimer?.cancel()
        idleTimer = nil
        resumption.sessionClosing()
        continueReplay()  // ends a replay waiting for the client
        guard case .unregister = lifecycle.stop() else { return }
        if authentication.role == .monitor {
            services.hub.updateSubscriptions(self, from: types, to: TypeSet(), monitor: true, isMonitor: false)
        }
        services.hub.unregister(self)
        services.hub.metrics.disconnected(transport)
        logger.debug("session ended")
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !lifecycle.isClosing else { return }
        inbound.frameReceived(unwrapInboundIn(data))
        if lifecycle.isStarted { drain() }
    }

    func read(context: ChannelHandlerContext) {
        switch inbound.readRequested(maxQueued: configuration.maxPipelinedFrames) {
        case .read: context.read()
        case .none: break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let tls = error as? NIOSSLError, case .uncleanShutdown = tls {
            // The client's input ended without close_notify (a FIN alone, a killed `openssl
            // s_client`). NIOSSL says so, then passes the input's end on: what the client sent
            // before it is answered, as on plain TCP, and then the connection closes. Not an
            // error of the connection: it goes on as it was.
            logger.debug("TLS input ended without close_notify")
            return
        }
        // A handler before this one may have written a last frame of its own (NIO's WebSocket
        // error handler writes a close): nothing may go to the socket past it, not even what was
        // gathered for it (the close below would fail it unsent anyway).
        _ = socketWrites.close()
        if error is NIOSSLError || error is BoringSSLError {
            // A TLS handshake refused (an untrusted certificate, no client certificate, not
            // TLS at all): what an operator looks for when clients cannot connect.
            logger.info(
                "TLS connection failed",
                metadata: ["reason": "\(TLSFailure.describe("\(error)", peer: "the client"))"]
            )
        } else {
            logger.debug("connection error", metadata: ["error": "\(error)"])
        }
        context.close(promise: nil)
    }

    /// The newest seq broadcast on this session's loop.
    private var loopHead: UInt64 { shard?.head ?? helloSeq }

    /// Whether frames from the client wait: a resume is running, or the session is closing.
    private var inboundPaused: Bool { resumption.isRunning || lifecycle.isClosing }

    /// Whether answers wait for the client beyond half the outbound bound: no new request is
    /// taken until it has read them (and past the read-ahead, none is read: TCP back-pressure),
    /// so a client that pipelines requests with large answers gets them at its own pace.
    private var answersBackedUp: Bool { !outbound.isEmpty && queuedBytes > limits.bytes / 2 }

    /// The backlog shrinks as the client reads, which no event says below the channel's water
    /// marks: what waits on it (requests behind backed-up answers, the rest of a replay's page)
    /// looks again shortly, one look at a time. Each goes on, or asks for another look.
    private func lookAtTheBacklogLater() {
        guard !backlogWatched else { return }
        backlogWatched = true
        let bound = NIOLoopBound(self, eventLoop: loop)
        loop.scheduleTask(in: .milliseconds(2)) {
            let session = bound.value
            session.backlogWatched = false
            let closing = session.lifecycle.isClosing || session.context == nil
            // A waiting page goes on once the client has taken everything (or ends).
            if session.replayWaiter != nil {
                if session.queuedBytes == 0 || closing {
                    session.continueReplay()
                } else {
                    session.lookAtTheBacklogLater()
                }
            }
            // Requests wait behind answers only while no resume runs (its end drains them).
            guard !closing, !session.resumption.isRunning else { return }
            // (`drain` looks again while a client that has finished sending still waits for answers.)
            if session.answersBackedUp { session.lookAtTheBacklogLater() } else { session.drain() }
        }
    }

    /// Handles queued frames until one needs the bus (or a resume) to finish.
    private func drain() {
        let maxInFlight = configuration.maxPipelinedFrames
        frames: while !inboundPaused {
            if answersBackedUp {
                lookAtTheBacklogLater()
                break
            }
            switch inbound.nextFrame(maxInFlight: maxInFlight) {
            case .handle(let frame):
                handle(frame)
            case .tryJoining(let frame):
                // A frame that cannot join the requests in flight is parsed once, then waits
                // (so does one the sequencer has no room for: it is tried again, in order, once
                // the requests in flight are answered).
                guard let request = pipelinable(frame), submit(request) else {
                    inbound.headMustWait()
                    break frames
                }
                inbound.headJoined()
                shard?.framesIn += 1
            case .wait:
                break frames
            }
        }
        flush()
        guard let context else { return }
        // A client that has finished sending is closed once its answers are out, not while some
        // still wait in the session's queue (they would be lost with it).
        let answersWait = inbound.input == .closed && !outbound.isEmpty
        if answersWait { lookAtTheBacklogLater() }
        switch inbound.drained(paused: inboundPaused || answersWait, maxQueued: configuration.maxPipelinedFrames) {
        case .close:
            guard case .closeWhenFlushed = closeSession(.inputClosed) else { return }
            let channel = context.channel
            let promise = loop.makePromise(of: Void.self)
            channelWrite(context, ByteBuffer(), flush: true, promise: promise)
            promise.futureResult.whenComplete { _ in channel.close(promise: nil) }
        case .read:
            context.read()
        case .none:
            break
        }
    }

    /// Ends the hold on live output after `milliseconds`, unless a frame or a resume ended it.
    private func releaseStartHold(after milliseconds: Int64) {
        let bound = NIOLoopBound(self, eventLoop: loop)
        loop.scheduleTask(in: .milliseconds(milliseconds)) { bound.value.releaseStartHold() }
    }

    /// Lets live output flow after the start hold, unless a resume has taken it over.
    private func releaseStartHold() {
        guard case .write(let held) = lifecycle.releaseStartHold() else { return }
        for frame in held { write(frame) }
        flush()
    }

    private func handle(_ event: FrameEvent) {
        // Counted whatever it is: one refused as too large or binary is a frame received too.
        shard?.framesIn += 1
        if case .frame = event {} else { releaseStartHold() }
        switch event {
        case .tooLarge:
            sendError(
                .frameTooLarge,
                "The frame is larger than \(maxFrameBytes) bytes; it was dropped.",
                nil
            )
        case .binary:
            sendError(.unsupportedFrame, "Binary messages are not supported; send JSON as text messages.", nil)
        case .frame(let buffer):
            handle(frame: Array(buffer.readableBytesView))
        }
    }

    private func handle(frame bytes: [UInt8]) {
        let verdict = triage.verdict(
            on: bytes,
            session: .init(isAuthenticated: authentication.isAuthenticated, role: authentication.role),
            ratePerSecond: configuration.rateLimitPerSecond
        ) { bucket.take(rate: configuration.rateLimitPerSecond, burst: configuration.rateLimitBurst) }
        if verdict.endsStartHold { releaseStartHold() }
        switch verdict {
        case .publish(let publish):
            do {
                startRequest(try FrameTriage.prepared(publish, bytes: bytes, codec: services.hub.codec))
            } catch {
                sendError(.invalidPayload, error.message, publish.re)
            }
        case .resume(let epoch, let after, let re):
            resume(epoch: epoch, after: after, re: re)
        case .control(let op, let frame, let re):
            control(op: op, frame: frame, re: re)
        case .refuse(let code, let message, let re):
            sendError(code, message, re)
        }
    }

    // MARK: Publishing

    typealias PreparedRequest = Relay.PreparedRequest<Codec.Event>

    /// The request `event` stands for when it may join the requests in flight: a frame that
    /// `handle` would publish without answering anything itself. Takes a rate-limit token.
    private func pipelinable(_ event: FrameEvent) -> PreparedRequest? {
        guard case .frame(let buffer) = event, authentication.isAuthenticated, authentication.role == .view,
            !drainingSent
        else {
            return nil
        }
        let bytes = Array(buffer.readableBytesView)
        guard let publish = triage.publish(in: bytes),
            let request = try? FrameTriage.prepared(publish, bytes: bytes, codec: services.hub.codec)
        else { return nil }
        // Its answer must fit beside those on their way (checked before the token is taken:
        // a frame that waits is handled, and takes one, later).
        guard let type = catalog.index(of: request.name),
            admission.mayJoin(type: type, queuedBytes: queuedBytes, budget: limits.bytes / 2)
        else { return nil }
        guard bucket.take(rate: configuration.rateLimitPerSecond, burst: configuration.rateLimitBurst) else {
            return nil
        }
        return request
    }

    private func startRequest(_ request: PreparedRequest) {
        guard !drainingSent else {
            sendError(
                .unavailable,
                "The daemon is shutting down; nothing was applied. Reconnect and send it again.",
                request.re
            )
            return
        }
        guard submit(request) else {
            sendError(
                .unavailable,
                "The daemon has too many requests waiting; nothing was applied. Try again shortly.",
                request.re
            )
            return
        }
        inbound.requestSubmitted()
    }

    /// Hands a request to the sequencer; false (nothing done) when it has no room. The caller
    /// tells `inbound` about it.
    private func submit(_ request: PreparedRequest) -> Bool {
        guard services.submit(request.event, Origin(session: id, correlation: request.re, mid: request.mid)) else {
            return false
        }
        let index = catalog.index(of: request.name)
        if let index { shard?.requestsIn[index] += 1 }
        admission.submitted(type: index ?? -1)
        return true
    }

    /// The `count` oldest requests in flight have had every answer (called by the shard after
    /// writing them).
    func requestsAnswered(_ count: Int) {
        for _ in 0..<count { inbound.requestAnswered() }
        admission.answered(count: count)
        drain()
    }

    // MARK: Control operations

    private func control(op: String, frame: ClientFrame, re: CorrelationID?) {
        switch op {
        case "ping":
            write(OutboundFrame.op("pong", correlation: re), asked: true)
        case "subscribe", "unsubscribe":
            changeSubscriptions(subscribe: op == "subscribe", frame: frame, re: re)
        case "auth":
            authenticate(frame: frame, re: re)
        default:
            sendError(.unknownOp, op.isEmpty ? "The op is empty." : "Unknown op \(shown(op)).", re)
        }
    }

    private func changeSubscriptions(subscribe: Bool, frame: ClientFrame, re: CorrelationID?) {
        let role = authentication.role
        let outcome = SubscriptionChange.outcome(
            subscribe: subscribe,
            types: frame.types,
            current: patterns,
            role: role,
            catalog: catalog,
            maxSubscriptions: configuration.maxSubscriptions
        )
        switch outcome {
        case .refuse(let code, let message):
            sendError(code, message, re)
        case .apply(let next):
            applySubscriptions(next, from: role, to: role)
            write(
                OutboundFrame.op(subscribe ? "subscribed" : "unsubscribed", correlation: re) { writer in
                    OutboundFrame.stringArray(&writer, "types", next.map(\.text))
                },
                asked: true
            )
        }
    }

    /// Registers `next` with the hub, resolved for `nextRole` (the session's role from now on).
    private func applySubscriptions(_ next: [TypePattern], from previousRole: Role, to nextRole: Role) {
        let resolved = catalog.resolveAll(next, for: nextRole)
        services.hub.updateSubscriptions(
            self,
            from: types,
            to: resolved,
            monitor: previousRole == .monitor && lifecycle.isRegistered,
            isMonitor: nextRole == .monitor
        )
        patterns = next
        types = resolved
        resumption.subscriptionsChanged(to: resolved, head: loopHead)
    }

    private func authenticate(frame: ClientFrame, re: CorrelationID?) {
        // No token is a bad token (`unauthorized`, counted toward the close); a token that is
        // not a string is a mistyped field.
        if case .invalid = frame.token {
            sendError(.invalidFrame, "auth needs token (a string).", re)
            return
        }
        let token = frame.token.value
        let auth = services.settings.auth
        let previousRole = authentication.role
        let wasAwaitingToken = !authentication.isAuthenticated
        switch authentication.tokenPresented(grants: token.flatMap(auth.role(for:)), required: auth.required) {
        case .granted(let role):
            idleTimer?.cancel()
            idleTimer = nil
            applySubscriptions(patterns, from: previousRole, to: role)
            write(OutboundFrame.op("authenticated", correlation: re) { $0.field("role", role.rawValue) }, asked: true)
            // Its live output starts now: held, so that a resume sent next comes first.
            if wasAwaitingToken,
                let holdMilliseconds = lifecycle.authenticated(initialHoldMilliseconds: configuration.initialHoldMs)
            {
                releaseStartHold(after: holdMilliseconds)
            }
        case .refuse:
            logger.info("authentication refused")
            sendError(.unauthorized, token == nil ? "auth needs token (a string)." : "The token is not valid.", re)
        case .refuseAndClose:
            logger.info("authentication refused; closing after too many bad tokens")
            closeAfter(errorFrame(.unauthorized, "The token is not valid. Too many bad tokens; closing.", re))
        }
    }

    // MARK: Resume

    private func resume(epoch: String, after: UInt64, re: CorrelationID?) {
        // Live broadcasts held since the greeting stay held: they come after the replay.
        let heldSinceStart = lifecycle.resumeStarted()
        let action = resumption.resumeRequested(
            epoch: epoch,
            after: after,
            types: types,
            heldSinceStart: heldSinceStart,
            helloSeq: helloSeq,
            current: loopHead,
            released: services.hub.seq,
            pageSize: configuration.resumePageSize
        )
        guard case .replay(let plan) = action else { return }
        flush()
        let journal = services.journal
        let catalog = self.catalog
        let bound = NIOLoopBound(self, eventLoop: loop)
        let loop = self.loop
        let currentEpoch = services.hub.epoch
        // A page waits in memory while the client takes it: about half the outbound bound.
        let budget = max(1, limits.bytes / 2)
        Task {
            do {
                let position = try await journal.position()
                guard plan.isServed(by: position, currentEpoch: currentEpoch) else {
                    loop.execute { bound.value.finishResume(.gap(current: plan.current), re: re) }
                    return
                }
                var cursor = plan.start
                var pageEntries = ResumeStateMachine.Plan.firstPageEntries
                while let page = plan.page(after: cursor, entries: pageEntries) {
                    let entries = try await journal.entries(after: page.after, through: page.through)
                    pageEntries = plan.nextPageEntries(
                        lastPageBytes: entries.reduce(0) { $0 + $1.payload.count },
                        lastPageEntries: entries.count,
                        budgetBytes: budget
                    )
                    guard page.isWhole(entries) else {
                        // Pruned while reading.
                        loop.execute { bound.value.finishResume(.gap(current: plan.current), re: re) }
                        return
                    }
                    let frames: [ByteBuffer] = entries.compactMap { entry in
                        guard let index = catalog.index(of: entry.type), plan.sends(entry.seq, typeIndex: index)
                        else { return nil }
                        return OutboundFrame.event(
                            seq: entry.seq,
                            type: entry.type,
                            correlation: nil,
                            mark: entry.mid.map { MutationMark(mid: $0) },
                            body: .payload(entry.payload)
                        )
                    }
                    let stillOpen = try await loop.flatSubmit { bound.value.writeReplayed(frames) }.get()
                    guard stillOpen else { return }
                    cursor = page.through
                }
                loop.execute { bound.value.finishResume(plan.resumed, re: re) }
            } catch {
                loop.execute { bound.value.finishResume(.failed, re: re) }
            }
        }
    }

    /// Writes a page of replayed broadcasts, at the client's pace: whenever what the daemon
    /// holds for the client passes half the outbound bound, the rest waits until the client
    /// has taken it all (the kernel still has the tail to send meanwhile, so the socket stays
    /// busy). A long replay thus never fills the bound, which would cut a client that reads,
    /// only not as fast as the journal is read; one that reads nothing is cut as always (its
    /// backlog does not shrink). The future says, once the page is written, whether the replay
    /// goes on (false once the session is closing).
    private func writeReplayed(_ frames: [ByteBuffer]) -> EventLoopFuture<Bool> {
        let promise = loop.makePromise(of: Bool.self)
        replayWaiter?.promise.succeed(false)
        replayWaiter = (promise, frames[...])
        continueReplay()
        return promise.futureResult
    }

    /// Writes what is left of the page while the backlog allows; completes the page's future
    /// when it is all written, or the session is closing.
    private func continueReplay() {
        guard let waiter = replayWaiter else { return }
        let promise = waiter.promise
        var rest = waiter.rest
        guard resumption.pageRead() == .write, !lifecycle.isClosing, context != nil else {
            replayWaiter = nil
            promise.succeed(false)
            return
        }
        if !rest.isEmpty, queuedBytes > limits.bytes / 2 {
            lookAtTheBacklogLater()
            return
        }
        // What is written here waits, gathered, until the flush: counted as it goes.
        var held = queuedBytes
        while let frame = rest.popFirst() {
            write(frame)
            held += frame.readableBytes
            if !rest.isEmpty, held > limits.bytes / 2 { break }
        }
        flush()
        if rest.isEmpty {
            replayWaiter = nil
            promise.succeed(resumption.pageRead() == .write && !lifecycle.isClosing)
            return
        }
        replayWaiter = (promise, rest)
        lookAtTheBacklogLater()
    }

    private func finishResume(_ outcome: ResumeStateMachine.Outcome, re: CorrelationID?) {
        guard case .answer(let release) = resumption.replayEnded(outcome) else { return }
        switch outcome {
        case .resumed(let from, let to):
            services.hub.metrics.resumed(gap: false)
            write(
                OutboundFrame.op("resumed", correlation: re) { writer in
                    writer.field("from", from)
                    writer.field("to", to)
                },
                asked: true
            )
        case .gap(let current):
            services.hub.metrics.resumed(gap: true)
            write(
                OutboundFrame.op("gap", correlation: re) { writer in
                    writer.field("epoch", services.hub.epoch)
                    writer.field("seq", current)
                },
                asked: true
            )
        case .failed:
            sendError(.unavailable, "The journal cannot be read right now; try again.", re)
        }
        for frame in release { write(frame) }
        drain()
    }

    // MARK: Outbound (called by the hub on this loop)

    /// Queues a broadcast; returns true when the caller should call `flushPending` later.
    func enqueueBroadcast(_ frame: ByteBuffer, seq: UInt64) -> Bool {
        enqueueBroadcast(frame, seq: seq, asked: false)
    }

    private func enqueueBroadcast(_ frame: ByteBuffer, seq: UInt64, asked: Bool) -> Bool {
        guard !lifecycle.isClosing, seq > resumption.liveFloor else { return false }
        if hold(frame, seq: seq) { return false }
        write(frame, asked: asked)
        return markPending()
    }

    /// Queues the session's copy of a broadcast its own write caused (sent whatever its
    /// subscriptions); returns true like `enqueueBroadcast`. It is the write's answer (a
    /// toggle's only one): asked for, like a reply, it waits past the outbound bound while no
    /// new frame is handled. (Counted as a broadcast, a client that pipelined toggles of a
    /// large todo and read every answer was cut as a slow consumer once the kernel took less
    /// than the answers: with a 4 KiB send buffer and a 64 KiB bound, every time.)
    func enqueueOwnBroadcast(_ frame: ByteBuffer, seq: UInt64, typeIndex: Int) -> Bool {
        guard !lifecycle.isClosing else { return false }
        resumption.ownBroadcastSent(seq: seq, typeIndex: typeIndex)
        // Its size is learnt as a reply's is: how many pipelined toggles may join those in
        // flight is then bounded by what their answers take, not only by the read-ahead.
        admission.replyWritten(bytes: frame.readableBytes)
        return enqueueBroadcast(frame, seq: seq, asked: true)
    }

    /// Queues a run of broadcasts written as one buffer (`frames` are the same broadcasts one
    /// by one, for when live output is held); returns true like `enqueueBroadcast`. With
    /// `flushing`, a run that goes out as one buffer is flushed with its write (one pass down the
    /// pipeline, not two) and false is returned.
    func enqueueBroadcastRun(
        _ run: ByteBuffer,
        webSocketRun: ByteBuffer?,
        frames: [BroadcastFrame],
        flushing: Bool
    ) -> Bool {
        guard !lifecycle.isClosing else { return false }
        let floor = resumption.liveFloor
        if isHoldingLiveOutput || frames.first.map({ $0.seq <= floor }) == true {
            // The hold may end part way (too much to hold): the rest goes out live. Broadcasts a
            // resume said the client has are left out.
            var wrote = false
            for frame in frames where frame.seq > floor && !hold(frame.plain, seq: frame.seq) {
                write(frame.plain)
                wrote = true
            }
            return wrote ? markPending() : false
        }
        let whole: ByteBuffer?
        switch runFraming {
        case .lines: whole = run
        case .webSocketFrames where takesWebSocketRuns: whole = webSocketRun
        case .webSocketFrames, .oneByOne: whole = nil
        }
        // A run larger than the outbound bound (broadcasts of many batches, taken in one pass
        // after the loop was held up) goes one frame at a time, as any frames do: handed whole,
        // all of it would wait past the bound where a cut cannot drop it, and a client reading
        // slowly would hold it for as long as it took to read.
        guard let whole, whole.readableBytes <= limits.bytes else {
            for frame in frames { write(frame.plain) }
            return markPending()
        }
        write(whole, frames: frames.count, flushing: flushing)
        guard flushing else { return markPending() }
        flush()
        return false
    }

    /// Whether this session writes the hub's framed WebSocket runs as they are (not a monitor
    /// whose frames are redacted one by one).
    var takesWebSocketRuns: Bool {
        guard case .webSocketFrames = runFraming else { return false }
        return authentication.role != .monitor || services.settings.monitorRedactor == nil
    }

    /// Queues a reply (or a monitor's copy); returns true like `enqueueBroadcast`.
    /// `rest`: the frame's other parts when `frame` is only its head (a large list answer,
    /// whose rows every answer of the same list on this loop shares: `SharedListBody`).
    func enqueueReply(_ frame: ByteBuffer, rest: [ByteBuffer] = []) -> Bool {
        guard !lifecycle.isClosing else { return false }
        var bytes = frame.readableBytes
        for part in rest { bytes += part.readableBytes }
        admission.replyWritten(bytes: bytes)
        if !rest.isEmpty, takesFrameParts {
            // Written part by part: what the connection holds of the rows is the shared buffer
            // (gathered for the socket, queued, or in the channel), never a copy of its own.
            var parts = [frame] + rest
            if case .webSocketFrames = runFraming { parts = WebSocketFraming.textFrame(parts: parts) }
            write(parts[0], asked: true)
            for part in parts.dropFirst() {
                guard encryptsAtFlush, part.readableBytes > SharedListBody.tlsSlice else {
                    write(part, frames: 0, asked: true, continuation: true)
                    continue
                }
                // TLS encrypts what it is handed at its flush, into buffers of the connection's
                // own: handed in slices (of the shared storage), each flushed, only as the
                // channel takes them (a flush is what makes it unwritable), it holds about a
                // high-water mark of ciphertext, not a copy of the rows.
                for slice in SharedListBody.slices(of: part) {
                    write(slice, frames: 0, flushing: true, asked: true, continuation: true)
                }
            }
            return markPending()
        }
        var whole = frame
        if !rest.isEmpty {
            whole = ByteBufferAllocator().buffer(capacity: bytes)
            whole.writeImmutableBuffer(frame)
            for part in rest { whole.writeImmutableBuffer(part) }
        }
        if hold(whole, seq: nil) { return false }
        write(whole, asked: true)
        return markPending()
    }

    /// Whether a frame may go out in parts now: on TCP, TLS and plain uncompressed WebSocket
    /// (a compressed message is compressed whole), not rewritten for a monitor, not held back
    /// (a hold keeps whole frames).
    private var takesFrameParts: Bool {
        switch runFraming {
        case .lines: break
        // Only where the session can write past the transport handler, which would frame
        // each part as a message of its own.
        case .webSocketFrames: if wireContext == nil { return false }
        case .oneByOne: return false
        }
        guard !isHoldingLiveOutput else { return false }
        return authentication.role != .monitor || services.settings.monitorRedactor == nil
    }

    private func markPending() -> Bool {
        if fanOutPending { return false }
        fanOutPending = true
        return true
    }

    /// Flushes what the shard queued during its pass (one write for the whole batch).
    func flushPending() {
        fanOutPending = false
        flush()
    }

    func deliverControl(_ frame: ByteBuffer) {
        guard !lifecycle.isClosing else { return }
        if hold(frame, seq: nil) { return }
        write(frame)
        flush()
    }

    /// Whether live output waits: right after the greeting, or while a resume replays.
    private var isHoldingLiveOutput: Bool { resumption.isHoldingLiveOutput || lifecycle.isHoldingLiveOutput }

    /// While live output waits, holds `frame`; returns true when it was held.
    private func hold(_ frame: ByteBuffer, seq: UInt64?) -> Bool {
        guard isHoldingLiveOutput else { return false }
        let (maxBytes, maxFrames) = limits
        var result = resumption.hold(frame, seq: seq, maxBytes: maxBytes, maxFrames: maxFrames)
        if result == .notHeld {
            result = lifecycle.hold(frame, seq: seq, maxBytes: maxBytes, maxFrames: maxFrames)
        }
        switch result {
        case .notHeld:
            return false
        case .held:
            return true
        case .heldOverBound:
            slowConsumer()
            return true
        case .released(let frames):
            for frame in frames { write(frame) }
            flush()
            return true
        }
    }

    /// Answers a frame of the client's with an error: an answer it asked for, which waits even
    /// past the outbound bound (no new frame is handled while answers back up, so a client that
    /// sends junk and reads slowly is held back, not cut).
    private func sendError(_ code: RelayErrorCode, _ message: String, _ re: CorrelationID?) {
        write(errorFrame(code, message, re), asked: true)
    }

    /// An error frame to send, counted by its code (`errors_total`: every error answered, the
    /// ones a close follows too).
    private func errorFrame(_ code: RelayErrorCode, _ message: String, _ re: CorrelationID?) -> ByteBuffer {
        services.hub.metrics.error(code)
        return OutboundFrame.error(code, message, correlation: re)
    }

    /// Hands `buffer` to the channel, or queues it (see `OutboundQueue`). With `flushing`, a
    /// buffer handed to the channel is flushed with it.
    private func write(
        _ buffer: ByteBuffer,
        frames: Int = 1,
        flushing: Bool = false,
        asked: Bool = false,
        continuation: Bool = false
    ) {
        guard let context, !lifecycle.isClosing else { return }
        var bytes = buffer
        if authentication.role == .monitor, let redactor = services.settings.monitorRedactor {
            // Monitors are few; their frames are rewritten one by one, nobody else's are.
            bytes = redactor.redact(buffer)
        }
        if case .webSocketFrames = runFraming, socketWrites.writesToSocket, !continuation,
            bytes.readableBytesView.first != WebSocketFraming.finalText
        {
            // A reply (or any single frame) framed here, as the hub frames its runs, so that it
            // goes to the socket with them; through the channel the transport handler frames it.
            // (Compressed sessions have no socket: each message is compressed on its own.)
            bytes = WebSocketFraming.textFrames([bytes])
        }
        // The bound as last read (`limits` looks for a reload: not needed to gather).
        var socketWrite = socketWrites.write(bytes, gatheringAtMost: queueLimits.bytes)
        if case .sendGatheredFirst = socketWrite {
            sendGathered(context)
            socketWrite = socketWrites.write(bytes)
        }
        if case .gathered = socketWrite {
            needsFlush = true
            if flushing { flush() }
            return
        }
        let limits = self.limits
        switch outbound.write(
            bytes,
            frames: frames,
            channelWritable: channelWritable,
            channelBacklog: outbound.isEmpty ? 0 : channelBacklog,
            maxBytes: limits.bytes,
            maxFrames: limits.frames,
            asked: asked,
            continuation: continuation
        ) {
        case .write where flushing:
            channelWrite(context, bytes, flush: true, raw: continuation)
            needsFlush = false
            watchForStall()
        case .write:
            channelWrite(context, bytes, raw: continuation)
            needsFlush = true
        case .queued:
            break
        case .overflow:
            slowConsumer()
        }
    }

    private func flush() {
        guard needsFlush, let context else { return }
        needsFlush = false
        if socketWrites.hasGathered {
            sendGathered(context)
        } else {
            context.flush()
        }
        watchForStall()
    }

    /// Hands `buffer` to the channel, behind anything gathered for the socket. On a socket of
    /// our own the write is counted until the channel completes it (`SocketWriteStateMachine`).
    private func channelWrite(
        _ context: ChannelHandlerContext,
        _ buffer: ByteBuffer,
        flush: Bool = false,
        promise: EventLoopPromise<Void>? = nil,
        raw: Bool = false
    ) {
        if socketWrites.hasGathered { sendGathered(context) }
        var promise = promise
        if socketWrites.countsChannelWrites {
            socketWrites.handedToChannel()
            promise = completionTracked(promise)
        }
        if raw {
            // A later part of a frame: past the WebSocket transport, which would frame it.
            writeAsIs(context, buffer, promise: promise)
            if flush { context.flush() }
        } else if flush {
            context.writeAndFlush(wrapOutboundOut(buffer), promise: promise)
        } else {
            context.write(wrapOutboundOut(buffer), promise: promise)
        }
    }

    /// From here on the channel writes everything: the input ended, or the channel closed.
    ///
    /// NIO closes a channel's socket on this loop, and tells the pipeline right after (the
    /// callbacks of writes it fails meanwhile never write): the decoder's `LeaveSocket`, ahead
    /// of the last frames, or, when the decoder is busy with a read, `channelInactive`. So the
    /// session never sends to a descriptor that is closed, or reused by another connection.
    private func leaveSocket(_ context: ChannelHandlerContext) {
        for buffer in socketWrites.close() { writeAsIs(context, buffer, promise: nil) }
    }

    /// Writes bytes that were meant for the socket as they are: on WebSocket past the transport
    /// handler (`wireContext`).
    private func writeAsIs(_ context: ChannelHandlerContext, _ buffer: ByteBuffer, promise: EventLoopPromise<Void>?) {
        if let wireContext {
            wireContext.write(NIOAny(buffer), promise: promise)
        } else {
            context.write(wrapOutboundOut(buffer), promise: promise)
        }
    }

    /// `promise` (or a new one) with the socket's bookkeeping attached to its completion.
    private func completionTracked(_ promise: EventLoopPromise<Void>?) -> EventLoopPromise<Void> {
        let tracked = promise ?? loop.makePromise(of: Void.self)
        let bound = NIOLoopBound(self, eventLoop: loop)
        tracked.futureResult.whenComplete { _ in
            let session = bound.value
            session.socketWrites.channelWriteCompleted(queueEmpty: session.outbound.isEmpty)
        }
        return tracked
    }

    /// Sends what was gathered for the socket with one system call; the kernel's leftovers go
    /// to the channel, which then writes everything until it has caught up.
    private func sendGathered(_ context: ChannelHandlerContext) {
        guard case .send(let buffers) = socketWrites.flush(), let socket else { return }
        let written = sendToSocket(buffers, descriptor: socket)
        guard case .handToChannel(let rest) = socketWrites.sent(written, of: buffers) else { return }
        for buffer in rest { writeAsIs(context, buffer, promise: completionTracked(nil)) }
        context.flush()
    }

    /// Whether a look at a backlog over the bound is scheduled, and how large it was then.
    private enum StallWatch {
        case idle
        case watching(unsentBefore: Int, acknowledgedBefore: UInt64)
    }

    /// A single write may leave more unsent than `max_queue_bytes` (a batch written while the
    /// channel was writable): then, a little later, a client that took nothing of it in the
    /// meantime is cut; one that is reading is looked at again. Taking is seen in either of
    /// two ways: less is unsent here, or the kernel has had more acknowledged by the client
    /// (`TCP_INFO`). The kernel takes more from the daemon only once a good part of its send
    /// buffer is free (a few MiB when it has grown), so a client reading a large answer at
    /// 1 MB/s could go a second without the first changing, and was cut.
    private func watchForStall() {
        guard case .idle = stallWatch, !lifecycle.isClosing else { return }
        let limit = limits.bytes
        // The usual case, answered without asking the channel for its backlog: nothing waits
        // here and the channel is writable, so less than the bound is unsent.
        if outbound.isEmpty, limit >= highWaterMark, channelWritable { return }
        guard queuedBytes > limit else { return }
        stallWatch = .watching(unsentBefore: queuedBytes, acknowledgedBefore: acknowledgedBytes(context?.channel))
        let bound = NIOLoopBound(self, eventLoop: loop)
        loop.scheduleTask(in: .milliseconds(Int64(configuration.slowConsumerCheckMs))) { bound.value.checkStall() }
    }

    private func checkStall() {
        guard case .watching(let before, let acknowledgedBefore) = stallWatch else { return }
        stallWatch = .idle
        guard !lifecycle.isClosing, let context else { return }
        let unsent = queuedBytes
        guard unsent > limits.bytes else { return }
        if unsent >= before, acknowledgedBytes(context.channel) <= acknowledgedBefore {
            slowConsumer()
        } else {
            watchForStall()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        channelWritable = context.channel.isWritable
        if channelWritable, !lifecycle.isClosing {
            // Hand the channel what waited, as much as it takes before it is full again (a
            // write that fills it calls this again, which clears `channelWritable`).
            if !outbound.isEmpty {
                handOverQueued(context) { self.channelWritable }
                needsFlush = true
            }
            flush()
        }
        context.fireChannelWritabilityChanged()
    }

    /// Bytes the channel holds that the kernel has not taken yet.
    private var channelBacklog: Int {
        guard let context else { return 0 }
        return (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
    }

    /// Bytes written to this connection and not yet taken by the kernel.
    var queuedBytes: Int { channelBacklog + outbound.bytes }

    /// Moves the session to closing for `reason`; `.none` when it already was.
    private func closeSession(_ reason: SessionStateMachine.CloseReason) -> SessionStateMachine.CloseAction {
        let action = lifecycle.close(reason)
        if action != .none {
            resumption.sessionClosing()
            continueReplay()  // ends a replay waiting for the client
        }
        return action
    }

    /// Over the outbound bound: drop what still waits, send the notice right behind the last
    /// complete frame the channel holds, then close once it is out (or after a grace period).
    /// Others are never held up by this client.
    private func slowConsumer() {
        guard let context, case .cutSlowConsumer = closeSession(.slowConsumer) else { return }
        // The rest of a frame begun goes first: the client receives only whole frames.
        finishFrameBegun(context)
        let dropped = outbound.dropAll()
        logger.info("closing slow consumer", metadata: ["frames.dropped": "\(dropped)"])
        services.hub.metrics.slowConsumer()
        let frame = errorFrame(
            .slowConsumer,
            "You are not reading fast enough; closing. Reconnect and resume to catch up.",
            nil
        )
        let lastWritten = loop.makePromise(of: Void.self)
        switch runFraming {
        case .lines:
            channelWrite(context, frame, flush: true, promise: lastWritten)
        case .webSocketFrames, .oneByOne:
            // The notice, then the close frame (1001), both behind what the channel holds.
            channelWrite(context, frame)
            context.triggerUserOutboundEvent(SendWebSocketClose(code: .goingAway), promise: lastWritten)
        }
        closeGrace.started(drainProgress(context))
        let channel = context.channel
        let bound = NIOLoopBound(self, eventLoop: loop)
        lastWritten.futureResult.whenComplete { _ in
            let session = bound.value
            guard let context = session.context else { return }
            // The output is shut, not the connection closed: a close with the client's requests
            // still unread would be a reset, which loses what the client has not read yet.
            if session.closeGrace.lastFramesWritten(session.drainProgress(context)) {
                channel.close(mode: .output, promise: nil)
            }
        }
        lookAtTheDrainLater()
        // Input is still read meanwhile, until the client closes its side: dropped unparsed at
        // the front of the pipeline, a few reads a second (`CutInputDrain`).
        try? context.pipeline.syncOperations.addHandler(CutInputDrain(), position: .first)
        if case .read = inbound.readsResumedForClose() { context.read() }
    }

    /// After a grace period: a cut client that took nothing since the last look is closed;
    /// one still reading keeps its connection until its last frames are out
    /// (`CloseGraceStateMachine`).
    private func lookAtTheDrainLater() {
        let bound = NIOLoopBound(self, eventLoop: loop)
        let grace = TimeAmount.milliseconds(Int64(configuration.slowConsumerGraceMs))
        loop.scheduleTask(in: grace) {
            let session = bound.value
            guard let context = session.context else { return session.closeGrace.connectionClosed() }
            switch session.closeGrace.check(session.drainProgress(context)) {
            case .checkAgain: session.lookAtTheDrainLater()
            case .close: context.channel.close(promise: nil)
            case .none: break
            }
        }
    }

    /// What the daemon still holds for the client, and what the client's kernel acknowledged.
    private func drainProgress(_ context: ChannelHandlerContext) -> CloseGraceStateMachine.Progress {
        CloseGraceStateMachine.Progress(
            unsentBytes: queuedBytes,
            acknowledgedBytes: acknowledgedBytes(context.channel)
        )
    }

    /// The socket's `tcpi_bytes_acked` (Linux 4.2 and later; 0 where unknown). Asked on the
    /// channel's own loop, where the answer comes at once.
    private func acknowledgedBytes(_ channel: (any Channel)?) -> UInt64 {
        #if os(Linux)
        guard let provider = channel as? any SocketOptionProvider else { return 0 }
        let answer: EventLoopFuture<KernelTCPInfo> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(IPPROTO_TCP),
            name: SocketOptionName(TCP_INFO)
        )
        let bound = NIOLoopBound(self, eventLoop: loop)
        answer.whenSuccess { bound.value.lastAcknowledgedBytes = $0.bytesAcknowledged }
        return lastAcknowledgedBytes
        #else
        return 0
        #endif
    }

    /// Sends a last frame behind everything queued, then closes.
    private func closeAfter(_ frame: ByteBuffer) {
        guard let context, case .sendLastFrameAndClose = closeSession(.afterLastFrame) else { return }
        handOverQueued(context)
        let channel = context.channel
        let promise = loop.makePromise(of: Void.self)
        channelWrite(context, frame, flush: true, promise: promise)
        promise.futureResult.whenComplete { _ in channel.close(promise: nil) }
    }

    /// A write of this session may or may not have been saved (storage lost the commit's
    /// answer and could not look it up): no answer would be true, so the connection closes
    /// behind what it was sent, with `draining` as its last frame. The client reconnects and
    /// resumes: if the write was saved, its broadcast is replayed; a retry with its `mid` is
    /// answered as a duplicate.
    func closeOutcomeUnknown() {
        logger.warning("closing the connection: storage cannot tell whether a write of its was saved")
        closeAfter(
            OutboundFrame.op("draining", correlation: nil) { writer in
                writer.field("reconnect_after_ms", 1000)
                writer.field(
                    "reason",
                    "Storage cannot tell yet whether a write of this connection was saved. Reconnect and resume: if it was, its broadcast is replayed; a retry with the same mid is safe."
                )
            }
        )
    }

    /// Sends `draining` (called at shutdown).
    func sendDraining(reconnectAfterMs: Int) {
        drainingSent = true
        // Goes out at once, ahead of anything held back, and without ending the start hold: a
        // client whose `resume` (its first frame) is on its way gets its replay before the
        // broadcasts held for it, as always. Released here, they went out first, and a client
        // that reconnects on `draining` from the last seq it saw skipped the replay's range.
        // Held broadcasts the connection's close drops, the client's resume brings again.
        // Never a reason to cut the client: it waits behind what the client asked for, as an
        // answer does (a large list goes out in parts that wait in the queue, over the bound).
        write(
            OutboundFrame.op("draining", correlation: nil) { $0.field("reconnect_after_ms", reconnectAfterMs) },
            asked: true
        )
        flush()
    }

    /// Whether the session has nothing left to do (for graceful shutdown).
    var isIdle: Bool { !resumption.isRunning && inbound.isIdle }
}

/// Whether a frame's bytes are UTF-8. Plain ASCII, the usual case, needs no decoding: it is
/// recognised eight bytes at a time (no byte with its high bit set).
func isValidUTF8(_ bytes: [UInt8]) -> Bool { isValidUTF8(bytes[...]) }

/// The same for part of an array (a piece of a message checked as it passes).
func isValidUTF8(_ bytes: ArraySlice<UInt8>) -> Bool {
    bytes.withUnsafeBytes(isASCII) || String(validating: bytes, as: UTF8.self) != nil
}

/// The same for a buffer's readable bytes (a WebSocket message's text).
func isValidUTF8(_ buffer: ByteBuffer) -> Bool {
    buffer.withUnsafeReadableBytes(isASCII) || String(validating: buffer.readableBytesView, as: UTF8.self) != nil
}

/// Whether no byte has its high bit set, looked at eight bytes at a time.
private func isASCII(_ raw: UnsafeRawBufferPointer) -> Bool {
    var index = 0
    while index + 8 <= raw.count {
        if raw.loadUnaligned(fromByteOffset: index, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 { return false }
        index += 8
    }
    while index < raw.count {
        if raw[index] >= 0x80 { return false }
        index += 1
    }
    return true
}

/// Sends `buffers` in order with one system call (`send`, or `sendmsg` for several) and
/// returns how many bytes the kernel took: 0 when it took none (a full socket) or the call
/// failed, in which case the channel writes them and meets the error itself.
func sendToSocket(_ buffers: [ByteBuffer], descriptor: CInt) -> Int {
    while true {
        let result: Int
        if buffers.count == 1 {
            result = buffers[0].withUnsafeReadableBytes { bytes in
                Glibc.send(descriptor, bytes.baseAddress, bytes.count, CInt(MSG_NOSIGNAL))
            }
        } else {
            let count = min(buffers.count, Int(UIO_MAXIOV))
            result = withUnsafeTemporaryAllocation(of: iovec.self, capacity: count) { vectors in
                for index in 0..<count {
                    // `buffers` keeps every storage alive (and unchanged) until the call returns.
                    let (base, length) = buffers[index].withUnsafeReadableBytesWithStorageManagement { bytes, _ in
                        (bytes.baseAddress, bytes.count)
                    }
                    vectors[index] = iovec(iov_base: UnsafeMutableRawPointer(mutating: base), iov_len: length)
                }
                var message = msghdr()
                message.msg_iov = vectors.baseAddress
                message.msg_iovlen = count
                return sendmsg(descriptor, &message, CInt(MSG_NOSIGNAL))
            }
        }
        if result < 0, errno == EINTR { continue }
        return max(0, result)
    }
}
