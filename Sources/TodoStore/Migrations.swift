import Foundation
import SQLiteNIO

/// Versioned schema migrations, tracked in `PRAGMA user_version`. Each step runs in its own
/// transaction; a database newer than this build is refused.
enum Migrations {
    static let steps: [[String]] = [
        // 1: todos, the broadcast journal, and the epoch.
        [
            """
            CREATE TABLE todos (
              id TEXT PRIMARY KEY NOT NULL,
              seq_no INTEGER NOT NULL,
              created_at INTEGER NOT NULL,
              title TEXT NOT NULL,
              subtitle TEXT NOT NULL,
              priority TEXT NOT NULL,
              completed_at INTEGER,
              deleted INTEGER NOT NULL,
              version INTEGER NOT NULL
            )
            """,
            """
            CREATE TABLE journal (
              seq INTEGER PRIMARY KEY NOT NULL,
              type TEXT NOT NULL,
              payload BLOB NOT NULL,
              recorded_at INTEGER NOT NULL
            )
            """,
            "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)",
            "INSERT INTO meta (key, value) VALUES ('epoch', lower(hex(randomblob(16))))",
            "INSERT INTO meta (key, value) VALUES ('head', '0')",
        ],
        // 2: commit_log, a view whose rows are committed changes: inserting a batch of rows
        // upserts each todo, appends its journal entry and moves the head, all in the one
        // statement, which SQLite runs as its own transaction (one round trip per group commit).
        [
            """
            CREATE VIEW commit_log AS SELECT
              NULL AS id, NULL AS seq_no, NULL AS created_at, NULL AS title, NULL AS subtitle,
              NULL AS priority, NULL AS completed_at, NULL AS deleted, NULL AS version,
              NULL AS seq, NULL AS type, NULL AS payload, NULL AS recorded_at
            WHERE 0
            """,
            """
            CREATE TRIGGER commit_log_insert INSTEAD OF INSERT ON commit_log
            BEGIN
              INSERT INTO todos (id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version)
              VALUES (NEW.id, NEW.seq_no, NEW.created_at, NEW.title, NEW.subtitle, NEW.priority, NEW.completed_at,
                NEW.deleted, NEW.version)
              ON CONFLICT(id) DO UPDATE SET created_at = excluded.created_at, title = excluded.title,
                subtitle = excluded.subtitle, priority = excluded.priority, completed_at = excluded.completed_at,
                deleted = excluded.deleted, version = excluded.version;
              INSERT INTO journal (seq, type, payload, recorded_at)
              VALUES (NEW.seq, NEW.type, NEW.payload, NEW.recorded_at);
              UPDATE meta SET value = CAST(NEW.seq AS TEXT) WHERE key = 'head';
            END
            """,
        ],
        // 3: the journal's age prune (every 64 commits) finds old entries by index, not by
        // reading every entry: without it a full journal made each 64th commit tens of ms slow.
        ["CREATE INDEX journal_recorded_at ON journal (recorded_at)"],
        // 4: on PostgreSQL, the journal's origin and the one-statement commit of several
        // daemons. One process owns a SQLite file, so nothing changes here; the step keeps
        // both engines' versions in step.
        ["SELECT 1"],
        // 5: idempotent writes. A journal entry keeps the client mutation id (`mid`) of the
        // write that caused it, unique among the entries retained; commit_log passes it on.
        [
            "ALTER TABLE journal ADD COLUMN mid TEXT",
            "CREATE UNIQUE INDEX journal_mid ON journal (mid) WHERE mid IS NOT NULL",
            "DROP TRIGGER commit_log_insert",
            "DROP VIEW commit_log",
            """
            CREATE VIEW commit_log AS SELECT
              NULL AS id, NULL AS seq_no, NULL AS created_at, NULL AS title, NULL AS subtitle,
              NULL AS priority, NULL AS completed_at, NULL AS deleted, NULL AS version,
              NULL AS seq, NULL AS type, NULL AS payload, NULL AS recorded_at, NULL AS mid
            WHERE 0
            """,
            """
            CREATE TRIGGER commit_log_insert INSTEAD OF INSERT ON commit_log
            BEGIN
              INSERT INTO todos (id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version)
              VALUES (NEW.id, NEW.seq_no, NEW.created_at, NEW.title, NEW.subtitle, NEW.priority, NEW.completed_at,
                NEW.deleted, NEW.version)
              ON CONFLICT(id) DO UPDATE SET created_at = excluded.created_at, title = excluded.title,
                subtitle = excluded.subtitle, priority = excluded.priority, completed_at = excluded.completed_at,
                deleted = excluded.deleted, version = excluded.version;
              INSERT INTO journal (seq, type, payload, recorded_at, mid)
              VALUES (NEW.seq, NEW.type, NEW.payload, NEW.recorded_at, NEW.mid);
              UPDATE meta SET value = CAST(NEW.seq AS TEXT) WHERE key = 'head';
            END
            """,
        ],
        // 6: on PostgreSQL, a commit is ordered under the lock and flushed after it (see there).
        // Nothing changes here; the step keeps both engines' versions in step.
        ["SELECT 1"],
        // 7: on PostgreSQL, a commit that may expect the head it read (see there). Nothing
        // changes here; the step keeps both engines' versions in step.
        ["SELECT 1"],
        // 8: on PostgreSQL, a commit that answers with the other daemons' entries before its
        // batch (see there). Nothing changes here; the step keeps both engines' versions in step.
        ["SELECT 1"],
        // 9: on PostgreSQL, a commit notifies only when a journal follower wants it (see
        // there). Nothing changes here; the step keeps both engines' versions in step.
        ["SELECT 1"],
        // 10: a todo's row may be written after the commit of its change (DeferredRows): each
        // journal entry keeps its todo's row id, and `materialized` is the seq through which
        // the rows hold every change (all of them, here). A build older than this one refuses
        // the database, so none reads rows that the journal is ahead of.
        [
            "ALTER TABLE journal ADD COLUMN row_id INTEGER",
            "INSERT INTO meta (key, value) SELECT 'materialized', value FROM meta WHERE key = 'head'",
        ],
        // 11: the age prune reads the journal from its oldest entry and stops at the first one
        // recorded late enough (entries are recorded in seq order), so it needs no index; the
        // index of step 3 cost every commit one or two more pages of the WAL to keep up.
        ["DROP INDEX IF EXISTS journal_recorded_at"],
    ]

    static func run(on connection: SQLiteConnection) async throws {
        let rows = try await connection.rows("PRAGMA user_version", [])
        let current = Int(rows.first?.column("user_version")?.integer ?? 0)
        if current > steps.count {
            throw StoreError(
                message: "The database has schema version \(current), newer than this build knows (\(steps.count))."
            )
        }
        for version in current..<steps.count {
            try await connection.exec("BEGIN IMMEDIATE")
            do {
                for statement in steps[version] { try await connection.exec(statement) }
                try await connection.exec("PRAGMA user_version = \(version + 1)")
                try await connection.exec("COMMIT")
            } catch {
                try? await connection.exec("ROLLBACK")
                throw error
            }
        }
    }
}
