/// The client's connection life: connect, greeting, authentication, resume, ready, lost,
/// backoff (or the daemon's `draining` hint), reconnect. Pure: the owner feeds it what
/// happened and executes the action it returns.
struct ConnectionStateMachine: Sendable {
    enum State: Sendable, Hashable {
        case idle
        case connecting(attempt: Int)
        /// Connected; waiting for `hello`.
        case greeting(attempt: Int)
        /// `auth` sent; waiting for `authenticated`.
        case authenticating(attempt: Int)
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
        /// Ready to carry requests; `reset` is the seq of a gap the caller must refetch from.
        case ready(resumed: Bool, reset: UInt64?)
        /// Wait this long, then call `waited()`.
        case wait(Duration)
        /// Fail what waits on the connection and stop.
        case stop
    }

    private(set) var state: State = .idle
    /// Where the stream stands: the journal's epoch and the newest seq seen.
    private(set) var epoch: String?
    private(set) var lastSeq: UInt64?
    private var reconnectHint: Duration?
    let backoff: Backoff
    let authenticates: Bool

    init(backoff: Backoff, authenticates: Bool) {
        self.backoff = backoff
        self.authenticates = authenticates
    }

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

    /// The greeting's position, kept until authentication is done.
    private var greetedAt: Position?

    struct Position: Sendable, Hashable {
        let epoch: String
        let seq: UInt64
    }

    mutating func hello(epoch newEpoch: String, seq: UInt64) -> Action {
        guard case .greeting(let attempt) = state else { return .none }
        if authenticates {
            greetedAt = Position(epoch: newEpoch, seq: seq)
            state = .authenticating(attempt: attempt)
            return .sendAuth
        }
        return afterGreeting(attempt: attempt, epoch: newEpoch, seq: seq)
    }

    mutating func authenticated() -> Action {
        guard case .authenticating(let attempt) = state, let greetedAt else { return .none }
        return afterGreeting(attempt: attempt, epoch: greetedAt.epoch, seq: greetedAt.seq)
    }

    private mutating func afterGreeting(attempt: Int, epoch newEpoch: String, seq: UInt64) -> Action {
        guard let epoch, let lastSeq else {
            // The first connection: the stream starts here.
            self.epoch = newEpoch
            self.lastSeq = seq
            state = .ready
            return .ready(resumed: false, reset: nil)
        }
        state = .resuming(attempt: attempt)
        resumeAfter = lastSeq
        highestSeen = nil
        return .sendResume(epoch: epoch, after: lastSeq)
    }

    /// While resuming: the seq the resume started after, and the newest seq seen since.
    private var resumeAfter: UInt64 = 0
    private var highestSeen: UInt64?

    /// A broadcast with `seq` arrived. Returns false for one already seen (not to be passed
    /// on again).
    ///
    /// While a resume runs, a live broadcast may come before the replay (after `auth`, the
    /// daemon's start hold is over): every seq after the resume point is passed on, but the
    /// position only moves through the replay's unbroken run, so that a connection lost
    /// mid-replay resumes where the run stopped.
    mutating func broadcast(seq: UInt64) -> Bool {
        if case .resuming = state {
            guard seq > resumeAfter, seq > lastSeq ?? 0 else { return false }
            if let lastSeq, seq == lastSeq + 1 { self.lastSeq = seq }
            highestSeen = max(highestSeen ?? seq, seq)
            return true
        }
        if let lastSeq, seq <= lastSeq { return false }
        lastSeq = seq
        return true
    }

    mutating func resumed() -> Action {
        guard case .resuming = state else { return .none }
        if let highestSeen, highestSeen > lastSeq ?? 0 { lastSeq = highestSeen }
        highestSeen = nil
        state = .ready
        return .ready(resumed: true, reset: nil)
    }

    /// `gap`: broadcasts up to `seq` of `epoch` are lost to this client. As an answer to
    /// `resume` the connection becomes ready; on a live connection it only moves the position.
    mutating func gap(epoch newEpoch: String, seq: UInt64) -> Action {
        epoch = newEpoch
        lastSeq = seq
        switch state {
        case .resuming:
            state = .ready
            return .ready(resumed: true, reset: seq)
        case .ready:
            return .ready(resumed: true, reset: seq)
        default:
            return .none
        }
    }

    /// `{"op":"draining","reconnect_after_ms":N}`: the next reconnect waits N ms.
    mutating func draining(reconnectAfterMilliseconds milliseconds: Int) {
        reconnectHint = .milliseconds(max(0, milliseconds))
    }

    /// The connection failed or closed; `random` in 0..<1 jitters the backoff.
    mutating func disconnected(random: Double) -> Action {
        let attempt: Int
        switch state {
        case .idle, .closed, .waiting: return .none
        case .ready: attempt = 0
        case .connecting(let value), .greeting(let value), .authenticating(let value), .resuming(let value):
            attempt = value
        }
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
        return .stop
    }

    var isReady: Bool { state == .ready }
    var isClosed: Bool { state == .closed }
}
