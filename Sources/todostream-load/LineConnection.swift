import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The settings a connection needs besides its mode.
struct ConnectionSettings: Sendable {
    var payloadBytes = 400
    /// The fan-out subject or channel (peers).
    var subject = "bench"
    /// todostreamd: the todos this connection creates and then sends its requests about
    /// (publisher, requester), one after another.
    var todoIDs: [String] = []
    /// Requesters: whether they stay subscribed to every broadcast (todostreamd) — by default
    /// they unsubscribe and receive only their own copies.
    var requestersSubscribed = false
    /// todostreamd: what the publisher or requester sends.
    var publish = PublishKind.toggle
    /// The client's number in its scenario (staggers the mixed schedule; names redis keys).
    var client = 0
}

/// One client connection of the load tool: splits what it reads into lines (NDJSON, and the
/// CRLF-terminated lines of the NATS and RESP protocols) and hands each to `handleLine`.
/// Subclasses speak one server's protocol. Everything here runs on the channel's event loop.
class LineConnection: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// The longest line kept (a `ResponseTodoViewModels` reply lists every todo).
    private static let maxStashBytes = 16 << 20

    let mode: ConnectionMode
    let run: RunState
    let settings: ConnectionSettings
    private(set) var context: ChannelHandlerContext?
    private(set) var stats = LoopStats()
    private var stash: ByteBuffer?
    private let readyPromise: EventLoopPromise<Void>
    private(set) var isReady = false
    private var needsFlush = false
    private var windowStart: UInt64 = .max
    private var windowEnd: UInt64 = .max
    private var lastSeq: UInt64 = 0

    // Request path.
    private var nextRequestID = 0
    private var requestSentAt: UInt64 = 0
    private var requestOutstanding = false

    // Fan-out publishing.
    private var publishing = false
    private var published = 0
    private var acked = 0
    private var publishStart: UInt64 = 0
    private var rate: Double = 0
    private var window = 1
    private var subscribers = 1
    private var maxPipeline = 0
    private var publishLimit = 0
    private var ticker: RepeatedTask?

    init(mode: ConnectionMode, run: RunState, settings: ConnectionSettings, ready: EventLoopPromise<Void>) {
        self.mode = mode
        self.run = run
        self.settings = settings
        self.readyPromise = ready
    }

    // MARK: Hooks for subclasses

    /// The connection is up: send whatever the protocol sends first.
    func didConnect() {}

    /// One line without its terminator.
    func handleLine(_ line: UnsafeRawBufferPointer, now: UInt64) {}

    /// Write (without flushing) fan-out message `id`, sent at `time`.
    func writePublish(id: Int, time: UInt64) {}

    /// Write (and flush) request `id` of this requester, sent at `time`.
    func writeRequest(id: Int, time: UInt64) {}

    /// Publisher: requests sent and not yet answered (bounded by `maxPipeline`).
    func requestsInFlight() -> Int { published - acked }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        stats = run.stats.stats(for: context.eventLoop)
    }

    func channelActive(context: ChannelHandlerContext) {
        didConnect()
        flushIfNeeded()
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        let now = beginRead(bytes: buffer.readableBytes)
        if var stashed = stash {
            stash = nil
            stashed.writeBuffer(&buffer)
            buffer = stashed
        }
        let consumed = buffer.withUnsafeReadableBytes { raw -> Int in
            guard let base = raw.baseAddress else { return 0 }
            var start = 0
            while start < raw.count {
                guard let newline = memchr(base + start, 0x0A, raw.count - start) else { break }
                let end = base.distance(to: UnsafeRawPointer(newline))
                var lineEnd = end
                if lineEnd > start, raw[lineEnd - 1] == 0x0D { lineEnd -= 1 }
                handleLine(UnsafeRawBufferPointer(rebasing: raw[start..<lineEnd]), now: now)
                start = end + 1
            }
            return start
        }
        buffer.moveReaderIndex(forwardBy: consumed)
        if buffer.readableBytes > 0 {
            guard buffer.readableBytes <= Self.maxStashBytes else {
                stats.countError("line_too_long")
                context.close(promise: nil)
                return
            }
            stash = buffer
        }
    }

    /// Starts on what one read brought (`bytes` of it, as received): returns the time its lines
    /// are stamped with. A transport that hands on whole messages itself (`WebSocketLines`)
    /// calls this, then `handleLine` for each message.
    final func beginRead(bytes: Int) -> UInt64 {
        if mode == .subscriber { stats.receivedBytes += bytes }
        windowStart = run.measureStart.load(ordering: .relaxed)
        windowEnd = run.measureEnd.load(ordering: .relaxed)
        return Clock.now()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushProgress()
        flushIfNeeded()
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stopPublishing()
        if isReady {
            if !run.tearingDown.load(ordering: .relaxed) {
                if mode == .slowSubscriber { stats.slowClosedByPeer += 1 } else { stats.closedByPeer += 1 }
            }
        } else {
            readyPromise.fail(LoadError("connection closed during setup (\(mode))"))
        }
        flushProgress()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !run.tearingDown.load(ordering: .relaxed) { stats.countError("io: \(error)") }
        readyPromise.fail(error)
        context.close(promise: nil)
    }

    // MARK: Helpers for subclasses

    final func send(_ text: String) {
        guard let context else { return }
        send(context.channel.allocator.buffer(string: text))
    }

    final func send(_ buffer: ByteBuffer) {
        guard let context else { return }
        context.write(wrapOutboundOut(buffer), promise: nil)
        needsFlush = true
    }

    final var allocator: ByteBufferAllocator { context?.channel.allocator ?? ByteBufferAllocator() }

    final func flushIfNeeded() {
        guard needsFlush, let context else { return }
        needsFlush = false
        context.flush()
    }

    final func flushProgress() {
        if stats.pendingProgress > 0 {
            run.addProgress(stats.pendingProgress)
            stats.pendingProgress = 0
        }
    }

    final func markReady() {
        guard !isReady else { return }
        isReady = true
        if mode == .slowSubscriber, let context {
            // Never read again: the server's queue for this connection only grows.
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        }
        readyPromise.succeed(())
    }

    final func failSetup(_ reason: String) {
        stats.countError(reason)
        readyPromise.fail(LoadError(reason))
    }

    /// A fan-out message reached this subscriber. `sendTime` 0 means its send time is unknown.
    /// A peer's message (`PeerPayload`, the same over NATS and Redis): a delivery for a
    /// subscriber, the answer for a requester.
    final func handlePeerMessage(_ line: UnsafeRawBufferPointer, now: UInt64) {
        guard let (time, seq) = PeerPayload.parse(line) else {
            stats.countError("unparsed_message")
            return
        }
        switch mode {
        case .subscriber, .slowSubscriber: recordDelivery(sendTime: time, seq: seq, now: now)
        case .requester: requestCompleted(id: seq, now: now, failed: false)
        default: break
        }
    }

    final func recordDelivery(sendTime: UInt64, seq: UInt64, now: UInt64) {
        stats.deliveries += 1
        stats.pendingProgress += 1
        if lastSeq != 0 {
            if seq <= lastSeq {
                stats.duplicates += 1
            } else if seq != lastSeq + 1 {
                stats.gaps += 1
            }
        }
        if seq > lastSeq { lastSeq = seq }
        if sendTime == 0 {
            stats.unmatched += 1
        } else if sendTime >= windowStart, sendTime < windowEnd, now >= sendTime {
            stats.latency.record(now - sendTime)
        }
    }

    // MARK: Request path

    final func startRequests() {
        sendNextRequest()
    }

    private func sendNextRequest() {
        guard run.running.load(ordering: .relaxed) else {
            requestOutstanding = false
            return
        }
        nextRequestID += 1
        requestOutstanding = true
        requestSentAt = Clock.now()
        writeRequest(id: nextRequestID, time: requestSentAt)
    }

    /// The answer to request `id` (nil: the protocol cannot tell, take the outstanding one).
    /// A failed answer (an error) is an answer: the next request follows, but it counts in
    /// `failedRequests` rather than in the progress and the latencies. `kind` adds it to the
    /// per-kind counts.
    final func requestCompleted(id: UInt64?, now: UInt64, failed: Bool, kind: RequestKind? = nil) {
        guard requestOutstanding else { return }
        if let id, id != UInt64(nextRequestID) { return }
        requestOutstanding = false
        let inWindow = requestSentAt >= windowStart && requestSentAt < windowEnd && now >= requestSentAt
        if failed {
            if inWindow { stats.failedRequests += 1 }
        } else {
            stats.pendingProgress += 1
            if inWindow { stats.latency.record(now - requestSentAt) }
        }
        if let kind, inWindow { stats.recordKind(kind, latency: failed ? nil : now - requestSentAt) }
        sendNextRequest()
    }

    // MARK: Fan-out publishing

    /// Starts publishing: at `rate` messages/s on a timer, or (rate 0) as fast as the window
    /// allows — at most `window` messages not yet delivered to every one of `subscribers`,
    /// and at most `maxPipeline` requests not yet acknowledged (0: no such bound).
    final func startPublishing(rate: Double, window: Int, subscribers: Int, maxPipeline: Int, limit: Int) {
        guard let context else { return }
        self.rate = rate
        self.window = max(window, 1)
        self.subscribers = max(subscribers, 1)
        self.maxPipeline = maxPipeline
        self.publishLimit = limit
        publishing = true
        publishStart = Clock.now()
        if rate > 0 {
            let tick = TimeAmount.nanoseconds(Int64(min(1_000_000, 1e9 / rate)))
            // The task holds this connection until `stopPublishing` (also run when the channel
            // closes) cancels it.
            let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
            ticker = context.eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: tick) { _ in
                bound.value.pump()
            }
        } else {
            pump()
        }
    }

    final func stopPublishing() {
        publishing = false
        ticker?.cancel()
        ticker = nil
    }

    final var publishedCount: Int { published }

    /// The server acknowledged one publish (todostreamd: a request of the publisher answered).
    final func publishAcknowledged() {
        acked += 1
        if publishing, rate == 0 { pump() }
    }

    final func pump() {
        guard publishing else { return }
        var wrote = false
        if rate > 0 {
            let elapsed = Double(Clock.now() &- publishStart)
            let due = min(Int(elapsed * rate / 1e9) + 1, publishLimit)
            while published < due {
                let intended = publishStart + UInt64(Double(published) * 1e9 / rate)
                published += 1
                writePublish(id: published, time: intended)
                wrote = true
            }
        } else {
            while published < publishLimit {
                if maxPipeline > 0, requestsInFlight() >= maxPipeline { break }
                if published - run.progress.load(ordering: .relaxed) / subscribers >= window {
                    run.publisherWaiting.store(true, ordering: .sequentiallyConsistent)
                    // Re-check after raising the flag, so a delivery that raced it still wakes us.
                    if published - run.progress.load(ordering: .sequentiallyConsistent) / subscribers < window {
                        run.publisherWaiting.store(false, ordering: .relaxed)
                        continue
                    }
                    break
                }
                published += 1
                writePublish(id: published, time: Clock.now())
                wrote = true
            }
        }
        if wrote {
            run.published.store(published, ordering: .relaxed)
            flushIfNeeded()
        }
        if published >= publishLimit { stopPublishing() }
    }
}

struct LoadError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
