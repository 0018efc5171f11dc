import EventStream
import NIOConcurrencyHelpers
import NIOCore

// The types a shard's pass makes lists of live outside the generic `Shard`: nested in it, each
// would be a generic type, and every list of them would look up its type's metadata at run
// time, once per pass on every loop (Relay is compiled without knowing the codec).

/// A frame for one session among a run of broadcasts (a reply, or a monitor's copy): `after` is
/// how many of the run's broadcasts come before it.
struct ShardPersonalFrame {
    let after: Int
    let session: SessionID
    let bytes: ByteBuffer
    let typeIndex: Int
    /// The broadcast's seq when the frame is a broadcast (a session's own copy).
    var seq: UInt64? = nil
    /// The rest of the frame when `bytes` is only its head (a large list answer, whose rows
    /// are shared by every answer of the same list: `SharedListBody`).
    var rest: [ByteBuffer] = []
}

/// What one session of a run gets besides what every subscriber gets, in order.
enum ShardOwnFrame {
    /// `personal[index]`.
    case personal(Int)
    /// `frames[index]`, which this session caused: its copy with `re`.
    case caused(Int)
}

/// The sessions of one event loop. Invariant: every stored property is read and written only
/// on `loop`, which is why it may be shared across threads.
final class Shard<Codec: EventCodec>: @unchecked Sendable {
    /// The place of this loop in the hub's list.
    let index: Int
    let epoch: String
    let loop: any EventLoop
    /// What the hub posted for this loop and the loop has not taken yet (the one property
    /// touched off the loop, under its lock). Bounded: the loop empties it on its next turn,
    /// and what is in it was committed already.
    private let inbox: NIOLockedValueBox<ShardInboxStateMachine>

    /// Sessions written to during the current pass over the inbox, flushed once at its end.
    private var touched: [SessionHandler<Codec>] = []
    var sessions: [SessionID: SessionHandler<Codec>] = [:]
    private var byType: [[SessionID: SessionHandler<Codec>]]
    private var monitorsByType: [[SessionID: SessionHandler<Codec>]]
    /// Every session subscribed to something, with what it is subscribed to.
    private var subscribed: [SessionID: (session: SessionHandler<Codec>, types: TypeSet)] = [:]
    /// Counts fan-outs; a session whose `ownFramesPass` equals it gets its frames of the
    /// current run one by one, in order, and is left out of the shared run.
    private var pass: UInt64 = 0
    /// The newest broadcast fanned out on this loop.
    private var lastSeq: UInt64
    /// Frames written on this loop, by type index.
    var framesOut: [Int]
    /// Frames received on this loop, and the events they published by type index.
    var framesIn = 0
    var requestsIn: [Int]
    private(set) var fanOutLatency = LatencyHistogram()
    /// The last large list answered on this loop, joined once for every answer of it.
    private var listBodies = SharedListBody()

    init(index: Int, loop: any EventLoop, epoch: String, typeCount: Int, head: UInt64) {
        self.index = index
        self.epoch = epoch
        self.loop = loop
        self.byType = Array(repeating: [:], count: typeCount)
        self.monitorsByType = Array(repeating: [:], count: typeCount)
        self.framesOut = Array(repeating: 0, count: typeCount)
        self.requestsIn = Array(repeating: 0, count: typeCount)
        self.lastSeq = head
        self.inbox = NIOLockedValueBox(ShardInboxStateMachine(head: head))
    }

    /// The newest seq this loop has fanned out, or left out while no session here listened.
    var head: UInt64 {
        let lastSeq = self.lastSeq
        return inbox.withLockedValue { $0.head(fannedOut: lastSeq) }
    }

    /// Adds a session; returns the seq it starts after. Until `settled`, broadcasts are kept
    /// for the loop (the session is about to subscribe).
    func register(_ session: SessionHandler<Codec>) -> UInt64 {
        sessions[session.id] = session
        let lastSeq = self.lastSeq
        return inbox.withLockedValue { $0.register(fannedOut: lastSeq) }
    }

    /// A session registered earlier has its first subscriptions.
    func settled() {
        inbox.withLockedValue { $0.settled() }
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
        let (was, now) = (subscribed[session.id] != nil, !new.isEmpty)
        subscribed[session.id] = now ? (session, new) : nil
        if was != now { inbox.withLockedValue { $0.subscriptionChanged(was: was, now: now) } }
    }

    func remove(_ session: SessionHandler<Codec>) {
        sessions[session.id] = nil
        if subscribed.removeValue(forKey: session.id) != nil {
            inbox.withLockedValue { $0.subscriptionChanged(was: true, now: false) }
        }
        for index in byType.indices {
            byType[index][session.id] = nil
            monitorsByType[index][session.id] = nil
        }
    }

    /// Appends a batch's items to the inbox (from any thread; callers keep their order). The
    /// loop makes their frames when it takes them (`emptyInbox`).
    func post(_ items: [ShardInboxItem]) {
        let index = self.index
        if case .schedule = inbox.withLockedValue({ $0.post(items, shard: index) }) {
            loop.execute { self.emptyInbox() }
        }
    }

    /// Fans out each run of broadcasts, with the replies and monitors' copies among them, in
    /// one pass; `gap` and control frames, which go to everyone, end a run. Every connection
    /// written to is flushed once (in the last run as soon as it is written, see `fanOut`), and
    /// only then are sessions told which requests are answered (they may go on with frames
    /// held back).
    private func emptyInbox() {
        let items = inbox.withLockedValue { $0.take() }
        var run: [BroadcastFrame] = []
        var personal: [ShardPersonalFrame] = []
        var answered: [SessionID] = []
        for item in items {
            switch item {
            case .broadcast(let pending):
                run.append(pending.frames(on: index))
            case .ownCopy(let pending):
                lastSeq = max(lastSeq, pending.seq)
                if let origin = pending.origin {
                    personal.append(
                        ShardPersonalFrame(
                            after: run.count,
                            session: origin,
                            bytes: pending.originCopy(),
                            typeIndex: pending.typeIndex,
                            seq: pending.seq
                        )
                    )
                }
            case .reply(let id, let reply, let typeIndex):
                let (head, rest) = listBodies.frame(of: reply)
                personal.append(
                    ShardPersonalFrame(after: run.count, session: id, bytes: head, typeIndex: typeIndex, rest: rest)
                )
            case .monitor(let frame, let typeIndex, let except):
                for id in monitorsByType[typeIndex].keys where id != except {
                    personal.append(
                        ShardPersonalFrame(after: run.count, session: id, bytes: frame, typeIndex: typeIndex)
                    )
                }
            case .answered(let id):
                answered.append(id)
            case .gap(let seq):
                fanOut(run, personal, flushingAtOnce: false)
                (run, personal) = ([], [])
                lastSeq = max(lastSeq, seq)
                let frame = OutboundFrame.op("gap", correlation: nil) { writer in
                    writer.field("epoch", epoch)
                    writer.field("seq", seq)
                }
                for session in sessions.values { session.deliverControl(frame) }
            case .run(let body):
                fanOut(run, personal, flushingAtOnce: false)
                (run, personal) = ([], [])
                body()
            }
        }
        fanOut(run, personal, flushingAtOnce: true)
        let flushing = touched
        touched = []
        for session in flushing { session.flushPending() }
        // Each session learns at once how many of its requests were answered (what their
        // replies brought is shared among them).
        var counts: [SessionID: Int] = [:]
        counts.reserveCapacity(answered.count)
        for id in answered { counts[id, default: 0] += 1 }
        for id in answered {
            guard let count = counts.removeValue(forKey: id) else { continue }
            sessions[id]?.requestsAnswered(count)
        }
    }

    /// Writes a run of broadcasts and the personal frames among them. Every subscriber that
    /// has no frame of its own in the run gets the broadcasts joined in one buffer, shared
    /// with every other such subscriber. A session with a reply, a monitor's
    /// copy or a broadcast it caused (its copy with `re`) gets its frames one by one, each in
    /// its place.
    ///
    /// With `flushingAtOnce` (the last run of a drain), each session is flushed right after it
    /// is written (with the write itself, where its run is one buffer), not in a second pass
    /// over every session written to: a connection's state is then read while it is still in
    /// cache, and each flush comes earlier. A session that
    /// was written in an earlier run of the same drain still waits for the drain's flush.
    func fanOut(_ frames: [BroadcastFrame], _ personal: [ShardPersonalFrame], flushingAtOnce: Bool) {
        if frames.isEmpty, personal.isEmpty { return }
        pass &+= 1
        // What each session with frames of its own gets, in order.
        var own: [SessionID: [ShardOwnFrame]] = [:]
        var next = 0
        for (index, frame) in frames.enumerated() {
            while next < personal.count, personal[next].after <= index {
                own[personal[next].session, default: []].append(.personal(next))
                next += 1
            }
            if let origin = frame.origin { own[origin, default: []].append(.caused(index)) }
        }
        while next < personal.count {
            own[personal[next].session, default: []].append(.personal(next))
            next += 1
        }
        var ownSessions: [(SessionHandler<Codec>, [ShardOwnFrame])] = []
        ownSessions.reserveCapacity(own.count)
        for (id, list) in own {
            guard let session = sessions[id] else { continue }
            session.ownFramesPass = pass
            ownSessions.append((session, list))
        }
        // Sessions with frames of their own (requesters waiting for replies) are written, and
        // so flushed, before the many that share the run.
        for (session, list) in ownSessions {
            writeOwn(list, to: session, frames, personal, flushingAtOnce: flushingAtOnce)
        }
        if let first = frames.first, let last = frames.last {
            lastSeq = max(lastSeq, last.seq)
            if frames.allSatisfy({ $0.typeIndex == first.typeIndex }) {
                framesOut[first.typeIndex] += shareRun(
                    frames,
                    with: byType[first.typeIndex].values,
                    flushingAtOnce: flushingAtOnce
                )
            } else {
                // Broadcasts of several types in one run (not made by the todo app, whose
                // broadcasts are all of one type): each subscriber gets its own, one by one.
                var runTypes = TypeSet()
                for frame in frames { runTypes.insert(frame.typeIndex) }
                for (session, types) in subscribed.values where session.ownFramesPass != pass {
                    guard types.bits & runTypes.bits != 0 else { continue }
                    writeOwn([], to: session, frames, personal, flushingAtOnce: flushingAtOnce)
                }
            }
        }
        if !frames.isEmpty { recordLatency(frames) }
    }

    /// Writes `frames`, joined, to each of `subscribers` but those with frames of their own;
    /// returns how many frames were written.
    private func shareRun(
        _ frames: [BroadcastFrame],
        with subscribers: Dictionary<SessionID, SessionHandler<Codec>>.Values,
        flushingAtOnce: Bool
    ) -> Int {
        var written = 0
        // Joined, and framed for WebSocket, once, when the first session that takes it is
        // reached (a run that only its requesters get is never joined).
        var joined: ByteBuffer?
        var webSocketRun: ByteBuffer?
        for session in subscribers where session.ownFramesPass != pass {
            written += frames.count
            if session.takesWebSocketRuns, webSocketRun == nil {
                webSocketRun = WebSocketFraming.textFrames(frames.map(\.plain))
            }
            let run = joined ?? Self.joined(frames)
            joined = run
            if session.enqueueBroadcastRun(run, webSocketRun: webSocketRun, frames: frames, flushing: flushingAtOnce) {
                settle(session, flushingAtOnce: flushingAtOnce)
            }
        }
        return written
    }

    /// Writes one session's frames of a run in order: the broadcasts it subscribes to, its
    /// copies of those it caused, and its replies and monitor's copies, each in its place.
    private func writeOwn(
        _ list: [ShardOwnFrame],
        to session: SessionHandler<Codec>,
        _ frames: [BroadcastFrame],
        _ personal: [ShardPersonalFrame],
        flushingAtOnce: Bool
    ) {
        let types = subscribed[session.id]?.types ?? TypeSet()
        var pending = false
        var shared = 0
        func writeShared(upTo end: Int) {
            guard shared < end else { return }
            for frame in frames[shared..<end] where types.contains(frame.typeIndex) {
                framesOut[frame.typeIndex] += 1
                if session.enqueueBroadcast(frame.plain, seq: frame.seq) { pending = true }
            }
            shared = end
        }
        for item in list {
            switch item {
            case .personal(let index):
                let frame = personal[index]
                writeShared(upTo: frame.after)
                framesOut[frame.typeIndex] += 1
                if let seq = frame.seq {
                    if session.enqueueOwnBroadcast(frame.bytes, seq: seq, typeIndex: frame.typeIndex) { pending = true }
                } else if session.enqueueReply(frame.bytes, rest: frame.rest) {
                    pending = true
                }
            case .caused(let index):
                writeShared(upTo: index)
                let frame = frames[index]
                framesOut[frame.typeIndex] += 1
                if session.enqueueOwnBroadcast(frame.originCopy, seq: frame.seq, typeIndex: frame.typeIndex) {
                    pending = true
                }
                shared = index + 1
            }
        }
        writeShared(upTo: frames.count)
        if pending { settle(session, flushingAtOnce: flushingAtOnce) }
    }

    /// A session has frames of this pass to flush: at once, or with the drain's others.
    private func settle(_ session: SessionHandler<Codec>, flushingAtOnce: Bool) {
        if flushingAtOnce {
            session.flushPending()
        } else {
            touched.append(session)
        }
    }

    /// The frames' bytes in one buffer (the frame's own buffer when there is one).
    private static func joined(_ frames: [BroadcastFrame]) -> ByteBuffer {
        if frames.count == 1, let only = frames.first { return only.plain }
        var run = ByteBuffer()
        run.reserveCapacity(frames.reduce(0) { $0 + $1.plain.readableBytes })
        for frame in frames { run.writeImmutableBuffer(frame.plain) }
        return run
    }

    /// One fan-out latency observation per broadcast, once this loop has written it.
    private func recordLatency(_ frames: [BroadcastFrame]) {
        let now = NIODeadline.now()
        for frame in frames {
            fanOutLatency.record(nanoseconds: UInt64(max(0, (now - frame.receivedAt).nanoseconds)))
        }
    }
}
