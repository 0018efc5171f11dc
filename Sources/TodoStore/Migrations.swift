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
        ]
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
