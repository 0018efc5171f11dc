import Foundation
import Testing
import VaporCSQLite

@testable import TodoStore

/// The writer's VFS with gathered WAL writes, driven through SQLite's own API: what other
/// connections read after each commit, what survives a checkpoint and a reopening, and how many
/// writes reach the file.
@Suite struct SQLiteDataSyncVFSTests {
    /// A connection of SQLite's, on `path`, through the VFS named `vfs` (nil: SQLite's default).
    private final class Connection {
        let handle: OpaquePointer

        init(path: String, vfs: String?) throws {
            var handle: OpaquePointer?
            let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
            let opened = sqlite_nio_sqlite3_open_v2(path, &handle, flags, vfs)
            guard opened == SQLITE_OK, let handle else {
                if let handle { sqlite_nio_sqlite3_close_v2(handle) }
                throw Failure(message: "open: \(opened)")
            }
            self.handle = handle
        }

        deinit { sqlite_nio_sqlite3_close_v2(handle) }

        struct Failure: Error { let message: String }

        func execute(_ sql: String) throws {
            guard sqlite_nio_sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else {
                throw Failure(message: "\(sql): \(String(cString: sqlite_nio_sqlite3_errmsg(handle)))")
            }
        }

        /// The first column of the first row of `sql`, as text.
        func value(_ sql: String) throws -> String {
            var statement: OpaquePointer?
            guard sqlite_nio_sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
                throw Failure(message: "\(sql): \(String(cString: sqlite_nio_sqlite3_errmsg(handle)))")
            }
            defer { sqlite_nio_sqlite3_finalize(statement) }
            guard sqlite_nio_sqlite3_step(statement) == SQLITE_ROW,
                let text = sqlite_nio_sqlite3_column_text(statement, 0)
            else { throw Failure(message: "\(sql): no row") }
            return String(cString: text)
        }

        /// The WAL's file object (SQLite's `SQLITE_FCNTL_JOURNAL_POINTER` in WAL mode).
        func walFile() throws -> UnsafeMutablePointer<sqlite3_file> {
            var file: UnsafeMutablePointer<sqlite3_file>?
            guard sqlite_nio_sqlite3_file_control(handle, "main", SQLITE_FCNTL_JOURNAL_POINTER, &file) == SQLITE_OK,
                let file
            else { throw Failure(message: "no WAL file") }
            return file
        }
    }

    private func databasePath() -> String {
        (temporaryDirectory() as NSString).appendingPathComponent("gathered.sqlite")
    }

    /// Opens `path` through the gathering VFS with a buffer of `bytes`, in WAL mode with a sync
    /// per commit, and a page cache of ten pages (so that a large transaction spills pages to
    /// the WAL before its commit and reads them back from it).
    private func writer(_ path: String, bufferBytes: Int) throws -> Connection {
        let vfs = try #require(SQLiteDataSyncVFS.shared?.name(writeBufferBytes: bufferBytes))
        let connection = try Connection(path: path, vfs: vfs)
        try connection.execute("PRAGMA journal_mode=WAL")
        try connection.execute("PRAGMA synchronous=FULL")
        try connection.execute("PRAGMA wal_autocheckpoint=0")
        try connection.execute("PRAGMA cache_size=10")
        return connection
    }

    /// Buffers smaller than a frame (writes pass through), of a few frames (many writes per
    /// commit), above the 128 KiB that SQLite's own write takes at once, and larger than any
    /// commit here: every commit is read whole by another connection, in the transaction that
    /// spills pages the writer then reads back, after a checkpoint, and after reopening.
    @Test(arguments: [1_000, 20_000, 300_000, 8 << 20])
    func everyCommitIsReadWholeByAnotherConnection(bufferBytes: Int) throws {
        let path = databasePath()
        var rows = 0
        var bytes = 0
        do {
            let writer = try writer(path, bufferBytes: bufferBytes)
            try writer.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
            let reader = try Connection(path: path, vfs: nil)
            for round in 0..<6 {
                try writer.execute("BEGIN IMMEDIATE")
                for _ in 0..<60 {
                    rows += 1
                    let size = 500 + (rows * 97) % 3_000
                    bytes += size
                    try writer.execute("INSERT INTO t (id, v) VALUES (\(rows), randomblob(\(size)))")
                }
                // Rows written earlier in this transaction, whose pages were spilled: read back.
                let first = rows - 59
                #expect(try writer.value("SELECT count(*) FROM t WHERE id >= \(first)") == "60")
                try writer.execute("UPDATE t SET v = zeroblob(length(v)) WHERE id = \(first)")
                try writer.execute("COMMIT")
                #expect(try reader.value("SELECT count(*) || ':' || sum(length(v)) FROM t") == "\(rows):\(bytes)")
                #expect(try reader.value("SELECT hex(substr(v, 1, 4)) FROM t WHERE id = \(first)") == "00000000")
                if round == 2 {
                    #expect(try reader.value("PRAGMA wal_checkpoint(TRUNCATE)") == "0")
                }
            }
            // A rolled-back transaction leaves nothing; the next commit is read whole.
            try writer.execute("BEGIN IMMEDIATE")
            try writer.execute("INSERT INTO t (id, v) VALUES (100000, randomblob(50000))")
            try writer.execute("ROLLBACK")
            try writer.execute("INSERT INTO t (id, v) VALUES (100001, zeroblob(10))")
            #expect(try reader.value("SELECT count(*) FROM t WHERE id >= 100000") == "1")
        }
        let reopened = try Connection(path: path, vfs: nil)
        #expect(try reopened.value("PRAGMA integrity_check") == "ok")
        #expect(
            try reopened.value("SELECT count(*) || ':' || sum(length(v)) FROM t WHERE id <= \(rows)")
                == "\(rows):\(bytes)"
        )
    }

    /// A commit's frames (two writes each from SQLite) reach the file in one write when they
    /// fit the buffer, in several when they do not, and one by one without a buffer.
    @Test func aCommitsFramesReachTheFileInOneWriteWhenTheyFit() throws {
        func writes(bufferBytes: Int) throws -> (held: Int, made: Int) {
            let writer = try writer(databasePath(), bufferBytes: bufferBytes)
            try writer.execute("PRAGMA cache_size=-8000")
            try writer.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
            let vfs = try #require(SQLiteDataSyncVFS.shared)
            let state = vfs.state(of: try writer.walFile())
            let before = state.pointee.gathered
            // About 50 pages of rows in one transaction.
            try writer.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) INSERT INTO t SELECT i, randomblob(3000) FROM n"
            )
            let after = state.pointee.gathered
            return (after.held - before.held, after.made - before.made)
        }
        let whole = try writes(bufferBytes: 1 << 20)
        #expect(whole.held >= 100)
        #expect(whole.made == 1)
        let pieces = try writes(bufferBytes: 40_000)
        #expect(pieces.held >= 100)
        #expect(pieces.made > 1 && pieces.made <= pieces.held / 10 + 1)
        let none = try writes(bufferBytes: 0)
        #expect(none == (0, 0))
    }
}
