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
            outcome = try await client.withLease(timeout: connector.settings.acquireTimeout) { connection in
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
                let stored = try await client.withLease(timeout: connector.settings.acquireTimeout) { connection in
                    try await Self.entries(on: connection, after: first - 1, through: last, logger: logger)
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
            // The one row every committer locks first: commits are serialised across daemons,
            // and seqs are taken in commit order.
            var head: Int64 = -1
            for try await value in try await connection.query(
                "SELECT head FROM stream_state WHERE id = 1 FOR UPDATE",
                logger: logger
            ).decode(Int64.self) {
                head = value
            }
            guard head >= 0 else { throw StoreError(message: "the database has no stream_state row") }

            var ids: [String] = []
            var seen = Set<UUID>()
            for write in writes where seen.insert(write.id).inserted { ids.append(write.id.uuidString.lowercased()) }
            var stored: [UUID: (rowID: Int64, todo: Todo)] = [:]
            for entry in try await todos(
                connection.query(
                    """
                    SELECT id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version
                    FROM todos WHERE id = ANY(\(ids))
                    """,
                    logger: logger
                )
            ) {
                stored[entry.todo.id] = entry
            }

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
                    results.append(.success(SavedTodo(todo: todo, seq: seq)))
                case .failure(let error):
                    results.append(.failure(error))
                }
            }
            guard let newHead = entries.last?.seq else {
                try await connection.query("ROLLBACK", logger: logger)
                return .done(results)
            }

            // Each todo once, as it is after the whole batch (an upsert may not touch a row
            // twice in one statement).
            var todoBinds = PostgresBindings(capacity: order.count * 9)
            var todoValues: [String] = []
            for id in order {
                guard let row = finalRows[id] else { continue }
                let todo = row.todo
                let base = todoBinds.count
                todoValues.append("(" + (1...9).map { "$\(base + $0)" }.joined(separator: ",") + ")")
                todoBinds.append(todo.id.uuidString.lowercased())
                todoBinds.append(row.rowID)
                todoBinds.append(todo.createdAt.millisecondsSince1970)
                todoBinds.append(todo.title)
                todoBinds.append(todo.subtitle)
                todoBinds.append(todo.priority.rawValue)
                todoBinds.append(todo.completedAt?.millisecondsSince1970)
                todoBinds.append(todo.deleted)
                todoBinds.append(Int64(todo.version))
            }
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO todos (id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version)
                        VALUES \(todoValues.joined(separator: ","))
                        ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at, title = excluded.title,
                          subtitle = excluded.subtitle, priority = excluded.priority,
                          completed_at = excluded.completed_at, deleted = excluded.deleted, version = excluded.version
                        """,
                    binds: todoBinds
                ),
                logger: logger
            )

            let recordedAt = Timestamp.now().millisecondsSince1970
            var journalBinds = PostgresBindings(capacity: entries.count * 4)
            var journalValues: [String] = []
            for entry in entries {
                let base = journalBinds.count
                journalValues.append("($\(base + 1),$\(base + 2),$\(base + 3),$\(base + 4))")
                journalBinds.append(Int64(entry.seq))
                journalBinds.append(entry.type)
                journalBinds.append(ByteBuffer(bytes: entry.payload))
                journalBinds.append(recordedAt)
            }
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: "INSERT INTO journal (seq, type, payload, recorded_at) VALUES "
                        + journalValues.joined(separator: ","),
                    binds: journalBinds
                ),
                logger: logger
            )
            try await connection.query(
                "UPDATE stream_state SET head = \(Int64(newHead)) WHERE id = 1",
                logger: logger
            )
            // Delivered only if the transaction commits, and in commit order.
            try await connection.query(
                "SELECT pg_notify(\(journalChannel), \(String(newHead)))",
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
}
