import EventStream
import TodoApp

/// A store as the daemon serves it: the app's store, the journal clients resume from, a health
/// flag for `/healthz`, and, for engines shared by several daemons, a feed of the broadcasts
/// that other daemons committed.
///
/// A store starts nothing in the background by itself. What must run while it serves (for
/// PostgreSQL the connection pool and the journal follower) runs inside `runConnections()` and
/// `follow(after:publish:resynchronized:)`, each until its task is cancelled, so that whoever
/// calls them (the daemon's service group) owns their lifetime.
public protocol ServedStore: TodoStore, JournalReader {
    /// Whether storage answers right now (the last commit succeeded; for PostgreSQL also that
    /// the journal follower is connected).
    var isHealthy: Bool { get async }

    /// The health last seen, without looking again (no probe write): for the watchdog's and
    /// `/metrics`' looks, which must not use up the probe `/healthz` makes (at most one a
    /// second), so that `/healthz` says 200 as soon as storage takes writes again.
    var lastSeenHealthy: Bool { get async }

    /// Commit latency (one observation per group commit).
    var commitLatency: LatencyHistogram { get async }

    /// The journal's position as the store found it when it opened, known without
    /// `runConnections()` running: where the daemon starts its order from.
    func startingPosition() async throws -> JournalPosition

    /// Keeps the store's database connections working (PostgreSQL's pool) until the task is
    /// cancelled; reads and commits wait for it to run. Returns at once for an engine that needs
    /// nothing running, and when called a second time.
    func runConnections() async

    /// Hands every journal entry after `after` that this process did not write itself to
    /// `publish`, in seq order, until the task is cancelled. When the journal no longer holds
    /// entries the follower has not read yet (pruned while it was behind), it calls
    /// `resynchronized` with the last seq it gives up on and goes on after it. Returns at once
    /// for an engine that only this process writes, after `close()`, and when already following.
    func follow(
        after: UInt64,
        publish: @escaping @Sendable ([JournalEntry]) -> Void,
        resynchronized: @escaping @Sendable (UInt64) -> Void
    ) async

    /// Answers what is under way, then refuses everything. Called once, after the follower has
    /// stopped and before the connections stop.
    func close() async
}

extension GroupCommitStore: ServedStore {
    /// Nothing else writes a SQLite or in-memory store: the position now is the one at opening.
    public func startingPosition() async throws -> JournalPosition {
        try await position()
    }

    /// The backend's connections need nothing running beside them.
    public func runConnections() async {}

    /// One process owns a SQLite or in-memory store: every broadcast is already local.
    public func follow(
        after: UInt64,
        publish: @escaping @Sendable ([JournalEntry]) -> Void,
        resynchronized: @escaping @Sendable (UInt64) -> Void
    ) async {}
}
