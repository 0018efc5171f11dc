import Logging
import PostgresNIO

/// The PostgreSQL schema, versioned like the SQLite one (`Migrations`): version N here is the
/// same schema as version N there, step for step, so both engines say the same thing about a
/// database's version. The version is kept in `todostream_schema`; every daemon migrates under
/// one transaction-scoped advisory lock, so several starting at once migrate exactly once.
enum PostgresMigrations {
    /// `pg_advisory_xact_lock` key: "todostrm" in ASCII.
    static let lockKey: Int64 = 0x746F_646F_7374_726D

    static let steps: [[String]] = [
        // 1: todos, the broadcast journal, and the epoch and head of the one global order.
        [
            """
            CREATE TABLE todos (
              id TEXT PRIMARY KEY NOT NULL,
              seq_no BIGINT NOT NULL,
              created_at BIGINT NOT NULL,
              title TEXT NOT NULL,
              subtitle TEXT NOT NULL,
              priority TEXT NOT NULL,
              completed_at BIGINT,
              deleted BOOLEAN NOT NULL,
              version BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE journal (
              seq BIGINT PRIMARY KEY NOT NULL,
              type TEXT NOT NULL,
              payload BYTEA NOT NULL,
              recorded_at BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE stream_state (
              id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
              epoch TEXT NOT NULL,
              head BIGINT NOT NULL
            )
            """,
            "INSERT INTO stream_state (id, epoch, head) VALUES (1, replace(gen_random_uuid()::text, '-', ''), 0)",
        ],
        // 2: in SQLite, the commit_log view that writes a group commit in one statement.
        // PostgreSQL's commit is one statement already (see PostgresStore+Commit), so the
        // tables stay as they are; the step exists to keep both engines' versions in step.
        ["SELECT 1"],
        // 3: the journal's age prune finds old entries by index, not by reading every entry.
        ["CREATE INDEX IF NOT EXISTS journal_recorded_at ON journal (recorded_at)"],
    ]

    /// Brings the schema to the newest version; refuses a database newer than this build.
    static func run(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("BEGIN", logger: logger)
        do {
            try await connection.query("SELECT pg_advisory_xact_lock(\(lockKey))", logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS todostream_schema (
                  id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
                  version INTEGER NOT NULL
                )
                """,
                logger: logger
            )
            try await connection.query(
                "INSERT INTO todostream_schema (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
                logger: logger
            )
            var current = 0
            for try await version in try await connection.query(
                "SELECT version FROM todostream_schema WHERE id = 1",
                logger: logger
            ).decode(Int.self) {
                current = version
            }
            if current > steps.count {
                throw StoreError(
                    message:
                        "The database has schema version \(current), newer than this build knows (\(steps.count))."
                )
            }
            for version in current..<steps.count {
                for statement in steps[version] {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                logger.notice("database migrated", metadata: ["schema.version": "\(version + 1)"])
            }
            try await connection.query(
                "UPDATE todostream_schema SET version = \(steps.count) WHERE id = 1",
                logger: logger
            )
            try await connection.query("COMMIT", logger: logger)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }
}
