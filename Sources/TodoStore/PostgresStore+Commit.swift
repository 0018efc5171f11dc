import EventStream
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO
import TodoApp

/// The channel every daemon LISTENs on; a notification carries only the new head.
let journalChannel = "todostream_journal"

extension PostgresStore {
    /// What one attempt at committing a batch came to.
    enum TransactionOutcome: Sendable {
        /// Committed (or nothing to commit): each write's result, and what was written (nil
        /// when nothing was).
        case done([Result<SavedTodo, AppError>], Applied?)
        /// A todo the batch read changed before the commit: nothing was applied; read again.
        case stale
        /// Failed before the commit was sent: nothing was applied.
        case failed(any Error)
        /// The commit was sent and no answer came back: applied or not, the database knows.
        /// `results` hold seqs counted from 1 within the batch (`Staged`).
        case inDoubt(staged: Staged, error: any Error)
    }

    /// A batch applied to the todos it read: its answers, the rows and journal entries to write.
    /// Seqs are not known until the commit: `results` and `entries` count them from 1, except
    /// the answers to writes whose mid the journal already held (`fromJournal`), whose seqs are
    /// the journal's.
    struct Staged: Sendable {
        var results: [Result<SavedTodo, AppError>] = []
        /// Per result: true when its seq is the journal's, not an offset within the batch.
        var fromJournal: [Bool] = []
        /// The final state of each todo written, once, and the offset of its first save.
        var rows: [(offset: Int64, todo: Todo)] = []
        var entries: [(type: String, payload: [UInt8], mid: String?)] = []
        /// Every todo the batch read, with the version it had then (-1: there was none).
        var checks: [(id: String, version: Int64)] = []
        /// The head when the todos were read: the batch's seqs come after it.
        var headAtRead: Int64 = 0

        /// The results with their real seqs, the batch's first seq being `first`.
        func results(first: UInt64) -> [Result<SavedTodo, AppError>] {
            zip(results, fromJournal).map { result, fromJournal in
                guard !fromJournal else { return result }
                return result.map {
                    SavedTodo(
                        todo: $0.todo,
                        seq: first - 1 + $0.seq,
                        broadcastPayload: $0.broadcastPayload,
                        duplicate: $0.duplicate
                    )
                }
            }
        }
    }

    /// What a committed batch wrote: its first seq, the head after it, each todo's final state.
    struct Applied: Sendable {
        var first: Int64
        var newHead: Int64
        var rows: [(offset: Int64, todo: Todo)]
        /// The journal entries before the batch that the commit brought back (step 8).
        var followed: FollowedPage? = nil
    }

    /// What a commit asks the database to bring back of the journal (step 8): the entries
    /// after `after`, with this process's own (`ownPrefix`) without their payloads.
    struct FollowRequest: Sendable {
        var after: UInt64
        var ownPrefix: String
        /// At most this many; further behind, nothing comes back.
        static let limit = 256
    }

    /// Optimistic attempts before a batch takes the `stream_state` lock for its reads too.
    static let optimisticAttempts = 3

    /// Commits one batch and answers every write in it; never leaves one half applied.
    ///
    /// One round trip reads the touched todos (no lock); the writes are applied to them here;
    /// one statement, `CALL todostream_commit_flush`, then locks `stream_state`, checks that
    /// none of those todos changed meanwhile, takes the next seqs, writes todos and journal,
    /// moves the head and commits without waiting for the disk; a second transaction in the
    /// same statement flushes, marks the head durable and notifies (PostgresStore+Durability).
    /// So the lock that orders every daemon's commits is held only while the database runs the
    /// first part, never across a round trip or a flush, and the answer means durable. A
    /// batch that loses a race for a todo to another daemon reads again; after
    /// `optimisticAttempts` it holds the commit advisory lock from its read to its commit, and
    /// cannot lose.
    ///
    /// With `expectHead`, the batch commits only at that head (one attempt, no lock): when the
    /// head is another, nothing is written and this returns nil.
    ///
    /// Records each answered commit's latency, and starts a prune of the journal after every
    /// `GroupCommitStore.commitsPerPrune` commits (one at a time; the commit does not wait).
    func commit(
        _ writes: [TodoWrite],
        time: Timestamp,
        expectHead: Int64? = nil
    ) async -> [Result<SavedTodo, AppError>]? {
        let started = ContinuousClock.now
        var answered = true
        defer { if answered { commitLatency.record(ContinuousClock.now - started) } }
        let origin = claims.begin()
        let logger = self.logger
        let generation = pool.clientGeneration
        var outcome = TransactionOutcome.stale
        var attempt = 0
        // First, one try staged on what this daemon last saw of the todos (no read); refused,
        // the batch is read and staged again. Staged here, before any lease: a batch that
        // would write nothing is read at once.
        var guessed: Staged? = nil
        if expectHead == nil, let stored = guesses.stored(for: writes, time: time, known: known) {
            let batch = Self.stage(writes, ids: Self.touched(by: writes), stored: stored, head: headSeen, time: time)
            if !batch.entries.isEmpty { guessed = batch }
        }
        while case .stale = outcome {
            if expectHead != nil, attempt > 0 {
                claims.finish(origin)
                answered = false
                return nil
            }
            let guess = guessed
            if guess != nil {
                guessed = nil
            } else {
                attempt += 1
            }
            let locked =
                attempt > Self.optimisticAttempts
                ? ExclusiveCommit(idleTimeoutMilliseconds: connector.idleHoldTimeoutMilliseconds) : nil
            let progress = TransactionGuard()
            let staged = NIOLockedValueBox<Staged?>(nil)
            let follow = follower.map { FollowRequest(after: $0.handled, ownPrefix: claims.originPrefix) }
            do {
                outcome = try await pool.withLease(timeout: connector.settings.acquireTimeout) { connection in
                    await Self.attempt(
                        writes,
                        time: time,
                        origin: origin,
                        locked: locked,
                        expectHead: expectHead,
                        follow: follow,
                        guessed: guess,
                        progress: progress,
                        staged: { batch in staged.withLockedValue { $0 = batch } },
                        on: connection,
                        logger: logger
                    )
                }
            } catch {
                if progress.abandon(), let batch = staged.withLockedValue({ $0 }) {
                    // Given up on while the commit was under way: applied or not, the database knows.
                    outcome = .inDoubt(staged: batch, error: error)
                } else {
                    outcome = .failed(error)
                }
            }
            if case .stale = outcome, guess != nil { guesses.forget(writes.map(\.id)) }
        }
        switch outcome {
        case .done(let results, let applied):
            if let applied {
                claims.committed(first: UInt64(max(1, applied.first)), last: UInt64(max(0, applied.newHead)))
                // Before the batch is finished: its end wakes the follower, which then finds
                // the journal followed up to this batch's head.
                follower?.commitAnswered(applied.followed)
            }
            claims.finish(origin)
            if let applied {
                headSeen = max(headSeen, applied.newHead)
                guesses.remember(applied.rows.lazy.map(\.todo))
                // Applied when the commit follows the known todos directly on their server;
                // otherwise they stay behind and the journal (this commit's entries included)
                // moves them on, or the next read finds them on another server and drops them.
                _ = known?.committed(
                    first: applied.first,
                    newHead: applied.newHead,
                    rows: applied.rows,
                    generation: generation
                )
            }
            recordHealth(up: true)
            commitsSincePrune += 1
            if commitsSincePrune >= GroupCommitStore.commitsPerPrune, pruning == nil {
                // Beside the commits, on a connection of its own: no batch waits for it.
                commitsSincePrune = 0
                pruning = Task {
                    await prune()
                    pruning = nil
                }
            }
            return results
        case .stale, .failed:
            follower?.commitAnswered(nil)
            claims.finish(origin)
            if case .failed(let error) = outcome { recordHealth(up: false, error) }
            return writes.map { _ in .failure(.unavailable) }
        case .inDoubt(let staged, let error):
            follower?.commitAnswered(nil)
            known = nil
            recordHealth(up: false, error)
            logger.warning(
                "a commit got no answer, or an error that may have come after it committed; asking the database whether it happened",
                metadata: ["origin": "\(origin)", "reason": "\(Self.describe(error))"]
            )
            switch await resolve(origin, after: staged.headAtRead) {
            case .committed(let first):
                return staged.results(first: first)
            case .notCommitted:
                // The journal says it did not commit: nothing was applied, as `unavailable` says.
                return writes.map { _ in .failure(.unavailable) }
            case .unknown:
                return writes.map { _ in .failure(.unavailableInDoubt) }
            }
        }
    }

    /// Drops journal entries beyond the retention, outside any batch's commit.
    private func prune() async {
        let retention = self.retention
        let logger = self.logger
        do {
            try await pool.withLease(timeout: connector.settings.acquireTimeout) { connection in
                let keep = Int64(clamping: retention.maxEntries)
                try await connection.query(
                    "DELETE FROM journal WHERE seq <= (SELECT head FROM stream_state WHERE id = 1) - \(keep)",
                    logger: logger
                )
                try await connection.query(Self.pruneDurable, logger: logger)
                if retention.maxAgeSeconds > 0 {
                    let cutoff = Timestamp.now().millisecondsSince1970 - Int64(retention.maxAgeSeconds) * 1000
                    try await connection.query("DELETE FROM journal WHERE recorded_at < \(cutoff)", logger: logger)
                }
            }
        } catch {
            logger.warning(
                "pruning the journal failed; trying again later",
                metadata: ["reason": "\(Self.describe(error))"]
            )
        }
    }

    /// What the look-up of a batch in doubt learned (`resolve`).
    enum InDoubtOutcome: Equatable, Sendable {
        /// It committed; its first seq.
        case committed(first: UInt64)
        /// The journal, read once no commit was still running, does not hold it: it did not
        /// commit, and cannot any more.
        case notCommitted
        /// Nothing could tell in time: it may have committed.
        case unknown
    }

    /// Finds out whether a batch whose commit went unanswered committed: from the journal
    /// itself (its entries carry `origin`), retrying for a while, or from the journal follower
    /// (which may already have passed them). A look-up that fails (the server restarting, the
    /// pool choosing a server again, a lease on a retired client) is tried again, each time on
    /// the client in use then, until 3 × `postgres.timeout_ms` have passed. When nothing can
    /// tell, the batch is abandoned (`LocalClaims`), so that if it did commit the follower
    /// publishes it like anyone else's.
    private func resolve(_ origin: String, after headAtRead: Int64) async -> InDoubtOutcome {
        let logger = self.logger
        let deadline = ContinuousClock.now.advanced(by: connector.settings.acquireTimeout * 3)
        var delay = Duration.milliseconds(50)
        while ContinuousClock.now < deadline {
            do {
                let first = try await pool.withLease(timeout: connector.settings.acquireTimeout) { connection in
                    // A commit still running on the server (its socket closed by us after a
                    // timeout) holds the commit advisory lock, and the stream_state row once it
                    // has it: wait for it to end, then look. The advisory lock, taken
                    // exclusively, also waits for a commit still queued for it (behind a batch
                    // that holds it from its read): one that took the row only after this look
                    // would commit although the journal had said it did not.
                    try await connection.query("BEGIN", logger: logger)
                    do {
                        try await connection.query(
                            "SELECT pg_advisory_xact_lock(\(PostgresMigrations.commitLockKey))",
                            logger: logger
                        )
                        try await connection.query(
                            "SELECT head FROM stream_state WHERE id = 1 FOR SHARE",
                            logger: logger
                        )
                        var first: Int64?
                        for try await seq in try await connection.query(
                            "SELECT MIN(seq) FROM journal WHERE seq > \(headAtRead) AND origin = \(origin)",
                            logger: logger
                        ).decode(Int64?.self) {
                            first = seq
                        }
                        // The batch may have committed without its flush: this transaction's
                        // synchronous COMMIT flushes it (PostgresStore+Durability).
                        try await Self.flush(on: connection, logger: logger)
                        try await connection.query("COMMIT", logger: logger)
                        return first
                    } catch {
                        _ = try? await connection.query("ROLLBACK", logger: logger)
                        throw error
                    }
                }
                claims.finish(origin)
                if let first {
                    logger.notice("the unanswered commit had happened", metadata: ["origin": "\(origin)"])
                    return .committed(first: UInt64(first))
                }
                logger.notice(
                    "the unanswered commit had not happened; answering unavailable",
                    metadata: ["origin": "\(origin)"]
                )
                return .notCommitted
            } catch {
                // A cancelled task's leases and sleeps fail at once: looking again would spin.
                if Task.isCancelled { break }
                try? await Task.sleep(for: min(delay, ContinuousClock.now.duration(to: deadline)))
                delay = min(delay * 2, .seconds(1))
            }
        }
        // The follower may have seen the batch meanwhile; only when it has not is the outcome
        // unknown (its requesters are not answered: their connections close with `draining`).
        if let first = claims.settleInDoubt(origin) {
            logger.notice("the unanswered commit had happened (seen in the journal)", metadata: ["origin": "\(origin)"])
            return .committed(first: first)
        }
        logger.error(
            "cannot tell whether a commit happened; its requesters' connections are closed without an answer",
            metadata: ["origin": "\(origin)"]
        )
        return .unknown
    }

    /// One attempt at the batch on one connection: read the todos, apply the writes, `CALL
    /// todostream_commit_flush`, which commits and flushes before it answers. With `guessed`, the
    /// batch as staged on `StagingGuesses` (with a head this daemon saw standing for the head at
    /// reading), there is no read: the procedure's version checks refuse it (`.stale`) when a
    /// guess was wrong. `locked`: the
    /// attempt holds the commit advisory lock exclusively from its read to its commit, so no
    /// other batch can commit in between and the check cannot fail; on any failure the
    /// connection is closed, which releases the lock.
    static func attempt(
        _ writes: [TodoWrite],
        time: Timestamp,
        origin: String,
        locked: ExclusiveCommit?,
        expectHead: Int64? = nil,
        follow: FollowRequest? = nil,
        guessed: Staged? = nil,
        progress: TransactionGuard,
        staged: @Sendable (Staged) -> Void,
        on connection: PostgresConnection,
        logger: Logger
    ) async -> TransactionOutcome {
        let batch: Staged
        if let guessed {
            batch = guessed
        } else {
            do {
                if let locked {
                    try await connection.query(PostgresQuery(unsafeSQL: locked.lockSQL), logger: logger)
                }
                let ids = touched(by: writes)
                let (head, stored, applied) = try await read(
                    ids.map(\.lowercased),
                    mids: writes.compactMap(\.mid),
                    on: connection,
                    logger: logger
                )
                if let expectHead, head != expectHead {
                    if let locked { await locked.unlock(connection, logger: logger) }
                    return .stale
                }
                batch = stage(writes, ids: ids, stored: stored, applied: applied, head: head, time: time)
            } catch {
                if locked != nil { try? await connection.close() }
                return .failed(error)
            }
        }
        if batch.entries.isEmpty {
            if batch.fromJournal.contains(true) {
                // Answers taken from journal entries that may not be durable yet.
                do {
                    try await flush(on: connection, logger: logger)
                } catch {
                    if locked != nil { try? await connection.close() }
                    return .failed(error)
                }
            }
            if let locked { await locked.unlock(connection, logger: logger) }
            return .done(batch.results(first: UInt64(max(0, batch.headAtRead)) + 1), nil)
        }
        staged(batch)
        guard progress.enterCommit() else {
            if locked != nil { try? await connection.close() }
            return .failed(DatabaseUnavailable())
        }
        let newHead: Int64
        let followed: FollowedPage?
        do {
            (newHead, followed) = try await write(
                batch,
                origin: origin,
                expectHead: expectHead,
                follow: follow,
                on: connection,
                logger: logger
            )
        } catch {
            if locked != nil { try? await connection.close() }
            return refused(error) ? .failed(error) : .inDoubt(staged: batch, error: error)
        }
        if let locked { await locked.unlock(connection, logger: logger) }
        guard newHead >= 0 else { return .stale }
        let first = newHead - Int64(batch.entries.count) + 1
        return .done(
            batch.results(first: UInt64(first)),
            Applied(first: first, newHead: newHead, rows: batch.rows, followed: followed)
        )
    }

    /// The todos `writes` touch, each once, in the order of their first write.
    static func touched(by writes: [TodoWrite]) -> [UUID] {
        var seen = Set<UUID>()
        return writes.map(\.id).filter { seen.insert($0).inserted }
    }

    /// True when the server answered the commit with an error that only its first transaction
    /// can raise (so it rolled back): bad data (classes 22 and 23), a statement or procedure
    /// the database lacks (42), or a server that takes no writes (25006). Any other error, like a lost connection, may have come after
    /// the batch committed (schema step 9's second transaction has no exception block of its
    /// own): its outcome is asked of the journal.
    static func refused(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, error.code == .server,
            let state = error.serverInfo?[.sqlState]
        else { return false }
        // 25006: a write in a read-only transaction (a standby, or a server made read-only)
        // fails at its first statement. Both of the procedure's transactions take the session's
        // setting, which a backend re-reads only between a client's commands, never within one
        // call: when the first could write, so can the second.
        return state == "25006" || ["22", "23", "42"].contains { state.hasPrefix($0) }
    }

    /// Applies the writes in order to the todos read; seqs count from 1 within the batch. A
    /// write whose mid is in `applied` (journal entries read with the todos), or was written
    /// earlier in this batch, is a duplicate: answered with that write's outcome, not written.
    static func stage(
        _ writes: [TodoWrite],
        ids: [UUID],
        stored: [UUID: (rowID: Int64, todo: Todo)],
        applied: [MutationKey: JournalEntry] = [:],
        head: Int64,
        time: Timestamp
    ) -> Staged {
        var batch = Staged(headAtRead: head)
        batch.checks = ids.map { id in (id.lowercased, stored[id].map { Int64($0.todo.version) } ?? -1) }
        var current: [UUID: Todo] = [:]
        var rowIndex: [UUID: Int] = [:]
        /// Mids written by this batch: the offset of their entry.
        var stagedMids: [MutationKey: UInt64] = [:]
        for write in writes {
            if let mid = write.mid, let entry = applied[MutationKey(mid)] {
                batch.results.append(duplicate(of: entry.payload, seq: entry.seq))
                batch.fromJournal.append(true)
                continue
            }
            if let mid = write.mid, let offset = stagedMids[MutationKey(mid)] {
                batch.results.append(duplicate(of: batch.entries[Int(offset) - 1].payload, seq: offset))
                batch.fromJournal.append(false)
                continue
            }
            batch.fromJournal.append(false)
            let before = current[write.id] ?? stored[write.id]?.todo
            switch write.apply(to: before, now: time) {
            case .success(let todo):
                let record = TodoWireCodec.broadcastRecord(for: todo)
                batch.entries.append((record.type, record.payload, write.mid))
                let offset = UInt64(batch.entries.count)
                if let mid = write.mid { stagedMids[MutationKey(mid)] = offset }
                current[todo.id] = todo
                if let index = rowIndex[todo.id] {
                    batch.rows[index].todo = todo
                } else {
                    rowIndex[todo.id] = batch.rows.count
                    // A todo's creation order is the seq of its first save.
                    batch.rows.append((Int64(offset), todo))
                }
                batch.results.append(.success(SavedTodo(todo: todo, seq: offset, broadcastPayload: record.payload)))
            case .failure(let error):
                batch.results.append(.failure(error))
            }
        }
        return batch
    }

    /// The answer to a write whose mid was applied before, from that write's journal entry.
    private static func duplicate(of payload: [UInt8], seq: UInt64) -> Result<SavedTodo, AppError> {
        guard let todo = TodoWireCodec.todo(inBroadcastPayload: payload) else { return .failure(.unavailable) }
        return .success(SavedTodo(todo: todo, seq: seq, broadcastPayload: payload, duplicate: true))
    }

    /// Reads the head, the todos with `ids`, and the journal entries of the writes that already
    /// used one of `mids`, in one round trip.
    static func read(
        _ ids: [String],
        mids: [String] = [],
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> (head: Int64, todos: [UUID: (rowID: Int64, todo: Todo)], applied: [MutationKey: JournalEntry]) {
        var head: Int64 = -1
        var todos: [UUID: (rowID: Int64, todo: Todo)] = [:]
        var applied: [MutationKey: JournalEntry] = [:]
        // The journal's rows come after the todos' (head NULL), only when the batch has mids.
        let query: PostgresQuery = """
            SELECT s.head, t.id, t.seq_no, t.created_at, t.title, t.subtitle, t.priority, t.completed_at,
              t.deleted, t.version, NULL::BIGINT, NULL::TEXT, NULL::BYTEA, NULL::TEXT
            FROM stream_state s LEFT JOIN todos t ON t.id = ANY(\(ids))
            WHERE s.id = 1
            UNION ALL
            SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, j.seq, j.type, j.payload, j.mid
            FROM journal j WHERE j.mid = ANY(\(mids))
            """
        let rows = try await connection.query(query, logger: logger)
        for try await (
            value, id, seqNo, createdAt, title, subtitle, priority, completedAt, deleted, version,
            seq, type, payload, mid
        )
            in rows.decode(
                (
                    Int64?, String?, Int64?, Int64?, String?, String?, String?, Int64?, Bool?, Int64?,
                    Int64?, String?, ByteBuffer?, String?
                ).self
            )
        {
            guard let value else {
                if let seq, let type, let payload, let mid {
                    applied[MutationKey(mid)] = JournalEntry(
                        seq: UInt64(seq),
                        type: type,
                        payload: Array(payload.readableBytesView),
                        mid: mid
                    )
                }
                continue
            }
            head = value
            guard let seqNo,
                let todo = try StoredTodo.decodeIfPresent(
                    (id, createdAt, title, subtitle, priority, completedAt, deleted, version)
                )
            else { continue }
            todos[todo.id] = (seqNo, todo)
        }
        guard head >= 0 else { throw StoreError(message: "the database has no stream_state row") }
        return (head, todos, applied)
    }

    /// Calls `todostream_commit_flush` (schema step 6), which has committed and flushed when it
    /// answers: returns the new head, or -1 when one of the todos read changed since, or one of
    /// the batch's mids was written meanwhile (nothing was written).
    static func write(
        _ batch: Staged,
        origin: String,
        expectHead: Int64? = nil,
        follow: FollowRequest? = nil,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> (head: Int64, followed: FollowedPage?) {
        var binds = PostgresBindings(capacity: 16)
        binds.append(origin)
        binds.append(batch.checks.map(\.id))
        binds.append(batch.checks.map(\.version))
        binds.append(batch.rows.map { $0.todo.id.lowercased })
        binds.append(batch.rows.map(\.offset))
        binds.append(batch.rows.map { $0.todo.createdAt.millisecondsSince1970 })
        binds.append(batch.rows.map { $0.todo.title })
        binds.append(batch.rows.map { $0.todo.subtitle })
        binds.append(batch.rows.map { $0.todo.priority.rawValue })
        binds.append(batch.rows.map { $0.todo.completedAt?.millisecondsSince1970 ?? 0 })
        binds.append(batch.rows.map { $0.todo.completedAt != nil })
        binds.append(batch.rows.map { $0.todo.deleted })
        binds.append(batch.rows.map { Int64($0.todo.version) })
        binds.append(batch.entries.map(\.type))
        binds.append(batch.entries.map { ByteBuffer(bytes: $0.payload) })
        binds.append(batch.entries.map { $0.mid ?? "" })
        binds.append(Timestamp.now().millisecondsSince1970)
        binds.append(expectHead)
        binds.append(follow.map { Int64(clamping: $0.after) })
        binds.append(follow?.ownPrefix ?? "")
        binds.append(Int32(FollowRequest.limit))
        var answer: CommitCall.Row?
        for try await row in try await connection.execute(CommitCall(bindings: binds), logger: logger) {
            answer = row
        }
        guard let answer else { return (-1, nil) }
        guard answer.head >= 0, let follow else { return (answer.head, nil) }
        let through = UInt64(max(0, answer.head - Int64(batch.entries.count)))
        return (answer.head, answer.followed(after: follow.after, through: through, ownPrefix: follow.ownPrefix))
    }

    /// `CALL todostream_commit_batch` (schema step 9), prepared once per connection (postgres-nio
    /// keeps it by name), so that a commit sends no statement text to parse: only its values.
    struct CommitCall: PostgresPreparedStatement {
        static let name = "todostream_commit_batch_9"
        static let sql =
            "CALL todostream_commit_batch(" + (1...21).map { "$\($0)" }.joined(separator: ",")
            + ", NULL, NULL, NULL, NULL, NULL, NULL)"

        /// The new head (-1: nothing written), and the entries the commit brought back.
        struct Row: Sendable {
            var head: Int64
            var seqs: [Int64]?
            var types: [String]?
            var payloads: [ByteBuffer]?
            var origins: [String]?
            var mids: [String]?

            /// The entries as the journal follower's page of `after...through`; nil when none
            /// came back although some precede the batch, or when they do not line up.
            func followed(after: UInt64, through: UInt64, ownPrefix: String) -> FollowedPage? {
                guard through > after else { return FollowedPage(after: after, through: after, entries: []) }
                guard let seqs, let types, let payloads, let origins, let mids,
                    seqs.count == types.count, seqs.count == payloads.count, seqs.count == origins.count,
                    seqs.count == mids.count
                else { return nil }
                var entries: [PostgresStore.FollowedEntry] = []
                entries.reserveCapacity(seqs.count)
                for index in seqs.indices {
                    let origin = origins[index]
                    let own = !ownPrefix.isEmpty && origin.hasPrefix(ownPrefix)
                    let entry = JournalEntry(
                        seq: UInt64(max(0, seqs[index])),
                        type: types[index],
                        payload: own ? [] : Array(payloads[index].readableBytesView),
                        mid: mids[index].isEmpty ? nil : mids[index]
                    )
                    entries.append((entry, origin.isEmpty ? nil : origin, own))
                }
                let page = FollowedPage(after: after, through: through, entries: entries)
                return page.isContiguous ? page : nil
            }
        }

        let bindings: PostgresBindings

        func makeBindings() -> PostgresBindings { bindings }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let (head, seqs, types, payloads, origins, mids) = try row.decode(
                (Int64, [Int64]?, [String]?, [ByteBuffer]?, [String]?, [String]?).self
            )
            return Row(head: head, seqs: seqs, types: types, payloads: payloads, origins: origins, mids: mids)
        }
    }
}

/// How a batch that lost the optimistic race holds the commit advisory lock: for the session,
/// not the transaction, as it spans the commit procedure's own `COMMIT`. Between its statements
/// the session is idle, not in a transaction, so `idle_in_transaction_session_timeout` does not
/// cover it: a daemon frozen or cut off there would hold every other daemon's commits until its
/// connection died (hours, for a cut network). While it holds the lock the session sets
/// `idle_session_timeout` (PostgreSQL 14 and later) to the same bound, so the server ends it.
struct ExclusiveCommit: Sendable {
    let idleTimeoutMilliseconds: Int

    /// Sets the idle bound and takes the lock, in one round trip.
    var lockSQL: String {
        "SELECT \(Self.setIdleTimeout(idleTimeoutMilliseconds)), pg_advisory_lock(\(PostgresMigrations.commitLockKey))"
    }

    /// Releases the lock and lifts the idle bound (a pooled connection may idle for long).
    static let unlockSQL =
        "SELECT pg_advisory_unlock(\(PostgresMigrations.commitLockKey)), \(setIdleTimeout(0))"

    /// `idle_session_timeout` where the server has it (14 and later), else nothing.
    private static func setIdleTimeout(_ milliseconds: Int) -> String {
        "CASE WHEN current_setting('server_version_num')::int >= 140000 "
            + "THEN set_config('idle_session_timeout', '\(milliseconds)', false) END"
    }

    /// Releases the commit advisory lock, or closes the connection (which releases it too).
    func unlock(_ connection: PostgresConnection, logger: Logger) async {
        do {
            try await connection.query(PostgresQuery(unsafeSQL: Self.unlockSQL), logger: logger)
        } catch {
            try? await connection.close()
        }
    }
}
