/// The client's connection life: connect, greeting, authentication, resume, ready, lost,
/// backoff (or the daemon's `draining` hint), reconnect; and where the stream stands. Pure: the
/// owner feeds it what happened and executes the action it returns.
///
/// Broadcasts pass through it (`Payload` is what the owner passes on with each), so that each
/// seq is passed on at most once and in order, across reconnects too. The position is the
/// newest seq up to which every broadcast was passed on (or given up with a reset); a resume
/// starts after it. Until a resume is answered, a broadcast further on than the one after the
/// position is held (a live one can come before the replay, which then skips it: protocol §5),
/// and passed on once the broadcasts before it are; what is still held when the resume is
/// answered goes then. A connection lost meanwhile drops what it held: the next resume replays
/// it. Held broadcasts are bounded by `holdCapacity`; past it the held ones are given up like a
/// gap (the caller refetches).
struct ConnectionStateMachine<Payload: Sendable & Hashable>: Sendable {
    /// A point of the stream: the journal's epoch and a seq in it.
    struct Position: Sendable, Hashable {
        var epoch: String
        var seq: UInt64
    }

    struct Broadcast: Sendable, Hashable {
        let seq: UInt64
        let payload: Payload
    }

    enum State: Sendable, Hashable {
        case idle
        case connecting(attempt: Int)
        /// Connected; waiting for `hello`.
        case greeting(attempt: Int)
        /// `auth` sent; waiting for `authenticated`. `greeting` is where the greeting put the
        /// stream, moved on by the broadcasts passed on meanwhile: the position, on a first
        /// connection (there is nothing to resume).
        case authenticating(attempt: Int, greeting: Position)
        /// `resume` sent; waiting for `resumed` or `gap`.
        case resuming(attempt: Int)
        case ready
        case waiting(attempt: Int)
        case closed
    }

    enum Action: Sendable, Hashable {
        case none
        case connect
        case sendAuth
        case sendResume(epoch: String, after: UInt64)
        /// Ready to carry requests. First `reset` (the seq of a gap the caller must refetch
        /// from), then `deliver` (broadcasts to pass on, in seq order), then the connection is
        /// ready.
        case ready(resumed: Bool, reset: UInt64?, deliver: [Broadcast])
        /// Pass on `deliver`, in this order; after a reset first when `reset` is set.
        case deliver(reset: UInt64?, [Broadcast])
        /// Wait this long, then call `waited()`.
        case wait(Duration)
        /// Fail what waits on the connection and stop.
        case stop
    }

    private(set) var state: State = .idle
    /// Where the stream stands: nil until a first connection is ready.
    private(set) var position: Position?
    /// Broadcasts received before the ones they follow, while a resume is pending.
    private var held: [UInt64: Payload] = [:]
    private var reconnectHint: Duration?
    let backoff: Backoff
    let authenticates: Bool
    let holdCapacity: Int

    init(backoff: Backoff, authenticates: Bool, holdCapacity: Int = 4096) {
        self.backoff = backoff
        self.authenticates = authenticates
        self.holdCapacity = max(1, holdCapacity)
    }

    var epoch: String? { position?.epoch }
    var lastSeq: UInt64? { position?.seq }
    /// How many broadcasts are held.
    var heldCount: Int { held.count }

    mutating func start() -> Action {
        guard case .idle = state else { return .none }
        state = .connecting(attempt: 0)
        return .connect
    }

    mutating func connected() -> Action {
        guard case .connecting(let attempt) = state else { return .none }
        state = .greeting(attempt: attempt)
        return .none
    }

    mutating func hello(epoch: String, seq: UInt64) -> Action {
        guard case .greeting(let attempt) = state else { return .none }
        let greeting = Position(epoch: epoch, seq: seq)
        if authenticates {
            state = .authenticating(attempt: attempt, greeting: greeting)
            return .sendAuth
        }
        return afterGreeting(attempt: attempt, greeting: greeting)
    }

    mutating func authenticated() -> Action {
        guard case .authenticating(let attempt, let greeting) = state else { return .none }
        return afterGreeting(attempt: attempt, greeting: greeting)
    }

    private mutating func afterGreeting(attempt: Int, greeting: Position) -> Action {
        guard let position else {
            // The first connection: the stream starts here.
            self.position = greeting
            state = .ready
            return .ready(resumed: false, reset: nil, deliver: [])
        }
        state = .resuming(attempt: attempt)
        return .sendResume(epoch: position.epoch, after: position.seq)
    }

    /// A broadcast with `seq` arrived: what to pass on (nothing for one passed on already, or
    /// one held until those before it come).
    mutating func broadcast(seq: UInt64, payload: Payload) -> Action {
        switch state {
        case .ready:
            guard let position, seq > position.seq else { return .none }
            self.position?.seq = seq
            return .deliver(reset: nil, [Broadcast(seq: seq, payload: payload)])
        case .authenticating(let attempt, var greeting) where position == nil:
            guard seq > greeting.seq else { return .none }
            greeting.seq = seq
            state = .authenticating(attempt: attempt, greeting: greeting)
            return .deliver(reset: nil, [Broadcast(seq: seq, payload: payload)])
        case .authenticating, .resuming:
            guard let position, seq > position.seq, held[seq] == nil else { return .none }
            if seq == position.seq + 1 { return .deliver(reset: nil, run(from: Broadcast(seq: seq, payload: payload))) }
            guard held.count < holdCapacity else {
                // No room to hold it: give up everything up to the newest seen, like a gap.
                return lost(epoch: position.epoch, through: max(seq, held.keys.max() ?? seq))
            }
            held[seq] = payload
            return .none
        case .idle, .connecting, .greeting, .waiting, .closed:
            return .none
        }
    }

    /// `first`, the broadcast right after the position, and the held ones that follow it
    /// without a break; the position moves to the last of them.
    private mutating func run(from first: Broadcast) -> [Broadcast] {
        var run = [first]
        var next = first.seq + 1
        while let payload = held.removeValue(forKey: next) {
            run.append(Broadcast(seq: next, payload: payload))
            next += 1
        }
        position?.seq = next - 1
        return run
    }

    /// Broadcasts up to `seq` of `epoch` will not be passed on: the caller refetches, and the
    /// held ones after `seq` follow.
    private mutating func lost(epoch: String, through seq: UInt64) -> Action {
        let newSeq = position.map { $0.epoch == epoch ? max($0.seq, seq) : seq } ?? seq
        position = Position(epoch: epoch, seq: newSeq)
        held = held.filter { $0.key > newSeq }
        var deliver: [Broadcast] = []
        if let payload = held.removeValue(forKey: newSeq + 1) {
            deliver = run(from: Broadcast(seq: newSeq + 1, payload: payload))
        }
        return .deliver(reset: newSeq, deliver)
    }

    /// Everything held, in seq order (the resume is answered: nothing before them is coming).
    private mutating func releaseHeld() -> [Broadcast] {
        let released = held.sorted { $0.key < $1.key }.map { Broadcast(seq: $0.key, payload: $0.value) }
        held.removeAll()
        if let last = released.last, let seq = position?.seq, last.seq > seq { position?.seq = last.seq }
        return released
    }

    mutating func resumed() -> Action {
        guard case .resuming = state else { return .none }
        state = .ready
        return .ready(resumed: true, reset: nil, deliver: releaseHeld())
    }

    /// `gap`: broadcasts up to `seq` of `epoch` are lost to this client. As the answer to
    /// `resume` (`answersResume`) the connection becomes ready, after a reset. A live one (the
    /// daemon's loop skipped broadcasts it cannot have, with several daemons sharing the
    /// database) is a reset, nothing more: the connection stays as it is, and what was sent on
    /// it is still in flight. On a first connection still authenticating it moves the position
    /// the stream starts at: `connected(resumed: false)` tells the caller to fetch the list.
    mutating func gap(epoch: String, seq: UInt64, answersResume: Bool) -> Action {
        switch state {
        case .resuming where answersResume:
            guard case .deliver(let reset, var deliver) = lost(epoch: epoch, through: seq) else { return .none }
            state = .ready
            deliver += releaseHeld()
            return .ready(resumed: true, reset: reset, deliver: deliver)
        case .authenticating(let attempt, let greeting) where position == nil:
            let seq = greeting.epoch == epoch ? max(greeting.seq, seq) : seq
            state = .authenticating(attempt: attempt, greeting: Position(epoch: epoch, seq: seq))
            return .none
        case .ready, .resuming, .authenticating:
            return lost(epoch: epoch, through: seq)
        case .idle, .connecting, .greeting, .waiting, .closed:
            return .none
        }
    }

    /// A broadcast could not be read (over the frame limit): it is given up like a gap at
    /// its `seq`, or, not knowing it, the caller refetches from the position.
    mutating func unreadable(seq: UInt64?) -> Action {
        switch state {
        case .authenticating(let attempt, var greeting) where position == nil:
            greeting.seq = max(greeting.seq, seq ?? 0)
            state = .authenticating(attempt: attempt, greeting: greeting)
            return .none
        case .ready, .resuming, .authenticating:
            guard let position else { return .none }
            guard let seq else { return .deliver(reset: position.seq, []) }
            return lost(epoch: position.epoch, through: seq)
        case .idle, .connecting, .greeting, .waiting, .closed:
            return .none
        }
    }

    /// The stream cannot be resumed where it stands (a broadcast that was never read would
    /// be replayed again): the next connection starts a new one.
    mutating func forgetPosition() {
        position = nil
        held.removeAll()
    }

    /// `{"op":"draining","reconnect_after_ms":N}`: the next reconnect waits N ms.
    mutating func draining(reconnectAfterMilliseconds milliseconds: Int) {
        reconnectHint = .milliseconds(max(0, milliseconds))
    }

    /// The connection failed or closed; `random` in 0..<1 jitters the backoff. What was held
    /// is dropped: the next resume replays it.
    mutating func disconnected(random: Double) -> Action {
        let attempt: Int
        switch state {
        case .idle, .closed, .waiting: return .none
        case .ready: attempt = 0
        case .connecting(let value), .greeting(let value), .authenticating(let value, _), .resuming(let value):
            attempt = value
        }
        held.removeAll()
        let delay = reconnectHint ?? backoff.delay(attempt: attempt, random: random)
        reconnectHint = nil
        state = .waiting(attempt: attempt + 1)
        return .wait(delay)
    }

    mutating func waited() -> Action {
        guard case .waiting(let attempt) = state else { return .none }
        state = .connecting(attempt: attempt)
        return .connect
    }

    mutating func close() -> Action {
        if case .closed = state { return .none }
        state = .closed
        held.removeAll()
        return .stop
    }

    var isReady: Bool { state == .ready }
    var isClosed: Bool { state == .closed }
}
