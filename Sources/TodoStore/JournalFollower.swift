import EventStream
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO

/// Follows the shared journal for one daemon: LISTENs on `journalChannel` on a connection of
/// its own and, on every notification (coalesced), every `catchUpInterval`, and right after
/// each (re)connect, reads the journal from the last seq it handled up to `head` and hands the
/// entries other daemons wrote to `publish`, in seq order.
///
/// A notification carries only the new head and is only a hint: the rows come from the
/// journal, so notifications that arrive late, together, or never change nothing but latency.
/// Entries this daemon committed itself (their `origin` is this process's, see `LocalClaims`) are
/// skipped: their broadcasts already go out through the local path, with the requester's `re`
/// copy.
///
/// Each (re)connect goes to the first usable server of the list (`connectToFittingServer`), so
/// the follower moves with the database when a standby is promoted; it also reconnects when the
/// store's pool has moved to another server while its own connection still works (an old
/// primary left running read-only would otherwise be followed while the writes go elsewhere).
///
/// It starts no task of its own: `run()` follows in its caller's task until that is cancelled.
///
/// **Entries brought by commits.** Each commit of this process asks the database for the
/// entries after the cursor up to its batch (schema step 8) and hands them here
/// (`commitAnswered`): published in the same way, they move the cursor, so a daemon that keeps
/// committing does not wait for a read before its own broadcasts and replies can go out in
/// order, and does not read after every commit of another daemon. While such commits go on,
/// wake-ups put the read off (`CatchUpStateMachine`); a commit that brought nothing usable
/// (the follower too far behind, entries pruned, a batch of this process abandoned in between)
/// brings the usual reads back.
final class JournalFollower: Sendable {
    /// Entries read per query while catching up.
    static let pageSize: UInt64 = 1000

    private let connector: PostgresConnector
    private let claims: LocalClaims
    private let health: DatabaseHealth
    private let eventLoop: any EventLoop
    private let logger: Logger
    private let publish: @Sendable ([JournalEntry]) -> Void
    private let resynchronized: @Sendable (UInt64) -> Void
    /// Told when the connection fails (the server may be gone).
    private let serverFailed: @Sendable (any Error) -> Void
    /// The generation of the pool's client (`FailoverPool.clientGeneration`): when it changes,
    /// the pool has moved to another server and the follower connects again.
    private let poolClient: @Sendable () -> Int
    /// Told each time another daemon's entries are published.
    private let others: OtherCommitters?
    /// The newest seq handled, and which connection may move it on: a catch-up abandoned on a
    /// dead connection must not publish anything if it ever wakes up.
    private let cursor: NIOLockedValueBox<(generation: Int, seq: UInt64)>
    /// The durable head the last catch-up found short of the head; nil when it was not short.
    private let shortOfHead = NIOLockedValueBox<Int64?>(nil)
    /// When a wake-up reads the journal (`CatchUpStateMachine`).
    private let pace: NIOLockedValueBox<CatchUpStateMachine>
    init(
        connector: PostgresConnector,
        claims: LocalClaims,
        health: DatabaseHealth,
        after: UInt64,
        eventLoop: any EventLoop,
        logger: Logger,
        publish: @escaping @Sendable ([JournalEntry]) -> Void,
        resynchronized: @escaping @Sendable (UInt64) -> Void,
        serverFailed: @escaping @Sendable (any Error) -> Void = { _ in },
        poolClient: @escaping @Sendable () -> Int = { 0 },
        others: OtherCommitters? = nil
    ) {
        self.connector = connector
        self.claims = claims
        self.health = health
        self.cursor = NIOLockedValueBox((0, after))
        self.pace = NIOLockedValueBox(
            CatchUpStateMachine(
                interval: connector.settings.catchUpInterval,
                grace: connector.settings.commitFollowGrace
            )
        )
        self.eventLoop = eventLoop
        self.logger = logger
        self.publish = publish
        self.resynchronized = resynchronized
        self.serverFailed = serverFailed
        self.poolClient = poolClient
        self.others = others
    }

    /// The newest seq handled (published, or left to the local path).
    var handled: UInt64 { cursor.withLockedValue { $0.seq } }

    /// A commit of this process was answered with `page`, the entries between the cursor it
    /// read and its batch (nil: it brought none, or it failed). The entries the cursor has not
    /// passed are published as a catch-up would, the cursor moves to the page's end and over
    /// this process's own committed seqs after it, and the pace is told whether commits bring
    /// the journal along.
    func commitAnswered(_ page: FollowedPage?) {
        let now = ContinuousClock.now
        let brought = page.map { page in cursor.withLockedValue { cursor in take(page, cursor: &cursor) } } ?? false
        pace.withLockedValue { brought ? $0.commitBrought(at: now) : $0.commitMissed() }
    }

    /// Publishes what `page` holds after the cursor and moves the cursor to the page's end (and
    /// over this process's own committed seqs after it). False, with nothing published, when
    /// the page starts after the cursor or holds an entry of this process whose payload it
    /// lacks (a batch abandoned: the follower reads it).
    private func take(_ page: FollowedPage, cursor: inout (generation: Int, seq: UInt64)) -> Bool {
        guard cursor.seq >= page.after, page.isContiguous, publish(page, after: &cursor.seq) else { return false }
        if let through = claims.ownThrough(after: cursor.seq) { cursor.seq = through }
        return true
    }

    /// Publishes the entries of `page` after `seq` (the cursor, under its lock) that other
    /// processes wrote, and moves `seq` to the page's end: what a read of the journal and a
    /// commit's answer both come to. False, with nothing published and `seq` unmoved, when an
    /// entry of this process lacks its payload (a batch abandoned since the page was read).
    private func publish(_ page: FollowedPage, after seq: inout UInt64) -> Bool {
        guard seq < page.through else { return true }
        var foreign: [JournalEntry] = []
        for item in page.entries where item.entry.seq > seq {
            guard !claims.passedByFollower(origin: item.origin, seq: item.entry.seq) else { continue }
            guard !item.withheld else { return false }
            foreign.append(item.entry)
        }
        if !foreign.isEmpty {
            publish(foreign)
            others?.saw()
        }
        seq = page.through
        return true
    }

    /// Follows, reconnecting after every failure, until the task is cancelled. Cancelling closes
    /// the connection in use, so that the follower stops at once, not after its query.
    func run() async {
        var delay = Duration.milliseconds(100)
        var connectionID = 0
        while !Task.isCancelled {
            connectionID += 1
            let generation = connectionID
            cursor.withLockedValue { $0.generation = generation }
            let poolClient = self.poolClient()
            do {
                let (connection, _) = try await connector.connectToFittingServer(
                    on: eventLoop,
                    id: connectionID,
                    logger: logger
                )
                delay = .milliseconds(100)
                do {
                    try await withTaskCancellationHandler {
                        try await follow(on: connection, generation: generation, poolClient: poolClient)
                    } onCancel: {
                        connection.close()
                    }
                } catch {
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            } catch is ServerChanged {
                // The pool moved to another server: follow the journal there, at once.
                guard !Task.isCancelled else { return }
                logger.notice("the database moved to another server; following the journal there")
            } catch {
                guard !Task.isCancelled else { return }
                serverFailed(error)
                if health.recordFeed(up: false) {
                    logger.error(
                        "lost the journal feed from PostgreSQL; reconnecting",
                        metadata: ["database": "\(connector.settings)", "reason": "\(PostgresStore.describe(error))"]
                    )
                }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
    }

    /// LISTENs, catches up once the LISTEN is active (so nothing committed in between is
    /// missed), then again on every wake-up until the connection fails or the task is
    /// cancelled.
    private func follow(on connection: PostgresConnection, generation: Int, poolClient: Int) async throws {
        pace.withLockedValue { $0.connected() }
        try await connection.listen(on: journalChannel) { notifications in
            let (wakeups, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
            claims.whenSettled { wake.yield() }
            defer { claims.whenSettled(nil) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for try await notification in notifications {
                        let head = UInt64(notification.payload)
                        let committing = self.claims.committing
                        if self.pace.withLockedValue({ $0.heard(head: head, committing: committing) }) {
                            wake.yield()
                        }
                    }
                    throw DatabaseUnavailable()
                }
                let interval = connector.settings.catchUpInterval
                group.addTask {
                    while !Task.isCancelled {
                        try await Task.sleep(for: interval)
                        wake.yield()
                    }
                }
                group.addTask {
                    try await self.catchUpWithin(on: connection, generation: generation, poolClient: poolClient)
                    if self.health.recordFeed(up: true) {
                        self.logger.notice(
                            "following the journal in PostgreSQL",
                            metadata: ["seq": "\(self.handled)"]
                        )
                    }
                    for await _ in wakeups {
                        try await self.catchUpWithin(on: connection, generation: generation, poolClient: poolClient)
                        self.health.recordFeed(up: true)
                    }
                }
                defer { wake.finish() }
                try await group.next()
                group.cancelAll()
            }
        }
    }

    /// `catchUp`, bounded in time: a connection that died under a query does not always fail
    /// the query, so one that overruns is closed and the follower reconnects. Throws
    /// `ServerChanged` instead when the pool has moved to another server since this connection
    /// was made (`poolClient` was its client's generation then).
    ///
    /// Whether to read at all is decided first (`shouldRead`), so a wake-up that reads nothing
    /// (this daemon's own commit, stepped over) costs no task and no timer.
    private func catchUpWithin(on connection: PostgresConnection, generation: Int, poolClient: Int) async throws {
        guard self.poolClient() == poolClient else { throw ServerChanged() }
        var decision = shouldRead(generation: generation)
        // A commit of this process has just brought the journal: the next one, if it comes
        // soon, brings what was committed since, so the read waits a moment and asks again.
        while case .wait(let until) = decision {
            try await Task.sleep(until: until, clock: .continuous)
            decision = shouldRead(generation: generation)
        }
        let want: Bool
        switch decision {
        case .skip, .wait:
            return
        case .quiet:
            try await bounded(connection) { try await Self.listenKey(.quiet, on: connection, logger: self.logger) }
            return
        case .read:
            want = false
        case .wantThenRead:
            want = true
        }
        let short = try await bounded(connection) {
            if want { try await Self.listenKey(.wanted, on: connection, logger: self.logger) }
            return try await self.catchUp(on: connection, generation: generation)
        }
        // A commit that found nobody wanting notifications just before the key was taken may
        // still be flushing: its entries are read once they are durable, a grace later (and
        // flushed by this follower if they still are not), not on a notification it never sends.
        guard want, short else { return }
        try await Task.sleep(for: connector.settings.commitFollowGrace)
        try await bounded(connection) { try await self.catchUp(on: connection, generation: generation) }
    }

    /// Runs `body` on the LISTEN connection within the acquire timeout; one that overruns
    /// closes the connection, and the follower reconnects.
    @discardableResult
    private func bounded<Result: Sendable>(
        _ connection: PostgresConnection,
        _ body: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        try await PostgresClient.run(
            within: connector.settings.acquireTimeout,
            onTimeout: { connection.close() },
            body
        )
    }

    /// Takes (`.wanted`) or releases (`.quiet`) the listen key on the LISTEN connection, in
    /// one round trip: while it is held, commits notify (schema step 9). A quiet follower also
    /// stops LISTENing, so that the notifications another daemon's follower wants do not wake
    /// it (and its backend) too; it LISTENs again before it takes the key. Taking the key
    /// waits for a commit's first transaction that holds it.
    private static func listenKey(
        _ notifications: CatchUpStateMachine.Notifications,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws {
        let key = PostgresMigrations.listenKey
        let statement: String
        switch notifications {
        case .wanted:
            statement = "DO $$BEGIN LISTEN \(journalChannel); PERFORM pg_advisory_lock_shared(\(key)); END$$"
        case .quiet:
            statement = "DO $$BEGIN PERFORM pg_advisory_unlock_shared(\(key)); UNLISTEN \(journalChannel); END$$"
        }
        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
    }

    /// The journal no longer holds what follows `after` (pruned while this daemon was behind):
    /// gives up on everything before the oldest entry kept, has every client told `gap`, and
    /// returns the seq to go on after.
    private func resynchronize(on connection: PostgresConnection, generation: Int, after: UInt64) async throws -> UInt64
    {
        var oldest: Int64?
        for try await value in try await connection.query(
            "SELECT MIN(seq) FROM journal",
            logger: logger
        ).decode(Int64?.self) {
            oldest = value
        }
        guard let oldest, UInt64(max(0, oldest)) > after + 1 else {
            // Nothing was pruned after all (the rows were not there yet): read again.
            throw DatabaseUnavailable()
        }
        let skipTo = UInt64(oldest) - 1
        let current = cursor.withLockedValue { cursor -> Bool in
            guard cursor.generation == generation, cursor.seq == after else { return false }
            cursor.seq = skipTo
            resynchronized(skipTo)
            return true
        }
        guard current else { throw DatabaseUnavailable() }
        logger.error(
            "fell further behind than the journal keeps: seqs were pruned before this daemon read them; clients are told gap and refetch (raise journal.max_entries)",
            metadata: ["seq.after": "\(after)", "seq.through": "\(skipTo)"]
        )
        return skipTo
    }

    /// Steps the cursor over this process's own commits, which need no read
    /// (`LocalClaims.committed`), and asks `CatchUpStateMachine` whether the journal is to be
    /// read now.
    private func shouldRead(generation: Int) -> CatchUpStateMachine.Action {
        let stepped = cursor.withLockedValue { cursor -> UInt64 in
            if cursor.generation == generation, let through = claims.ownThrough(after: cursor.seq) {
                cursor.seq = through
            }
            return cursor.seq
        }
        let now = ContinuousClock.now
        return pace.withLockedValue { $0.wake(cursor: stepped, now: now, committing: { claims.committing }) }
    }

    /// Reads everything after the cursor up to the durable head (PostgresStore+Durability),
    /// page by page, and publishes what other daemons wrote. The first page comes in the same
    /// statement as the heads, so the usual catch-up is one round trip.
    ///
    /// Entries committed but not yet durable wait for the notification their flush sends. If
    /// two catch-ups in a row find the durable head short of the head and not moved (a flush
    /// that never came: its connection was cut between the two commits), this one flushes.
    ///
    /// Returns whether the durable head was short of the head.
    @discardableResult
    private func catchUp(on connection: PostgresConnection, generation: Int) async throws -> Bool {
        var from = handled
        let first = try await PostgresStore.durableEntries(
            on: connection,
            after: from,
            limit: Self.pageSize,
            withholding: claims.withheld(),
            logger: logger
        )
        let (head, durable) = (first.head, first.durable)
        var trusted = durable
        if durable < head {
            let stalled = shortOfHead.withLockedValue { last in
                defer { last = durable }
                return last == durable
            }
            if stalled { trusted = try await PostgresStore.flush(on: connection, logger: logger) }
        } else {
            shortOfHead.withLockedValue { $0 = nil }
        }
        let target = UInt64(max(0, min(head, trusted)))
        // What the first statement read: the entries after `from` through `firstUpper`.
        let firstUpper = min(UInt64(max(0, min(head, durable))), from + Self.pageSize)
        var read: FollowedPage? =
            firstUpper > from ? FollowedPage(after: from, through: firstUpper, entries: first.entries) : nil
        while from < target {
            let page: FollowedPage
            if let first = read {
                page = first
                read = nil
            } else {
                let upper = min(target, from + Self.pageSize)
                page = FollowedPage(
                    after: from,
                    through: upper,
                    entries: try await PostgresStore.originEntries(
                        on: connection,
                        after: from,
                        through: upper,
                        withholding: claims.withheld(),
                        logger: logger
                    )
                )
            }
            guard page.isContiguous else {
                from = try await resynchronize(on: connection, generation: generation, after: from)
                continue
            }
            // The cursor may have moved on since the read, past entries a commit of this
            // process brought (`commitAnswered`): only what follows it is published.
            let current = cursor.withLockedValue { cursor -> UInt64?? in
                guard cursor.generation == generation, cursor.seq >= from else { return .some(nil) }
                // A batch of this process abandoned since the read: read the page again, with
                // its payloads.
                guard publish(page, after: &cursor.seq) else { return nil }
                return cursor.seq
            }
            guard let current else { continue }
            guard let current else { throw DatabaseUnavailable() }
            from = current
        }
        return durable < head
    }
}

/// Journal entries `after + 1 ... through`, in seq order, each with its origin: what a commit
/// brought back of the journal before its batch (schema step 8).
struct FollowedPage: Sendable {
    let after: UInt64
    let through: UInt64
    let entries: [PostgresStore.FollowedEntry]

    /// Whether the entries are exactly the seqs after `after` through `through`, one each (a
    /// pruned journal leaves some out). They come in seq order and seqs are unique, so the
    /// first, the last and the count tell.
    var isContiguous: Bool {
        guard through > after else { return entries.isEmpty }
        return entries.first?.entry.seq == after + 1 && entries.last?.entry.seq == through
            && entries.count == Int(through - after)
    }
}
