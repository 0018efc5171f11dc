import EventStream
import NIOConcurrencyHelpers
import NIOCore

/// A broadcast's frames as one loop made them (`PendingBroadcast.frames(on:)`): the bytes every
/// subscriber gets, and the copy with `re` for the session whose request caused it.
struct BroadcastFrame: Sendable {
    let broadcast: PendingBroadcast
    let plain: ByteBuffer
    let originCopy: ByteBuffer

    var seq: UInt64 { broadcast.seq }
    var typeIndex: Int { broadcast.typeIndex }
    var origin: SessionID? { broadcast.origin }
    /// When the broadcast reached the hub, for the fan-out latency histogram.
    var receivedAt: NIODeadline { broadcast.receivedAt }
}

/// A broadcast as the hub hands it to the loops: what its frames are made of. Each loop that
/// writes it makes the frames it needs (`BroadcastFrame`) in buffers of its own, so the
/// sequencer's thread, which every request waits for, makes none, no two loops share a
/// buffer (whose reference count every core would bump once per subscriber), and a broadcast
/// that only its requester takes never gets everyone's frame.
struct PendingBroadcast: Sendable {
    let seq: UInt64
    let typeIndex: Int
    let type: String
    let mark: MutationMark?
    let body: EncodedBody
    let origin: SessionID?
    /// The requester's `re`, for its own copy.
    let correlation: CorrelationID?
    /// The index of the origin's loop in the hub's list, when known.
    var originShard: Int? = nil
    /// When the broadcast reached the hub, for the fan-out latency histogram.
    var receivedAt = NIODeadline.now()

    /// Everyone's frame, and the requester's copy with `re` (the same buffer without one, or
    /// on a loop where the requester is not: `shard`, the loop's index in the hub's list).
    func frames(on shard: Int) -> BroadcastFrame {
        let plain = OutboundFrame.event(seq: seq, type: type, correlation: nil, mark: mark, body: body)
        let hasCopy = correlation != nil && (originShard == nil || originShard == shard)
        return BroadcastFrame(broadcast: self, plain: plain, originCopy: hasCopy ? originCopy() : plain)
    }

    /// The requester's copy alone.
    func originCopy() -> ByteBuffer {
        OutboundFrame.event(seq: seq, type: type, correlation: correlation, mark: mark, body: body)
    }
}

/// A reply as the hub hands it to its requester's loop, which makes its frame.
struct PendingReply: Sendable {
    let type: String
    let correlation: CorrelationID?
    let mark: MutationMark?
    let body: EncodedBody

    func frame() -> ByteBuffer {
        OutboundFrame.event(seq: nil, type: type, correlation: correlation, mark: mark, body: body)
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

// The hub's own value types live outside the generic `Hub`: nested in it, each would be a
// generic type whose metadata (and that of every array or dictionary of it) is looked up at
// run time on every batch, as Relay is compiled without knowing the codec.

/// A session's place in the hub's directory.
struct HubSessionEntry {
    /// The index of the session's loop in the hub's `orderedShards`.
    let shard: Int
    let uuid: String
}

/// Connections admitted, in all and by address.
struct HubCounters {
    var total = 0
    var perIP: [String: Int] = [:]
}

/// Broadcasts put back in seq order, and the other deliveries (replies, monitors' copies) that
/// must not overtake the broadcasts before them.
struct HubOrderState {
    var orderer: SequenceOrderer<PendingBroadcast>
    /// The highest seq handed to the orderer so far.
    var highestAccepted: UInt64
    /// Deliveries waiting until every seq up to `after` has been released.
    var deferred: [(after: UInt64, shard: Int, item: ShardInboxItem)] = []
    /// Broadcasts released so far.
    var released = 0
}

/// A piece of a batch on its way to the loops.
enum HubWork {
    case broadcast(PendingBroadcast)
    case item(shard: Int, ShardInboxItem)
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
    private let order: NIOLockedValueBox<HubOrderState>
    private let directory = NIOLockedValueBox<[SessionID: HubSessionEntry]>([:])
    private let counters = NIOLockedValueBox(HubCounters())
    private let nextSessionID = NIOLockedValueBox<UInt64>(0)
    let monitorCount = NIOLockedValueBox(0)
    public let metrics = RelayMetrics()

    /// - Parameters:
    ///   - head: the newest seq already broadcast (the journal's head at start).
    public init(codec: Codec, epoch: String, head: UInt64, loops: [any EventLoop]) {
        self.codec = codec
        self.epoch = epoch
        var shards: [ObjectIdentifier: Shard<Codec>] = [:]
        var ordered: [Shard<Codec>] = []
        for (index, loop) in loops.enumerated() {
            let shard = Shard<Codec>(
                index: index,
                loop: loop,
                epoch: epoch,
                typeCount: codec.catalog.descriptors.count,
                head: head
            )
            shards[ObjectIdentifier(loop)] = shard
            ordered.append(shard)
        }
        self.shards = shards
        self.orderedShards = ordered
        self.order = NIOLockedValueBox(HubOrderState(orderer: SequenceOrderer(after: head), highestAccepted: head))
    }

    /// The newest seq handed to the fan-out.
    public var seq: UInt64 { order.withLockedValue { $0.orderer.next - 1 } }

    public var connectionCount: Int { counters.withLockedValue { $0.total } }

    /// Whether every connection the limits allow is taken, in all or from `ip`: a WebSocket
    /// upgrade on HTTP's reserve then opens no session.
    func sessionsFull(from ip: String, limits: RelayConfiguration) -> Bool {
        counters.withLockedValue { counters in
            counters.total > limits.maxConnections || counters.perIP[ip, default: 0] > limits.maxConnectionsPerIP
        }
    }

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

    /// `reserve`: connections past `maxConnections`, and past `maxConnectionsPerIP` from one
    /// address, this listener may take (HTTP's, for plain requests: monitoring from an address
    /// whose every connection is taken is still answered).
    func admit(ip: String, limits: RelayConfiguration, reserve: Int = 0) -> Admission {
        counters.withLockedValue { counters in
            if counters.total >= limits.maxConnections + reserve { return .tooManyTotal }
            if counters.perIP[ip, default: 0] >= limits.maxConnectionsPerIP + reserve { return .tooManyFromIP }
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
        guard let shard = shard(for: session.loop) else { return seq }
        directory.withLockedValue { $0[session.id] = HubSessionEntry(shard: shard.index, uuid: session.uuid) }
        return shard.register(session)
    }

    /// A session registered earlier has its first subscriptions (called on its loop).
    func settled(_ session: SessionHandler<Codec>) {
        shard(for: session.loop)?.settled()
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

    /// Hands everything a batch caused to the loops: each broadcast encoded once, each reply to
    /// its requester's loop, copies to monitors, and a notice per answered request. Each loop
    /// gets the whole batch as one unit of work, in order.
    public func deliver(_ deliveries: [Delivery<Event>], answering requests: [Origin]) {
        let monitors = monitorCount.withLockedValue { $0 } > 0
        // Where each requester lives, and (for monitors' copies) its public id: one look-up.
        var routes: [SessionID: (shard: Int, uuid: String)] = [:]
        routes.reserveCapacity(requests.count)
        directory.withLockedValue { directory in
            for origin in requests where routes[origin.session] == nil {
                if let entry = directory[origin.session] { routes[origin.session] = (entry.shard, entry.uuid) }
            }
        }
        var work: [HubWork] = []
        work.reserveCapacity(deliveries.count + requests.count)
        for delivery in deliveries {
            // Events inside the daemon go to monitors only.
            if case .internal = delivery.scope, !monitors { continue }
            let name = delivery.event.name
            guard let typeIndex = codec.catalog.index(of: name) else { continue }
            let origin = delivery.origin
            var body: EncodedBody?
            switch delivery.scope {
            case .broadcast(let seq):
                let encoded = delivery.encodedPayload.map(EncodedBody.payload) ?? codec.encodeBody(delivery.event)
                body = encoded
                work.append(
                    .broadcast(
                        PendingBroadcast(
                            seq: seq,
                            typeIndex: typeIndex,
                            type: name,
                            mark: delivery.mark,
                            body: encoded,
                            origin: origin.session,
                            correlation: origin.correlation,
                            originShard: routes[origin.session]?.shard
                        )
                    )
                )
            case .reply:
                if let code = delivery.event.failureCode { metrics.appError(code) }
                let encoded = delivery.encodedPayload.map(EncodedBody.payload) ?? codec.encodeBody(delivery.event)
                body = encoded
                guard let route = routes[origin.session] else { break }
                if delivery.event.outcomeUnknown {
                    // Not answered: the connection closes, in its place among the rest.
                    let shard = orderedShards[route.shard]
                    let id = origin.session
                    work.append(.item(shard: route.shard, .run { shard.sessions[id]?.closeOutcomeUnknown() }))
                } else {
                    let reply = PendingReply(
                        type: name,
                        correlation: origin.correlation,
                        mark: delivery.mark,
                        body: encoded
                    )
                    work.append(.item(shard: route.shard, .reply(origin.session, reply, typeIndex: typeIndex)))
                }
            case .internal:
                break
            }
            guard monitors else { continue }
            let copy = OutboundFrame.event(
                seq: nil,
                type: name,
                correlation: nil,
                session: routes[origin.session]?.uuid ?? "",
                mark: delivery.mark,
                body: body ?? codec.encodeBody(delivery.event)
            )
            for shard in orderedShards.indices {
                work.append(.item(shard: shard, .monitor(copy, typeIndex: typeIndex, except: origin.session)))
            }
        }
        for origin in requests {
            if let route = routes[origin.session] { work.append(.item(shard: route.shard, .answered(origin.session))) }
        }
        hand(work)
    }

    /// Puts the work in order under the order lock and posts each loop its part at once.
    ///
    /// A delivery that is not a broadcast (a reply, a monitor's copy, an answered mark) has its
    /// place in the stream: after the broadcasts before it in `work`, before the ones after it.
    /// So it waits until every seq below the next broadcast of `work` is out (a save's reply
    /// goes out before its own broadcast, never after, even when that broadcast waits for
    /// another daemon's earlier seqs), or, with no broadcast after it, every seq up to the last
    /// one before it; with none in `work` at all, every seq handed over so far. Deliveries
    /// that wait keep their order among themselves.
    private func hand(_ work: [HubWork]) {
        // For each delivery, the seq of the next broadcast after it in `work`, if any.
        var nextSeqs = [UInt64?](repeating: nil, count: work.count)
        var following: UInt64?
        for index in work.indices.reversed() {
            if case .broadcast(let frame) = work[index] { following = frame.seq } else { nextSeqs[index] = following }
        }
        order.withLockedValue { state in
            var parts = Array(repeating: [ShardInboxItem](), count: orderedShards.count)
            var previous: UInt64?
            for (index, piece) in work.enumerated() {
                switch piece {
                case .broadcast(let frame):
                    previous = frame.seq
                    accept(frame, into: &parts, state: &state)
                case .item(let shard, let item):
                    let bound = nextSeqs[index].map { max($0, 1) - 1 } ?? previous ?? state.highestAccepted
                    if state.deferred.isEmpty, bound < state.orderer.next {
                        parts[shard].append(item)
                    } else {
                        state.deferred.append((max(bound, state.deferred.last?.after ?? 0), shard, item))
                    }
                }
            }
            // Posted under the lock, so every loop receives broadcasts in seq order.
            for (index, part) in parts.enumerated() where !part.isEmpty { orderedShards[index].post(part) }
        }
    }

    /// Puts a broadcast in seq order; what it releases (with the deliveries that waited for
    /// it) joins each loop's part. When a seq arrives twice, the copy that has an origin (the
    /// requester's `re` copy) wins.
    private func accept(_ frame: PendingBroadcast, into parts: inout [[ShardInboxItem]], state: inout HubOrderState) {
        state.highestAccepted = max(state.highestAccepted, frame.seq)
        let released = state.orderer.accept(
            seq: frame.seq,
            frame,
            replaces: { held in frame.origin != nil || held.origin == nil }
        )
        guard !released.isEmpty else { return }
        state.released += released.count
        handOut(released, into: &parts, state: &state)
    }

    /// Appends released broadcasts to every loop's part, each preceded by the deliveries that
    /// waited for the seqs below it, then those that waited for the last of them. (Each loop's
    /// shard decides whether it takes them, and makes their frames.) `deferred` is in order of
    /// arrival with rising `after`s, so it is taken from its front.
    private func handOut(
        _ released: [PendingBroadcast],
        into parts: inout [[ShardInboxItem]],
        state: inout HubOrderState
    ) {
        var taken = 0
        let deferred = state.deferred
        for frame in released {
            while taken < deferred.count, deferred[taken].after < frame.seq {
                parts[deferred[taken].shard].append(deferred[taken].item)
                taken += 1
            }
            for index in parts.indices { parts[index].append(.broadcast(frame)) }
        }
        while taken < deferred.count, deferred[taken].after < state.orderer.next {
            parts[deferred[taken].shard].append(deferred[taken].item)
            taken += 1
        }
        if taken > 0 { state.deferred.removeFirst(taken) }
    }

    /// Publishes broadcasts read from the journal (another daemon's, sharing the database) as
    /// if they had been made here: the journal holds each one's type and payload byte for byte,
    /// so every client gets the same frame as the other daemon's clients. They merge with local
    /// broadcasts in seq order; a seq already handed over is dropped.
    public func publishJournal(_ entries: [JournalEntry]) {
        var work: [HubWork] = []
        for entry in entries {
            guard let typeIndex = codec.catalog.index(of: entry.type) else { continue }
            work.append(
                .broadcast(
                    PendingBroadcast(
                        seq: entry.seq,
                        typeIndex: typeIndex,
                        type: entry.type,
                        mark: entry.mid.map { MutationMark(mid: $0) },
                        body: .payload(entry.payload),
                        origin: nil,
                        correlation: nil
                    )
                )
            )
        }
        hand(work)
    }

    /// The stream could not be followed through `seq` (another daemon's broadcasts were pruned
    /// from the shared journal before this daemon read them): every seq up to it is given up,
    /// every client is told `gap` with that seq (it refetches, as after a resume that found a
    /// gap), and broadcasts after it flow on in order.
    public func resynchronize(through seq: UInt64) {
        let skipped = order.withLockedValue { state -> Bool in
            guard seq >= state.orderer.next else { return false }
            var parts = Array(repeating: [ShardInboxItem](), count: orderedShards.count)
            let released = state.orderer.skip(through: seq)
            state.highestAccepted = max(state.highestAccepted, seq)
            state.released += released.count
            for index in parts.indices { parts[index].append(.gap(seq)) }
            handOut(released, into: &parts, state: &state)
            for (index, part) in parts.enumerated() { orderedShards[index].post(part) }
            return true
        }
        if skipped { metrics.resynchronized() }
    }

    /// Sends every session a control frame (used for `draining`).
    func sendToAll(_ make: @escaping @Sendable () -> ByteBuffer) {
        for shard in orderedShards {
            shard.post([
                .run {
                    for session in shard.sessions.values { session.deliverControl(make()) }
                }
            ])
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
