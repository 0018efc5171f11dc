import EventStream
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOWebSocket
import TodoApp

/// A client of todostreamd: the seed's `eventsSignal` (`events`) and `eventsObserver`
/// (`send`, `request`) over TCP, TLS or WebSocket, which reconnects by itself (jittered
/// exponential backoff, or when the daemon's `draining` says), resumes the stream where it
/// stopped, and keeps writes made while disconnected in a bounded outbox until they are
/// answered, each with a mutation id so that none is applied twice.
///
/// Call `run()` in a task of its own for as long as the client is used; `close()` (or
/// cancelling that task) ends it. `events` has one reader.
public actor TodostreamClient {
    /// Everything the daemon sends this client, as typed events, and the connection's
    /// changes. Bounded by `eventBufferCapacity`: a reader that falls further behind gets
    /// `.reset` in place of what it missed.
    public nonisolated let events: AsyncStream<ClientEvent>

    private let configuration: ClientConfiguration
    private let connector: Connector
    private let codec = TodoWireCodec()
    private var logger: Logger
    private let eventSink: AsyncStream<ClientEvent>.Continuation
    private var eventsOverflowed = false
    private var machine: ConnectionStateMachine<Event>
    private var outbox: Outbox
    private var answerOrder: AnswerOrder
    private var mutationIDs = MutationIDs()
    private var frameCounter: UInt64 = 0
    private var pending: [String: Pending] = [:]
    private var channel: (any Channel)?
    /// The connection attempt under way, and the wait before the next one: `close()` ends them.
    private var connectAttempt: ConnectAttempt?
    private var backoffWait: Task<Void, Never>?
    private var finished = false
    /// Why the client stopped, when the daemon stopped it (a refused token).
    private var stopReason: ClientError?

    /// Why `run()` returned, when the daemon ended it (a refused token); nil otherwise.
    public var stoppedBecause: ClientError? { stopReason }
    /// Why the last connection attempt failed, in a person's words (nil once one succeeded):
    /// said with a request that times out before any connection worked.
    private var connectionProblem: String?

    private struct Pending {
        let expected: Event.Kind
        let continuation: CheckedContinuation<Event, any Error>?
        let timeout: Task<Void, Never>?

        /// Whether the request is a write (its answer is a todo as the write left it).
        var isWrite: Bool { expected == .responseTodoViewModel || expected == .responseUpdateDetailViewModel }
    }

    public init(
        _ configuration: ClientConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws(ClientError) {
        self.configuration = configuration
        self.connector = try Connector(configuration: configuration, group: group)
        self.logger = configuration.logger
        self.logger[metadataKey: "endpoint"] = "\(configuration.endpoint)"
        self.machine = ConnectionStateMachine(
            backoff: configuration.backoff,
            // On every transport: a token given with a WebSocket upgrade that the daemon does not
            // take leaves the session unauthenticated without a word (protocol §3); `auth` is
            // answered, granted again when the upgrade's token was taken.
            authenticates: configuration.token != nil,
            // Broadcasts held until a resume catches up are events on their way to `events`.
            holdCapacity: configuration.eventBufferCapacity
        )
        self.outbox = Outbox(capacity: configuration.outboxCapacity)
        // The outbox's requests, and `auth` and `resume`.
        self.answerOrder = AnswerOrder(capacity: max(1, configuration.outboxCapacity) + 2)
        let (stream, continuation) = AsyncStream.makeStream(
            of: ClientEvent.self,
            bufferingPolicy: .bufferingOldest(max(1, configuration.eventBufferCapacity))
        )
        self.events = stream
        self.eventSink = continuation
    }

    /// A client for `url` (`tcp://…`, `tls://…`, `ws://…/events`, `wss://…/events`).
    public init(url: String, token: String? = nil) throws(ClientError) {
        try self.init(ClientConfiguration(endpoint: try ClientEndpoint(url: url), token: token))
    }

    // MARK: - Running

    /// Connects, and reconnects after every loss, until `close()` or until the calling task
    /// is cancelled. Then fails what is still waiting with `closed` and ends `events`.
    public func run() async {
        var action = machine.start()
        while !Task.isCancelled {
            switch action {
            case .connect:
                await connectOnce()
                if machine.isClosed { break }
                action = machine.disconnected(random: Double.random(in: 0..<1))
                continue
            case .wait(let delay):
                logger.debug("reconnecting", metadata: ["delay.ms": "\(delay.milliseconds)"])
                // A wait that `close()` (or cancelling this task) ends at once.
                let wait = Task { _ = try? await Task.sleep(for: delay) }
                backoffWait = wait
                await withTaskCancellationHandler {
                    await wait.value
                } onCancel: {
                    wait.cancel()
                }
                backoffWait = nil
                action = machine.waited()
                continue
            default:
                break
            }
            break
        }
        finish()
    }

    /// Stops the client: the connection (or the attempt at one, or the wait before the next)
    /// is ended, requests still waiting fail with `closed`, and `run()` returns.
    public func close() {
        _ = machine.close()
        channel?.close(promise: nil)
        connectAttempt?.cancel()
        backoffWait?.cancel()
        finish()
    }

    private func connectOnce() async {
        let connection: Connector.Connection
        let attempt = ConnectAttempt()
        connectAttempt = attempt
        defer { connectAttempt = nil }
        do {
            connection = try await withTaskCancellationHandler {
                try await connector.connect(attempt)
            } onCancel: {
                attempt.cancel()
            }
        } catch {
            logger.debug("connect failed", metadata: ["error": "\(error)"])
            failedToConnect(error)
            return
        }
        guard !machine.isClosed else {
            // Closed meanwhile: close it the way NIOAsyncChannel requires (its writer finished).
            try? await connection.executeThenClose { _, _ in }
            return
        }
        _ = machine.connected()
        channel = connection.channel
        let raw = connection.channel
        do {
            try await withTaskCancellationHandler {
                try await connection.executeThenClose { inbound, _ in
                    for try await frame in inbound {
                        switch frame {
                        case .frame(let buffer):
                            self.received(Array(buffer.readableBytesView))
                        case .tooLarge(let head, let length):
                            self.receivedTooLarge(FrameHead(head.readableBytesView), length: length)
                        }
                    }
                }
            } onCancel: {
                raw.close(promise: nil)
            }
        } catch {
            logger.debug("connection lost", metadata: ["error": "\(error)"])
            if let error = error as? NIOWebSocketError, error == .invalidFrameLength { lostToMessageTooLarge() }
            if !machine.isReady { failedToConnect(error) }
        }
        channel = nil
        outbox.connectionLost()
        answerOrder.connectionLost()
        // Only a connection the caller was told about is reported lost.
        if machine.isReady, !finished { emit(.disconnected) }
    }

    private func finish() {
        guard !finished else { return }
        finished = true
        _ = machine.close()
        let waiting = pending
        pending.removeAll()
        _ = outbox.removeAll()
        for (_, entry) in waiting {
            entry.timeout?.cancel()
            entry.continuation?.resume(throwing: ClientError(.closed, "The client was closed."))
        }
        eventSink.finish()
    }

    // MARK: - Sending

    /// Publishes a view-layer request without waiting for its answer, and returns its id.
    /// The answer still arrives on `events`: the response event, or `.requestFailed` with
    /// this id when the daemon refuses the frame. Writes go through the outbox like
    /// `request`'s.
    @discardableResult
    public func send(_ event: Event) throws(ClientError) -> String {
        try enqueue(event).id
    }

    /// Publishes a view-layer request and returns its answer: the response event (which may
    /// carry an app error, e.g. `not_found`). A write retried after a reconnect that the
    /// daemon had applied already is answered with its original outcome.
    ///
    /// Cancelling the calling task ends the wait at once with `CancellationError`. A request
    /// not sent yet is withdrawn: nothing is applied. A write already sent may be applied
    /// (it may be on its way, or applied with its answer lost with the connection): it stays in
    /// the outbox as if made with `send`, sent again with its `mid` after a reconnect until
    /// answered, so that it is applied once, and its answer arrives on `events`. A read
    /// already sent is dropped (its answer still arrives on `events`).
    public func request(_ event: Event) async throws -> Event {
        try Task.checkCancellation()
        let (id, expected) = try enqueue(event)
        let timeoutDuration = configuration.requestTimeout
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let timeout = Task { [weak self] in
                    try? await Task.sleep(for: timeoutDuration)
                    guard !Task.isCancelled else { return }
                    await self?.expire(id)
                }
                pending[id] = Pending(expected: expected, continuation: continuation, timeout: timeout)
            }
        } onCancel: {
            // Run on the actor after this task's job, which stores the continuation first.
            Task { await self.cancelled(id) }
        }
    }

    /// The caller waiting for request `id` was cancelled: it stops waiting.
    private func cancelled(_ id: String) {
        guard let entry = pending[id], let continuation = entry.continuation else { return }
        entry.timeout?.cancel()
        continuation.resume(throwing: CancellationError())
        if entry.isWrite, outbox.entry(id: id)?.everSent == true {
            pending[id] = Pending(expected: entry.expected, continuation: nil, timeout: nil)
        } else {
            pending[id] = nil
            outbox.remove(id: id)
        }
    }

    private func enqueue(_ event: Event) throws(ClientError) -> (id: String, expected: Event.Kind) {
        guard !finished else { throw stopReason ?? ClientError(.closed, "The client was closed.") }
        guard let expected = Self.answerKind(of: event) else {
            throw ClientError(.rejected, "\(event.name) cannot be published by a view.", serverCode: "not_permitted")
        }
        let id = "c\(frameCounter + 1)"
        let mid = Self.isWrite(event) ? mutationIDs.next() : nil
        let frame = OutgoingFrame.request(event, id: id, mid: mid)
        guard frame.count <= configuration.maxRequestBytes else {
            // The greeting does not tell the daemon's limit: this is the one configured here.
            throw ClientError(
                .requestTooLarge,
                "The request is \(frame.count) bytes, over the frame limit this client assumes for the "
                    + "daemon (\(configuration.maxRequestBytes) bytes; the daemon's default limits.max_frame_bytes "
                    + "is 65536); nothing was sent."
            )
        }
        frameCounter += 1
        switch outbox.enqueue(id: id, mid: mid, frame: frame, connectionReady: machine.isReady && channel != nil) {
        case .full:
            throw ClientError(
                .outboxFull,
                "\(outbox.capacity) requests are waiting for an answer or a connection already; try again later."
            )
        case .send(let bytes):
            write(bytes, id: id)
        case .queued:
            break
        }
        if pending[id] == nil { pending[id] = Pending(expected: expected, continuation: nil, timeout: nil) }
        return (id, expected)
    }

    private func expire(_ id: String) {
        let queued = outbox.remove(id: id)
        guard let entry = pending.removeValue(forKey: id) else { return }
        let write = entry.isWrite
        let reason = machine.isReady ? nil : connectionProblem
        let outcome: String
        if !write {
            outcome = "."
        } else if queued?.everSent == false {
            outcome = "; it was never sent, so nothing was applied."
        } else {
            outcome = "; the write may have been applied."
        }
        let message =
            "No answer within \(configuration.requestTimeout)"
            + (reason.map { "; the last connection attempt failed: \($0)" } ?? " (is the daemon reachable?)")
            + outcome
        entry.continuation?.resume(throwing: ClientError(.timeout, message))
    }

    private func failedToConnect(_ error: any Error) {
        let problem = Self.problem(error)
        connectionProblem = problem
        if !machine.isClosed, !finished { emit(.unreachable(reason: problem)) }
    }

    /// A failed connection attempt in a person's words.
    static func problem(_ error: any Error) -> String {
        let text = "\(error)"
        if text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("certificate verify failed") {
            return "the daemon's certificate is not trusted (see --ca-file)"
        }
        if text.contains("WRONG_VERSION_NUMBER") || text.contains("wrong version number") {
            return "the daemon does not speak TLS there"
        }
        if error is Connector.UpgradeRefused { return "the daemon refused the WebSocket upgrade (its path is /events)" }
        if text.contains("invalid constant string") || text.contains("HTTPParserError") {
            return "no HTTP there (WebSocket is on the daemon's HTTP listener, not its NDJSON port)"
        }
        if text.contains("Inappropriate operation for state") || text.contains("unsupportedOperation") {
            return "no plain HTTP there (a TLS listener? use wss://)"
        }
        if let connection = error as? NIOConnectionError, let first = connection.connectionErrors.first {
            return problem(first.error)
        }
        if let io = error as? IOError { return String(cString: strerror(io.errnoCode)).lowercased() }
        if let address = error as? SocketAddressError, case .unknown(let host, _) = address {
            return "cannot resolve the host name \(host)"
        }
        return TLSFailure.describe(text, peer: "the daemon")
    }

    /// Sends the frame whose `id` is `id`; its answers are expected in the order sent.
    private func write(_ bytes: [UInt8], id: String) {
        guard let channel else { return }
        answerOrder.sent(id)
        channel.writeAndFlush(ByteBuffer(bytes: bytes), promise: nil)
    }

    // MARK: - Receiving

    private func received(_ bytes: [UInt8]) {
        guard let frame = IncomingFrame.decode(bytes) else {
            logger.debug("unreadable frame from the daemon")
            return
        }
        if let re = frame.re { answerOrder.answered(re) }
        if let op = frame.op {
            control(op, frame)
            return
        }
        guard let type = frame.type else { return }
        let event: Event
        do {
            event = try codec.decodeResponse(named: type, frame: bytes)
        } catch {
            logger.debug("undecodable event", metadata: ["event.type": "\(type)", "error": "\(error.message)"])
            return
        }
        if let re = frame.re, let entry = pending[re], entry.expected == event.kind {
            pending[re] = nil
            outbox.remove(id: re)
            entry.timeout?.cancel()
            entry.continuation?.resume(returning: event)
        }
        if let seq = frame.seq {
            // The machine passes each seq on once, in order (it may hold it for a while).
            execute(machine.broadcast(seq: seq, payload: event))
        } else if frame.duplicate != true {
            // A duplicate's payload is an old state, already delivered when it was first applied.
            emit(.event(event, seq: nil))
        }
    }

    /// A frame over `maxFrameBytes` was skipped unread (NDJSON: the daemon's lines stay
    /// delimited, the connection goes on). What its head tells: the request it answers fails,
    /// a broadcast is given up like a gap; one that cannot be told is taken for a broadcast.
    private func receivedTooLarge(_ head: FrameHead, length: Int) {
        logger.warning(
            "a frame over maxFrameBytes was skipped",
            metadata: ["frame.bytes": "\(length)", "max_frame_bytes": "\(configuration.maxFrameBytes)"]
        )
        if let re = head.re {
            answerOrder.answered(re)
            fail(
                re,
                ClientError(
                    .responseTooLarge,
                    "The answer is \(length) bytes, over maxFrameBytes (\(configuration.maxFrameBytes) bytes); it "
                        + "was not read."
                )
            )
        }
        guard head.seq != nil || head.re == nil else { return }
        emit(.frameTooLarge(seq: head.seq))
        execute(machine.unreadable(seq: head.seq))
    }

    /// Over WebSocket a message over `maxFrameBytes` is not read at all (NIO's frame decoder
    /// holds a frame whole): the connection closed (1009) without telling what it was, and
    /// it is told by order. The daemon answers in order, so a reply answers the oldest
    /// request not answered on the connection: that one fails (it would fail again on every
    /// connection). With none, it was a broadcast: the next connection starts a new stream,
    /// instead of resuming into the same broadcast again. (Broadcasts are one todo each, far
    /// under the default limit; the list is the answer that grows.)
    private func lostToMessageTooLarge() {
        logger.warning(
            "a WebSocket message over maxFrameBytes closed the connection",
            metadata: ["max_frame_bytes": "\(configuration.maxFrameBytes)"]
        )
        if let id = answerOrder.answeredWithoutID(), pending[id] != nil {
            fail(
                id,
                ClientError(
                    .responseTooLarge,
                    "A message from the daemon over maxFrameBytes (\(configuration.maxFrameBytes) bytes) closed the "
                        + "connection; this request was the oldest waiting for its answer on it."
                )
            )
            return
        }
        emit(.frameTooLarge(seq: nil))
        machine.forgetPosition()
    }

    private func control(_ op: String, _ frame: IncomingFrame) {
        switch op {
        case "hello":
            guard let epoch = frame.epoch, let seq = frame.seq else { return }
            execute(machine.hello(epoch: epoch, seq: seq))
        case "authenticated":
            execute(machine.authenticated())
        case "resumed":
            execute(machine.resumed())
        case "gap":
            guard let epoch = frame.epoch, let seq = frame.seq else { return }
            execute(machine.gap(epoch: epoch, seq: seq, answersResume: frame.re == "resume"))
        case "draining":
            if let milliseconds = frame.reconnectAfterMilliseconds {
                machine.draining(reconnectAfterMilliseconds: milliseconds)
            }
        case "error":
            rejected(frame)
        default:
            break
        }
    }

    private func rejected(_ frame: IncomingFrame) {
        let code = frame.error?.code ?? "unknown"
        let message = frame.error?.message ?? "The daemon refused the frame."
        switch frame.re {
        case "auth":
            logger.warning("the daemon refused the token")
            stop(because: ClientError(.unauthorized, message, serverCode: code))
        case "resume" where code == "unauthorized":
            // The daemon wants a token this client does not have (it would want it on every
            // connection): reconnecting cannot help.
            logger.warning("the daemon requires a token")
            stop(because: ClientError(.unauthorized, "The daemon requires a token.", serverCode: code))
        case "resume":
            // The journal could not be read: try again on a new connection.
            channel?.close(promise: nil)
        case .some(let re):
            fail(re, ClientError(.rejected, message, serverCode: code))
        case .none where code == "frame_too_large":
            // Dropped unread, so without `re`: it answers the oldest frame not yet answered.
            guard let re = answerOrder.answeredWithoutID() else {
                logger.debug("daemon error", metadata: ["error.code": "\(code)"])
                return
            }
            fail(
                re,
                ClientError(
                    .rejected,
                    "The request is over the daemon's frame limit (limits.max_frame_bytes): \(message) "
                        + "Nothing was applied.",
                    serverCode: code
                )
            )
        case .none:
            logger.debug("daemon error", metadata: ["error.code": "\(code)"])
        }
    }

    /// The request `re` is done: it fails with `error`, which `events` says too (a request
    /// made with `send` has no other way to tell it).
    private func fail(_ re: String, _ error: ClientError) {
        outbox.remove(id: re)
        guard let entry = pending.removeValue(forKey: re) else { return }
        entry.timeout?.cancel()
        entry.continuation?.resume(throwing: error)
        emit(.requestFailed(id: re, error: error))
    }

    /// The daemon refused this client (its token): everything waiting fails with `error`, and
    /// the client stops.
    private func stop(because error: ClientError) {
        stopReason = error
        let waiting = pending
        pending.removeAll()
        _ = outbox.removeAll()
        for (_, entry) in waiting {
            entry.timeout?.cancel()
            entry.continuation?.resume(throwing: error)
        }
        close()
    }

    private func execute(_ action: ConnectionStateMachine<Event>.Action) {
        switch action {
        case .sendAuth:
            if let token = configuration.token { write(OutgoingFrame.auth(token: token), id: "auth") }
        case .sendResume(let epoch, let after):
            write(OutgoingFrame.resume(epoch: epoch, after: after), id: "resume")
        case .ready(let resumed, let reset, let broadcasts):
            deliver(reset: reset, broadcasts)
            emit(.connected(resumed: resumed))
            for entry in outbox.connectionReady() { write(entry.frame, id: entry.id) }
        case .deliver(let reset, let broadcasts):
            deliver(reset: reset, broadcasts)
        case .none, .connect, .wait, .stop:
            break
        }
    }

    private func deliver(reset: UInt64?, _ broadcasts: [ConnectionStateMachine<Event>.Broadcast]) {
        if let reset { emit(.reset(seq: reset)) }
        for broadcast in broadcasts { emit(.event(broadcast.payload, seq: broadcast.seq)) }
    }

    private func emit(_ event: ClientEvent) {
        if eventsOverflowed {
            guard case .enqueued = eventSink.yield(.reset(seq: machine.lastSeq ?? 0)) else { return }
            eventsOverflowed = false
        }
        if case .dropped = eventSink.yield(event) { eventsOverflowed = true }
    }

    // MARK: - What the stream says about requests

    /// The response that answers a view-layer request; nil for events a view cannot publish.
    static func answerKind(of event: Event) -> Event.Kind? {
        switch event {
        case .requestTodoViewModels: return .responseTodoViewModels
        case .requestToggleCompleteTodoViewModel, .requestDeleteTodoViewModel: return .responseTodoViewModel
        case .requestNewTodoDetailViewModel, .requestTodoDetailViewModel: return .responseTodoDetailViewModel
        case .requestUpdateDetailViewModel: return .responseUpdateDetailViewModel
        default: return nil
        }
    }

    static func isWrite(_ event: Event) -> Bool {
        switch event {
        case .requestToggleCompleteTodoViewModel, .requestDeleteTodoViewModel, .requestUpdateDetailViewModel:
            return true
        default: return false
        }
    }

    /// The client's mutation-id prefix (random, made once per client).
    public var mutationIDPrefix: String { mutationIDs.prefix }

    /// Requests accepted and not yet answered.
    public var outboxCount: Int { outbox.count }
}
