import EventStream
import TodoApp

/// A store as the daemon serves it: the app's store, the journal clients resume from, a health
/// flag for `/healthz`, and, for engines shared by several daemons, a feed of the broadcasts
/// that other daemons committed.
public protocol ServedStore: TodoStore, JournalReader {
    /// Whether storage answers right now (the last commit succeeded; for PostgreSQL also that
    /// the journal follower is connected).
    var isHealthy: Bool { get async }

    /// Commit latency (one observation per group commit), and the writes waiting for the
    /// next commit.
    var metrics: (commitLatency: LatencyHistogram, pendingWrites: Int) { get async }

    /// Starts handing every journal entry after `after` that this process did not write itself
    /// to `publish`, in seq order. When the journal no longer holds entries the follower has not
    /// read yet (pruned while it was behind), it calls `resynchronized` with the last seq it gives
    /// up on and goes on after it. Does nothing for an engine that only this process writes.
    func follow(
        after: UInt64,
        publish: @escaping @Sendable ([JournalEntry]) -> Void,
        resynchronized: @escaping @Sendable (UInt64) -> Void
    ) async

    func close() async
}

extension GroupCommitStore: ServedStore {
    /// One process owns a SQLite or in-memory store: every broadcast is already local.
    public func follow(
        after: UInt64,
        publish: @escaping @Sendable ([JournalEntry]) -> Void,
        resynchronized: @escaping @Sendable (UInt64) -> Void
    ) async {}
}
