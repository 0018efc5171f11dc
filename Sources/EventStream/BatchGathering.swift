/// Whether the sequencer runs the requests it has taken at once or waits a moment for more,
/// as values: `Sequencer` tells it each batch it ran and asks it before the next. It does no
/// I/O and keeps no clock (the caller passes the time).
///
/// Clients that each wait for their answer before they send again split into groups that take
/// turns: the requests that come back while a batch commits make the next batch, the others
/// come back during that one's commit, and so on. Every batch then pays a commit for a part of
/// the clients, which costs CPU per request where it is short (several daemons on one
/// PostgreSQL on a shared machine). So the next batch waits, at most `maxWait` and at most
/// half the last batch's run time, until it holds a request from as many sessions as the last
/// two batches did together: the groups merge into one. A session that stops sending drops out
/// of that count two batches later; one client alone (one session) never waits.
///
/// It gathers only while `shared` says so (with PostgreSQL: while other daemons commit too, so
/// that commits take turns at the database's one ordering lock). With one daemon alone the
/// turns pay: one group's round trip to its clients overlaps the other group's commit, and a
/// merged batch would give that up.
///
/// `maxWait` zero: never wait.
public struct BatchGathering: Sendable, Hashable {
    public enum Action: Sendable, Hashable {
        /// Run what was taken.
        case run
        /// Wait until `want` requests are queued in all (those taken included), or `until`.
        case wait(want: Int, until: ContinuousClock.Instant)
    }

    public let maxWait: Duration
    let maxBatch: Int
    /// The sessions of the last batch, and how many sessions the last two had together.
    private var last: Set<SessionID> = []
    private var active = 0
    /// How long the last batch took to run (its commit included).
    private var lastRun: Duration = .zero

    public init(maxWait: Duration, maxBatch: Int) {
        self.maxWait = max(.zero, maxWait)
        self.maxBatch = max(1, maxBatch)
    }

    /// A batch with requests from `sessions` ran in `duration`.
    public mutating func ran(sessions: Set<SessionID>, duration: Duration) {
        active = last.union(sessions).count
        last = sessions
        lastRun = duration
    }

    /// What to do with the `count` requests just taken, at `now`.
    public func decide(count: Int, now: ContinuousClock.Instant, shared: Bool = true) -> Action {
        guard maxWait > .zero, shared, count < maxBatch else { return .run }
        let want = min(maxBatch, active)
        guard count < want else { return .run }
        let wait = min(maxWait, lastRun / 2)
        guard wait > .zero else { return .run }
        return .wait(want: want, until: now + wait)
    }
}
