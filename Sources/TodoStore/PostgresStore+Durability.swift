import Logging
import PostgresNIO

/// How far the journal is durable (schema step 6, PostgresMigrations).
///
/// A batch's transaction commits with `synchronous_commit = off`, so the lock that orders every
/// daemon's commits is not held across the disk flush; a second, synchronous transaction in the
/// same CALL then flushes it and moves its backend's row of `todostream_durable` to the batch's
/// head. In between, other connections can already see the batch. So whatever shows a daemon's
/// clients the journal (the follower's broadcasts, a list read) trusts it only up to the largest
/// head in `todostream_durable`, or makes it durable first with `flush`: a synchronous commit
/// flushes the log up to itself, and so every commit that was visible before it.
extension PostgresStore {
    /// One row, `head` and `durable`: the head and how far it is durable, in one snapshot.
    static let headAndDurable = """
        SELECT s.head, coalesce((SELECT max(head) FROM todostream_durable), 0) AS durable
        FROM stream_state s WHERE s.id = 1
        """

    /// Makes everything this connection can see durable, and says so for others: moves this
    /// backend's row of `todostream_durable` to the current head, in a synchronous commit (the
    /// connection must not be inside a transaction, or the flush waits for its COMMIT).
    /// Returns that head.
    @discardableResult
    static func flush(on connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        var marked: Int64?
        for try await head in try await connection.query(
            """
            INSERT INTO todostream_durable AS d (backend, head)
            SELECT pg_backend_pid(), head FROM stream_state WHERE id = 1
            ON CONFLICT (backend) DO UPDATE SET head = GREATEST(d.head, excluded.head)
            RETURNING d.head
            """,
            logger: logger
        ).decode(Int64.self) {
            marked = head
        }
        guard let marked else { throw StoreError(message: "the database has no stream_state row") }
        return marked
    }

    /// Drops the rows of `todostream_durable` behind the largest, which say nothing more
    /// (those of connections gone), skipping any another connection is moving right now.
    static let pruneDurable: PostgresQuery = """
        DELETE FROM todostream_durable WHERE backend IN (
          SELECT backend FROM todostream_durable
          WHERE head < (SELECT max(head) FROM todostream_durable)
          FOR UPDATE SKIP LOCKED
        )
        """
}
