import EventStream
import NIOConcurrencyHelpers
import NIOCore

/// A broadcast encoded once: the bytes every subscriber gets, and the copy with `re` for the
/// session whose request caused it.
struct BroadcastFrame: Sendable {
    let seq: UInt64
    let typeIndex: Int
    let plain: ByteBuffer
    let origin: SessionID?
    let originCopy: ByteBuffer
    /// When the broadcast reached the hub, for the fan-out latency histogram.
    var receivedAt = NIODeadline.now()

    /// The same frame in buffers of its own.
    func withOwnBytes() -> BroadcastFrame {
        let plain = ByteBuffer(bytes: self.plain.readableBytesView)
        let sameCopy = self.originCopy.readableBytes == self.plain.readableBytes
        return BroadcastFrame(
            seq: seq,
            typeIndex: typeIndex,
            plain: plain,
            origin: origin,
            originCopy: sameCopy ? plain : ByteBuffer(bytes: self.originCopy.readableBytesView),
            receivedAt: receivedAt
        )
    }
}

/// What `/metrics` reads from the hub: counted on each loop without locks (or under the
/// order lock the fan-out takes anyway), summed here.
public struct LoopMetrics: Sendable {
    /// Frames received from clients, and the events they published by type.
    public var framesIn = 0
    public var requestsByType: [String: Int] = [:]
    /// Broadcasts released to the fan-out.
    public var broadcasts = 0
    /// Frames written to clients (broadcasts and replies), by event type.
    public var framesOutByType: [String: Int] = [:]
    /// From a broadcast reaching the hub to its bytes being handed to every subscriber's
    /// connection on a loop (one observation per broadcast per loop).
    public var fanOutLatency = LatencyHistogram()
    /// Bytes written to connections and not yet taken by the kernel: the sum and the largest.
    public var queuedBytes = 0
    public var largestQueueBytes = 0
    /// Broadcasts waiting for an earlier seq before they can go out.
    public var heldBack = 0

    public init() {}
}

/// Routes the bus's output to sessions: broadcasts in exact seq order to every subscriber,
/// replies to their requester, and copies of everything to monitors.
///
/// Sessions live in one shard per event loop, touched only on that loop, so the fan-out takes
/// no lock per subscriber: a broadcast is encoded once, put in order under one lock, and
/// appended to each loop's inbox. A loop empties its inbox in one task, writing the same bytes
/// to all of that loop's subscribers and flushing each subscriber once for everything that
/// arrived meanwhile (a group commit's broadcasts go out in one `writev` per subscriber).
public final class Hub<Codec: EventCodec>: EventSink, Sendable {
    public typealias Event = Codec.Event

    let codec: Codec
    public let epoch: String
    private let shards: [ObjectIdentifier: Shard<Codec>]
    private let orderedShards: [Shard<Codec>]
    private let order: NIOLockedValueBox<OrderState>
    private let directory = NIOLockedValueBox<[SessionID: SessionEntry]>([:])
    private let counters = NIOLockedValueBox(Counters())
    private let nextSessionID = NIOLockedValueBox<UInt64>(0)
    let monitorCount = NIOLockedValueBox(0)
    public let metrics = RelayMetrics()

    struct SessionEntry {
        let loop: any EventLoop
        let uuid: String
    }

    struct Counters {
        var total = 0
        var perIP: [String: Int] = [:]
    }

    /// - Parameters:
    ///   - head: the newest seq already broadcast (the journal's head at start).
    public init(codec: Codec, epoch: String, head: UInt64, loops: [any EventLoop]) {
        self.codec = codec
        self.epoch = epoch
        var shards: [ObjectIdentifier: Shard<Codec>] = [:]
        var ordered: [Shard<Codec>] = []
        for loop in loops {
            let shard = Shard<Codec>(loop: loop, typeCount: codec.catalog.descriptors.count, head: head)
            shards[ObjectIdentifier(loop)] = shard
            ordered.append(shard)
        }
        self.shards = shards
        self.orderedShards = ordered
        self.order = NIOLockedValueBox(OrderState(orderer: SequenceOrderer(after: head), highestAccepted: head))
    }

    /// The newest seq handed to the fan-out.
    public var seq: UInt64 { order.withLockedValue { $0.orderer.next - 1 } }

    /// Broadcasts put back in seq order, and the other deliveries (replies, monitors' copies)
    /// that must not overtake the broadcasts before them.
    struct OrderState {
        var orderer: SequenceOrderer<BroadcastFrame>
        /// The highest seq handed to `publishBroadcast` so far.
        var highestAccepted: UInt64
        /// Deliveries waiting until every seq up to `after` has been released.
        var deferred: [(after: UInt64, shard: Shard<Codec>, run: @Sendable () -> Void)] = []
        /// Broadcasts released so far.
        var released = 0
    }

    public var connectionCount: Int { counters.withLockedValue { $0.total } }

    func makeSessionID() -> SessionID {
        nextSessionID.withLockedValue {
            $0 += 1
            return SessionID($0)
        }
    }

    func shard(for loop: any EventLoop) -> Shard<Codec>? { shards[ObjectIdentifier(loop)] }

    // MARK: Admission

    enum Admission {
        case admitted
        case tooManyTotal
        case tooManyFromIP
    }

    func admit(ip: String, limits: RelayConfiguration) -> Admission {
        counters.withLockedValue { counters in
            if counters.total >= limits.maxConnections { return .tooManyTotal }
            if counters.perIP[ip, default: 0] >= limits.maxConnectionsPerIP { return .tooManyFromIP }
            counters.total += 1
            counters.perIP[ip, default: 0] += 1
            return .admitted
        }
    }

    func release(ip: String) {
        counters.withLockedValue { counters in
            counters.total -= 1
            let left = counters.perIP[ip, default: 1] - 1
            counters.perIP[ip] = left > 0 ? left : nil
        }
    }

    // MARK: Registration (called on the session's loop)

    /// Registers a session in its loop's shard and returns the seq it starts after.
    func register(_ session: SessionHandler<Codec>) -> UInt64 {
        directory.withLockedValue { $0[session.id] = SessionEntry(loop: session.loop, uuid: session.uuid) }
        guard let shard = shard(for: session.loop) else { return seq }
        shard.sessions[session.id] = session
        return shard.lastSeq
    }

    func unregister(_ session: SessionHandler<Codec>) {
        directory.withLockedValue { $0[session.id] = nil }
        shard(for: session.loop)?.remove(session)
    }

    /// Updates a session's place in its shard's type index.
    func updateSubscriptions(
        _ session: SessionHandler<Codec>,
        from old: TypeSet,
        to new: TypeSet,
        monitor wasMonitor: Bool,
        isMonitor: Bool
    ) {
        guard let shard = shard(for: session.loop) else { return }
        shard.reindex(session, from: old, to: new, wasMonitor: wasMonitor, isMonitor: isMonitor)
        if wasMonitor != isMonitor { monitorCount.withLockedValue { $0 += isMonitor ? 1 : -1 } }
    }

    // MARK: EventSink

    public func deliver(_ event: Event, scope: Scope, origin: Origin) {
        let name = event.name
        guard let typeIndex = codec.catalog.index(of: name) else { return }
        switch scope {
        case .broadcast(let seq):
            let body = codec.encodeBody(event)
            let plain = OutboundFrame.event(seq: seq, type: name, correlation: nil, body: body)
            let originCopy =
                origin.correlation == nil
                ? plain : OutboundFrame.event(seq: seq, type: name, correlation: origin.correlation, body: body)
            publishBroadcast(
                BroadcastFrame(
                    seq: seq,
                    typeIndex: typeIndex,
                    plain: plain,
                    origin: origin.session,
                    originCopy: originCopy
                )
            )
        case .reply:
            let body = codec.encodeBody(event)
            let frame = OutboundFrame.event(seq: nil, type: name, correlation: origin.correlation, body: body)
            if let entry = directory.withLockedValue({ $0[origin.session] }),
                let shard = self.shard(for: entry.loop)
            {
                post(to: shard) {
                    guard let session = shard.sessions[origin.session] else { return }
                    shard.framesOut[typeIndex] += 1
                    session.deliverReply(frame)
                }
            }
            copyToMonitors(event, typeIndex: typeIndex, origin: origin, body: body)
        case .internal:
            copyToMonitors(event, typeIndex: typeIndex, origin: origin, body: nil)
        }
    }

    /// Publishes broadcasts read from the journal (another daemon's, sharing the database) as
    /// if they had been made here: the journal holds each one's type and payload byte for byte,
    /// so every client gets the same frame as the other daemon's clients. They merge with local
    /// broadcasts in seq order; a seq already handed over is dropped.
    public func publishJournal(_ entries: [JournalEntry]) {
        for entry in entries {
            guard let typeIndex = codec.catalog.index(of: entry.type) else { continue }
            let plain = OutboundFrame.event(
                seq: entry.seq,
                type: entry.type,
                correlation: nil,
                body: .payload(entry.payload)
            )
            publishBroadcast(
                BroadcastFrame(seq: entry.seq, typeIndex: typeIndex, plain: plain, origin: nil, originCopy: plain)
            )
        }
    }

    /// Hands a broadcast to the fan-out once every broadcast before it has been handed over.
    /// When a seq waits twice, the copy that has an origin (the requester's `re` copy) wins.
    func publishBroadcast(_ frame: BroadcastFrame) {
        order.withLockedValue { state in
            state.highestAccepted = max(state.highestAccepted, frame.seq)
            let released = state.orderer.accept(
                seq: frame.seq,
                frame,
                replaces: { held in frame.origin != nil || held.origin == nil }
            )
            guard !released.isEmpty else { return }
            state.released += released.count
            defer { releaseDeferred(&state) }
            // Submitted under the lock so every loop receives broadcasts in seq order. Each loop
            // gets bytes of its own: sharing one buffer would have every core bump the same
            // reference count once per subscriber.
            for (index, shard) in orderedShards.enumerated() {
                shard.post(index == 0 ? released : released.map { $0.withOwnBytes() })
            }
        }
    }

    /// Runs `body` on `shard`'s loop after every broadcast handed over before it, including
    /// those still held back for an earlier seq: a reply never overtakes the broadcasts of the
    /// requests its session sent before.
    private func post(to shard: Shard<Codec>, _ body: @escaping @Sendable () -> Void) {
        order.withLockedValue { state in
            if state.highestAccepted < state.orderer.next {
                shard.post(body)
            } else {
                state.deferred.append((state.highestAccepted, shard, body))
            }
        }
    }

    /// Posts the deferred deliveries whose broadcasts have all been released (under the lock).
    private func releaseDeferred(_ state: inout OrderState) {
        guard let first = state.deferred.first, first.after < state.orderer.next else { return }
        var kept: [(after: UInt64, shard: Shard<Codec>, run: @Sendable () -> Void)] = []
        for item in state.deferred {
            if item.after < state.orderer.next { item.shard.post(item.run) } else { kept.append(item) }
        }
        state.deferred = kept
    }

    private func copyToMonitors(_ event: Event, typeIndex: Int, origin: Origin, body: EncodedBody?) {
        guard monitorCount.withLockedValue({ $0 }) > 0 else { return }
        let uuid = directory.withLockedValue { $0[origin.session]?.uuid }
        let frame = OutboundFrame.event(
            seq: nil,
            type: event.name,
            correlation: nil,
            session: uuid ?? "",
            body: body ?? codec.encodeBody(event)
        )
        for shard in orderedShards {
            post(to: shard) { shard.copyToMonitors(frame, typeIndex: typeIndex, except: origin.session) }
        }
    }

    /// Sends every session a control frame (used for `draining`).
    func sendToAll(_ make: @escaping @Sendable () -> ByteBuffer) {
        for shard in orderedShards {
            shard.loop.execute {
                for session in shard.sessions.values { session.deliverControl(make()) }
            }
        }
    }

    /// The shards' counters, summed (each read on its own loop).
    public func loopMetrics() async -> LoopMetrics {
        var total = LoopMetrics()
        (total.heldBack, total.broadcasts) = order.withLockedValue { ($0.orderer.heldBack, $0.released) }
        let names = codec.catalog.descriptors.map(\.name)
        func add(_ counts: [Int], to byType: inout [String: Int]) {
            for (index, count) in counts.enumerated() where count > 0 && index < names.count {
                byType[names[index], default: 0] += count
            }
        }
        for shard in orderedShards {
            guard
                let part = try? await shard.loop.submit({
                    (
                        framesIn: shard.framesIn, requests: shard.requestsIn, framesOut: shard.framesOut,
                        latency: shard.fanOutLatency, queued: shard.sessions.values.map(\.queuedBytes)
                    )
                }).get()
            else { continue }
            total.framesIn += part.framesIn
            add(part.requests, to: &total.requestsByType)
            add(part.framesOut, to: &total.framesOutByType)
            total.fanOutLatency.merge(part.latency)
            total.queuedBytes += part.queued.reduce(0, +)
            total.largestQueueBytes = max(total.largestQueueBytes, part.queued.max() ?? 0)
        }
        return total
    }

    /// Calls `body` on each loop with that loop's sessions and waits for all.
    func forEachSession(_ body: @escaping @Sendable (SessionHandler<Codec>) -> Void) async {
        await withTaskGroup(of: Void.self) { group in
            for shard in orderedShards {
                group.addTask {
                    try? await shard.loop.submit { for session in shard.sessions.values { body(session) } }.get()
                }
            }
        }
    }
}

/// The sessions of one event loop. Invariant: every stored property is read and written only
/// on `loop`, which is why it may be shared across threads.
final class Shard<Codec: EventCodec>: @unchecked Sendable {
    let loop: any EventLoop
    /// Broadcasts posted for this loop and not yet fanned out (the one property touched off
    /// the loop, under its lock), and whether a task to fan them out is scheduled. Bounded:
    /// the loop empties it on its next turn, and what is in it was committed already.
    private let inbox = NIOLockedValueBox<(items: [InboxItem], scheduled: Bool)>(([], false))

    enum InboxItem {
        case broadcast(BroadcastFrame)
        /// A reply or a monitor's copy, in its place among the broadcasts.
        case run(@Sendable () -> Void)
    }
    var sessions: [SessionID: SessionHandler<Codec>] = [:]
    private var byType: [[SessionID: SessionHandler<Codec>]]
    private var monitorsByType: [[SessionID: SessionHandler<Codec>]]
    /// The newest broadcast fanned out on this loop.
    private(set) var lastSeq: UInt64
    /// Frames written on this loop, by type index.
    var framesOut: [Int]
    /// Frames received on this loop, and the events they published by type index.
    var framesIn = 0
    var requestsIn: [Int]
    private(set) var fanOutLatency = LatencyHistogram()

    init(loop: any EventLoop, typeCount: Int, head: UInt64) {
        self.loop = loop
        self.byType = Array(repeating: [:], count: typeCount)
        self.monitorsByType = Array(repeating: [:], count: typeCount)
        self.framesOut = Array(repeating: 0, count: typeCount)
        self.requestsIn = Array(repeating: 0, count: typeCount)
        self.lastSeq = head
    }

    func reindex(
        _ session: SessionHandler<Codec>,
        from old: TypeSet,
        to new: TypeSet,
        wasMonitor: Bool,
        isMonitor: Bool
    ) {
        for index in byType.indices {
            if old.contains(index) {
                byType[index][session.id] = nil
                monitorsByType[index][session.id] = nil
            }
            if new.contains(index) {
                byType[index][session.id] = session
                if isMonitor { monitorsByType[index][session.id] = session }
            }
        }
    }

    func remove(_ session: SessionHandler<Codec>) {
        sessions[session.id] = nil
        for index in byType.indices {
            byType[index][session.id] = nil
            monitorsByType[index][session.id] = nil
        }
    }

    /// Appends broadcasts to the inbox (from any thread; callers keep seq order).
    func post(_ frames: [BroadcastFrame]) {
        append(frames.map { .broadcast($0) })
    }

    /// Appends a delivery to run on the loop in its place among the broadcasts.
    func post(_ body: @escaping @Sendable () -> Void) {
        append([.run(body)])
    }

    private func append(_ items: [InboxItem]) {
        let schedule = inbox.withLockedValue { inbox -> Bool in
            inbox.items.append(contentsOf: items)
            if inbox.scheduled { return false }
            inbox.scheduled = true
            return true
        }
        if schedule { loop.execute { self.emptyInbox() } }
    }

    /// Fans out each run of consecutive broadcasts together, and runs the other deliveries
    /// between them in order.
    private func emptyInbox() {
        let items = inbox.withLockedValue { inbox -> [InboxItem] in
            inbox.scheduled = false
            let items = inbox.items
            inbox.items = []
            return items
        }
        var run: [BroadcastFrame] = []
        for item in items {
            switch item {
            case .broadcast(let frame):
                run.append(frame)
            case .run(let body):
                if !run.isEmpty {
                    fanOut(run)
                    run = []
                }
                body()
            }
        }
        if !run.isEmpty { fanOut(run) }
    }

    func fanOut(_ frames: [BroadcastFrame]) {
        guard let first = frames.first, let last = frames.last else { return }
        guard frames.allSatisfy({ $0.typeIndex == first.typeIndex }) else { return fanOutOneByOne(frames) }
        // The usual case: one broadcast, or a run of broadcasts of one type (a group commit's).
        // Every subscriber that caused none of them gets the same bytes, so a run is joined
        // into one buffer, written to each of them once and flushed at once.
        var run: ByteBuffer
        var origins = Set<SessionID>()
        if frames.count == 1 {
            run = first.plain
        } else {
            run = ByteBuffer()
            run.reserveCapacity(frames.reduce(0) { $0 + $1.plain.readableBytes })
            for frame in frames { run.writeImmutableBuffer(frame.plain) }
        }
        for frame in frames { if let origin = frame.origin { origins.insert(origin) } }
        lastSeq = last.seq
        let subscribers = byType[first.typeIndex]
        var written = 0
        for (id, session) in subscribers where !origins.contains(id) {
            written += frames.count
            if session.enqueueBroadcastRun(run, frames: frames) { session.flushBroadcasts() }
        }
        // A session that caused some of them gets its own copies (with `re`) in their place.
        for origin in origins {
            guard let session = sessions[origin] else { continue }
            let subscribed = subscribers[origin] != nil
            var queued = false
            for frame in frames where subscribed || frame.origin == origin {
                let bytes = frame.origin == origin ? frame.originCopy : frame.plain
                written += 1
                if session.enqueueBroadcast(bytes, seq: frame.seq) { queued = true }
            }
            if queued { session.flushBroadcasts() }
        }
        framesOut[first.typeIndex] += written
        recordLatency(frames)
    }

    /// One fan-out latency observation per broadcast, once this loop has written it.
    private func recordLatency(_ frames: [BroadcastFrame]) {
        let now = NIODeadline.now()
        for frame in frames {
            fanOutLatency.record(nanoseconds: UInt64(max(0, (now - frame.receivedAt).nanoseconds)))
        }
    }

    private func fanOutOneByOne(_ frames: [BroadcastFrame]) {
        var touched: [SessionHandler<Codec>] = []
        for frame in frames {
            lastSeq = frame.seq
            let subscribers = byType[frame.typeIndex]
            for (id, session) in subscribers where id != frame.origin {
                if session.enqueueBroadcast(frame.plain, seq: frame.seq) { touched.append(session) }
            }
            var written = subscribers.count
            if let origin = frame.origin, let session = sessions[origin] {
                if subscribers[origin] != nil { written -= 1 }
                if session.enqueueBroadcast(frame.originCopy, seq: frame.seq) { touched.append(session) }
                written += 1
            }
            framesOut[frame.typeIndex] += written
        }
        for session in touched { session.flushBroadcasts() }
        recordLatency(frames)
    }

    func copyToMonitors(_ frame: ByteBuffer, typeIndex: Int, except origin: SessionID) {
        for (id, session) in monitorsByType[typeIndex] where id != origin {
            framesOut[typeIndex] += 1
            session.deliverControl(frame)
        }
    }
}
