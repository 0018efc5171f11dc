import Synchronization

/// The one place where requests get their order: every connection hands its requests here,
/// and a single consumer runs them through the bus a batch at a time, in arrival order.
///
/// Sessions never wait for it: `submit` only appends to a bounded queue. The consumer takes
/// everything queued (up to `maxBatch`), runs it through the servers, waits once for the model
/// layer (one commit for the whole batch), and hands the sink everything the batch caused in
/// one call. While a batch commits, the next one accumulates.
///
/// **Handing over on another thread.** Handing a batch to the sink (encoding each reply and
/// broadcast, and posting them to the event loops) is a good part of the consumer's work per
/// batch. With `offload` set, when the next batch is already waiting the consumer leaves that
/// to `offload`'s thread and starts the next batch at once, so the two overlap (with
/// PostgreSQL the next batch's commit is then on the network while the last one's answers are
/// encoded). Hand-overs keep their order: one goes to `offload` whenever one is still there;
/// otherwise, with nothing waiting (one client's requests, say), it is made here, with no
/// thread crossed.
public final class Sequencer<Event: StreamEvent>: Sendable {
    public typealias Request = (event: Event, origin: Origin)

    @usableFromInline let bus: EventBus<Event>
    @usableFromInline let sink: any EventSink<Event>
    @usableFromInline let queue: Mutex<RequestQueue<Request>>
    @usableFromInline let stats = Mutex(SequencerStats())
    /// Runs a hand-over on another thread, in the order given; nil: every hand-over is made
    /// on the consumer.
    @usableFromInline let offload: Offload?
    /// Hand-overs given to `offload` and not yet made.
    @usableFromInline let offloaded = Atomic<Int>(0)
    /// Whether a batch waits for more requests before it runs (its initial state).
    @usableFromInline let gathering: BatchGathering
    /// Whether gathering is worth it now (`BatchGathering`'s `shared`).
    @usableFromInline let gatherWhen: @Sendable () -> Bool

    public typealias Offload = @Sendable (_ work: @escaping @Sendable () -> Void) -> Void

    /// - Parameters:
    ///   - capacity: requests that may wait at once; past it `submit` refuses.
    ///   - maxBatch: requests run together at most.
    ///   - offload: runs hand-overs to the sink on another thread, one at a time in the
    ///     order given (see the type's documentation).
    ///   - gatherFor: how long a batch may wait for more requests at most (`BatchGathering`);
    ///     zero: never.
    ///   - gatherWhen: asked before each batch whether it may wait (with PostgreSQL: whether
    ///     other daemons commit too).
    public init(
        bus: EventBus<Event>,
        sink: any EventSink<Event>,
        capacity: Int,
        maxBatch: Int,
        offload: Offload? = nil,
        gatherFor: Duration = .zero,
        gatherWhen: @escaping @Sendable () -> Bool = { true }
    ) {
        self.bus = bus
        self.sink = sink
        self.queue = Mutex(RequestQueue(capacity: capacity, maxBatch: maxBatch))
        self.offload = offload
        self.gathering = BatchGathering(maxWait: gatherFor, maxBatch: maxBatch)
        self.gatherWhen = gatherWhen
    }

    /// Queues a request. False when the queue is full or the sequencer is stopping: the
    /// request was not taken and nothing of it will happen.
    @inlinable
    public func submit(_ event: Event, origin: Origin) -> Bool {
        switch queue.withLock({ $0.submit((event, origin)) }) {
        case .queued:
            return true
        case .resume(let waiter, let batch):
            waiter.resume(returning: batch)
            return true
        case .refused:
            return false
        }
    }

    /// Runs batches until `stop()` was called and everything queued before it has run.
    /// Runs on the caller's executor (`nonisolated(nonsending)`): a host that pins it to one
    /// thread keeps every batch there, with no hop per batch.
    /// Inlinable, like `EventBus.run`, to be specialised for the app's event type.
    @inlinable
    public nonisolated(nonsending) func run() async {
        var gathering = self.gathering
        while var batch = await nextBatch() {
            if gathering.maxWait > .zero,
                case .wait(let want, let until) = gathering.decide(
                    count: batch.count,
                    now: .now,
                    shared: gatherWhen()
                )
            {
                batch += await gather(want - batch.count, until: until)
            }
            let started = ContinuousClock.now
            let deliveries = await bus.run(batch)
            let origins = batch.map(\.origin)
            if gathering.maxWait > .zero {
                gathering.ran(sessions: Set(origins.lazy.map(\.session)), duration: .now - started)
            }
            stats.withLock { $0.record(batchSize: batch.count) }
            if let offload, offloaded.load(ordering: .acquiring) > 0 || queue.withLock({ $0.count }) > 0 {
                offloaded.add(1, ordering: .relaxed)
                offload { [self] in
                    sink.deliver(deliveries, answering: origins)
                    offloaded.subtract(1, ordering: .releasing)
                }
            } else {
                sink.deliver(deliveries, answering: origins)
            }
        }
        // Every hand-over is made before the sequencer counts as stopped.
        if let offload, offloaded.load(ordering: .acquiring) > 0 {
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in offload { done.resume() } }
        }
    }

    /// Refuses new requests; `run` returns once the queued ones have run.
    public func stop() {
        if case .resume(let waiter, let batch) = queue.withLock({ $0.stop() }) { waiter.resume(returning: batch) }
    }

    /// Requests waiting for the next batch.
    public var queued: Int { queue.withLock { $0.count } }

    /// Batches run, and requests in them.
    public var counts: SequencerStats { stats.withLock { $0 } }

    /// Waits for `count` more requests, or until `until`, and returns those that came (at
    /// most `count`; none when the sequencer stops meanwhile).
    @inlinable
    nonisolated(nonsending) func gather(_ count: Int, until: ContinuousClock.Instant) async -> [Request] {
        let more = await withCheckedContinuation { (continuation: RequestQueue<Request>.Waiter) in
            let (action, wait) = queue.withLock { $0.gather(continuation, want: count, limit: count) }
            switch action {
            case .wait:
                Task { [self] in
                    try? await Task.sleep(until: until, clock: .continuous)
                    if case .resume(let waiter, let batch) = queue.withLock({ $0.expire(gathering: wait) }) {
                        waiter.resume(returning: batch)
                    }
                }
            case .batch(let batch): continuation.resume(returning: batch)
            case .finished: continuation.resume(returning: nil)
            }
        }
        return more ?? []
    }

    @inlinable
    nonisolated(nonsending) func nextBatch() async -> [Request]? {
        switch queue.withLock({ $0.take() }) {
        case .batch(let batch): return batch
        case .finished: return nil
        case .wait: break
        }
        return await withCheckedContinuation { (continuation: RequestQueue<Request>.Waiter) in
            switch queue.withLock({ $0.park(continuation) }) {
            case .wait: break
            case .batch(let batch): continuation.resume(returning: batch)
            case .finished: continuation.resume(returning: nil)
            }
        }
    }
}

/// What the sequencer has done so far.
public struct SequencerStats: Sendable, Hashable {
    public private(set) var batches = 0
    public private(set) var requests = 0
    public private(set) var largestBatch = 0

    @usableFromInline
    mutating func record(batchSize: Int) {
        batches += 1
        requests += batchSize
        largestBatch = max(largestBatch, batchSize)
    }
}
