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
    /// What one transaction came to.
    enum TransactionOutcome: Sendable {
        /// Committed (or nothing to commit): each write's result.
        case done([Result<SavedTodo, AppError>])
        /// Failed before COMMIT: nothing was applied.
        case failed(any Error)
        /// COMMIT was sent and no answer came back: applied or not, the database knows.
        case inDoubt(results: [Result<SavedTodo, AppError>], entries: [JournalEntry], error: any Error)
    }

    /// Commits one batch and answers every write in it; never leaves one half applied.
    func commit(_ writes: [TodoWrite], time: Timestamp, prune: Bool) async -> [Result<SavedTodo, AppError>] {
        let claims = self.claims
        let retention = self.retention
        let logger = self.logger
        let outcome: TransactionOutcome
        let progress = TransactionGuard()
        let entries = NIOLockedValueBox<[JournalEntry]>([])
        let results = NIOLockedValueBox<[Result<SavedTodo, AppError>]>([])
        do {
            outcome = try await pool.withLease(timeout: connector.settings.acquireTimeout) { connection in
                await Self.transaction(
                    writes,
                    time: time,
                    prune: prune,
                    retention: retention,
                    claims: claims,
                    progress: progress,
                    staged: { staged, answers in
                        entries.withLockedValue { $0 = staged }
                        results.withLockedValue { $0 = answers }
                    },
                    on: connection,
                    logger: logger
                )
            }
        } catch {
            if progress.abandon() {
                // Given up on while COMMIT was under way: applied or not, the database knows.
                outcome = .inDoubt(
                    results: results.withLockedValue { $0 },
                    entries: entries.withLockedValue { $0 },
                    error: error
                )
            } else {
                outcome = .failed(error)
            }
        }
        switch outcome {
        case .done(let results):
            recordHealth(up: true)
            return results
        case .failed(let error):
            recordHealth(up: false, error)
            return writes.map { _ in .failure(.unavailable) }
        case .inDoubt(let results, let entries, let error):
            recordHealth(up: false, error)
            logger.warning(
                "COMMIT got no answer; asking the database whether it happened",
                metadata: ["seq.first": "\(entries.first?.seq ?? 0)", "reason": "\(Self.describe(error))"]
            )
            if await resolve(entries) {
                return results
            }
            return writes.map { _ in .failure(.unavailable) }
        }
    }

    /// Finds out whether a batch whose COMMIT went unanswered committed: from the journal
    /// follower (which may already have read it) or from the journal itself, retrying for a
    /// while. When neither can tell, the batch counts as failed and its claims go, so that if it
    /// did commit the follower publishes it like anyone else's.
    private func resolve(_ entries: [JournalEntry]) async -> Bool {
        guard let first = entries.first?.seq, let last = entries.last?.seq else { return false }
        let logger = self.logger
        let deadline = ContinuousClock.now.advanced(by: connector.settings.acquireTimeout * 3)
        var delay = Duration.milliseconds(50)
        while ContinuousClock.now < deadline {
            do {
                let stored = try await pool.withLease(timeout: connector.settings.acquireTimeout) { connection in
                    // A COMMIT still running on the server (its socket closed by us after a
                    // timeout) holds the stream_state row: wait for it to end, then look.
                    try await connection.query("BEGIN", logger: logger)
                    do {
                        try await connection.query(
                            "SELECT head FROM stream_state WHERE id = 1 FOR SHARE",
                            logger: logger
                        )
                        let stored = try await Self.entries(
                            on: connection,
                            after: first - 1,
                            through: last,
                            logger: logger
                        )
                        try await connection.query("COMMIT", logger: logger)
                        return stored
                    } catch {
                        _ = try? await connection.query("ROLLBACK", logger: logger)
                        throw error
                    }
                }
                if stored == entries {
                    logger.notice("the unanswered COMMIT had happened", metadata: ["seq.first": "\(first)"])
                    return true
                }
                return claims.settleFailed(entries)
            } catch {
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(1))
            }
        }
        logger.error(
            "cannot tell whether a COMMIT happened; answering unavailable",
            metadata: ["seq.first": "\(first)", "seq.last": "\(last)"]
        )
        return claims.settleFailed(entries)
    }

    /// The batch's transaction on one connection.
    static func transaction(
        _ writes: [TodoWrite],
        time: Timestamp,
        prune: Bool,
        retention: JournalRetention,
        claims: LocalClaims,
        progress: TransactionGuard,
        staged: @Sendable ([JournalEntry], [Result<SavedTodo, AppError>]) -> Void,
        on connection: PostgresConnection,
        logger: Logger
    ) async -> TransactionOutcome {
        var claimed: [JournalEntry] = []
        var results: [Result<SavedTodo, AppError>] = []
        do {
            try await connection.query("BEGIN", logger: logger)
            var ids: [String] = []
            var seen = Set<UUID>()
            for write in writes where seen.insert(write.id).inserted { ids.append(write.id.lowercased) }
            // The one row every committer locks first (serialising commits across daemons, so
            // seqs are taken in commit order), and the touched todos, in one round trip.
            let (head, stored) = try await lockAndRead(ids, on: connection, logger: logger)

            var seq = UInt64(head)
            var entries: [JournalEntry] = []
            var finalRows: [UUID: (rowID: Int64, todo: Todo)] = [:]
            var order: [UUID] = []
            for write in writes {
                let current = finalRows[write.id] ?? stored[write.id]
                switch write.apply(to: current?.todo, now: time) {
                case .success(let todo):
                    seq += 1
                    let record = TodoWireCodec.broadcastRecord(for: todo)
                    entries.append(JournalEntry(seq: seq, type: record.type, payload: record.payload))
                    if finalRows[todo.id] == nil { order.append(todo.id) }
                    // A todo's creation order is the seq of its first save.
                    finalRows[todo.id] = (current?.rowID ?? Int64(seq), todo)
                    results.append(.success(SavedTodo(todo: todo, seq: seq, broadcastPayload: record.payload)))
                case .failure(let error):
                    results.append(.failure(error))
                }
            }
            guard let newHead = entries.last?.seq else {
                try await connection.query("ROLLBACK", logger: logger)
                return .done(results)
            }

            try await writeBatch(
                rows: order.compactMap { finalRows[$0] },
                entries: entries,
                head: newHead,
                on: connection,
                logger: logger
            )
            if prune {
                let keepFrom = newHead > retention.maxEntries ? newHead - retention.maxEntries + 1 : 0
                try await connection.query("DELETE FROM journal WHERE seq < \(Int64(keepFrom))", logger: logger)
                if retention.maxAgeSeconds > 0 {
                    let cutoff = Timestamp.now().millisecondsSince1970 - Int64(retention.maxAgeSeconds) * 1000
                    try await connection.query("DELETE FROM journal WHERE recorded_at < \(cutoff)", logger: logger)
                }
            }
            // Claimed before COMMIT: our own notification may reach the follower before
            // COMMIT returns here, and these broadcasts must go out with their `re` copy.
            staged(entries, results)
            claims.claim(entries)
            guard progress.enterCommit() else {
                _ = claims.settleFailed(entries)
                throw DatabaseUnavailable()
            }
            claimed = entries
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            return .failed(error)
        }
        do {
            try await connection.query("COMMIT", logger: logger)
            return .done(results)
        } catch {
            if let error = error as? PSQLError, error.code == .server,
                let state = error.serverInfo?[.sqlState], !state.hasPrefix("57"), !state.hasPrefix("08")
            {
                // The server refused the COMMIT and rolled back: nothing was applied.
                _ = claims.settleFailed(claimed)
                return .failed(error)
            }
            return .inDoubt(results: results, entries: claimed, error: error)
        }
    }

    /// Locks `stream_state` and reads its head and the todos with `ids`.
    static func lockAndRead(
        _ ids: [String],
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> (head: Int64, todos: [UUID: (rowID: Int64, todo: Todo)]) {
        var head: Int64 = -1
        var todos: [UUID: (rowID: Int64, todo: Todo)] = [:]
        let rows = try await connection.query(
            """
            SELECT s.head, t.id, t.seq_no, t.created_at, t.title, t.subtitle, t.priority, t.completed_at,
              t.deleted, t.version
            FROM stream_state s LEFT JOIN todos t ON t.id = ANY(\(ids))
            WHERE s.id = 1 FOR UPDATE OF s
            """,
            logger: logger
        )
        for try await (value, id, seqNo, createdAt, title, subtitle, priority, completedAt, deleted, version)
            in rows.decode(
                (Int64, String?, Int64?, Int64?, String?, String?, String?, Int64?, Bool?, Int64?).self
            )
        {
            head = value
            guard let id, let seqNo, let createdAt, let title, let subtitle, let priority, let deleted, let version
            else { continue }
            let todo = try StoredTodo.decode(
                id: id,
                createdAt: createdAt,
                title: title,
                subtitle: subtitle,
                priority: priority,
                completedAt: completedAt,
                deleted: deleted,
                version: version
            )
            todos[todo.id] = (seqNo, todo)
        }
        guard head >= 0 else { throw StoreError(message: "the database has no stream_state row") }
        return (head, todos)
    }

    /// Upserts the todos (each once, as it is after the whole batch: an upsert may not touch a
    /// row twice in one statement), appends the journal entries, moves the head and notifies,
    /// in one statement (one round trip while `stream_state` is locked). The notification is
    /// delivered only if the transaction commits, and in commit order.
    static func writeBatch(
        rows: [(rowID: Int64, todo: Todo)],
        entries: [JournalEntry],
        head: UInt64,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws {
        var binds = PostgresBindings(capacity: rows.count * 9 + entries.count * 4 + 2)
        func placeholders(_ count: Int) -> String {
            let base = binds.count
            return "(" + (1...count).map { "$\(base + $0)" }.joined(separator: ",") + ")"
        }
        var todoValues: [String] = []
        for row in rows {
            let todo = row.todo
            todoValues.append(placeholders(9))
            binds.append(todo.id.lowercased)
            binds.append(row.rowID)
            binds.append(todo.createdAt.millisecondsSince1970)
            binds.append(todo.title)
            binds.append(todo.subtitle)
            binds.append(todo.priority.rawValue)
            binds.append(todo.completedAt?.millisecondsSince1970)
            binds.append(todo.deleted)
            binds.append(Int64(todo.version))
        }
        let recordedAt = Timestamp.now().millisecondsSince1970
        var journalValues: [String] = []
        for entry in entries {
            journalValues.append(placeholders(4))
            binds.append(Int64(entry.seq))
            binds.append(entry.type)
            binds.append(ByteBuffer(bytes: entry.payload))
            binds.append(recordedAt)
        }
        let headBind = binds.count + 1
        binds.append(Int64(head))
        binds.append(journalChannel)
        let sql = """
            WITH saved AS (
              INSERT INTO todos (id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version)
              VALUES \(todoValues.joined(separator: ","))
              ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at, title = excluded.title,
                subtitle = excluded.subtitle, priority = excluded.priority,
                completed_at = excluded.completed_at, deleted = excluded.deleted, version = excluded.version
              RETURNING 1
            ), journaled AS (
              INSERT INTO journal (seq, type, payload, recorded_at) VALUES \(journalValues.joined(separator: ","))
              RETURNING 1
            ), moved AS (
              UPDATE stream_state SET head = $\(headBind) WHERE id = 1 RETURNING head
            )
            SELECT pg_notify($\(headBind + 1), head::text) FROM moved
            """
        try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger)
    }
}
