import Foundation
import Synchronization
import TodoApp
import VaporCSQLite

/// The SQLite store's writing connection, called synchronously on the store's thread
/// (`StoreThread`): a batch's commit is one transaction of statements prepared once, when the
/// connection opens, so no SQL is parsed per commit and no thread is woken for it.
///
/// It uses the SQLite that sqlite-nio bundles (its C module), since sqlite-nio's own API runs
/// every call on a thread pool and prepares a statement per call.
final class SQLiteWriter: @unchecked Sendable {
    // Invariant: every method runs on the store's thread, one at a time (the store actor's
    // executor, or `StoreThread.perform` before the store exists); `handle` and the statements
    // are never touched elsewhere. `walFrames` is atomic and may be read from any thread.
    private var handle: OpaquePointer?
    private var statements: Statements?
    private let frames = WALFrames()
    /// The todos whose newest change is in the journal and not yet in their row.
    private var deferred: DeferredRows
    /// Whether `deferred` is what the database holds. Not at open (a crash may have left
    /// changes in the journal only), nor after a failed commit (it noted a batch that was not
    /// stored): it is then read back from the journal before the next commit.
    private var deferredKnown = false
    /// The journal's head as of the last commit (or read back with `deferred`).
    private(set) var head: UInt64 = 0
    /// The head and the watermark as the `meta` table holds them: written with each prune
    /// and at close, so behind between them (the journal's newest entry is the head then).
    private var stored = Meta(head: 0, watermark: 0)

    private struct Meta: Equatable {
        var head: UInt64
        var watermark: UInt64
    }

    /// The steps SQLite's machine took for the last prune by age (finding where it ends, and
    /// the delete): how much of the journal it read.
    private(set) var agePruneSteps = 0

    /// The WAL's size in frames as of the last commit (SQLite's WAL hook sets it).
    var walFrames: Int { frames.count.load(ordering: .relaxed) }

    private final class WALFrames: Sendable {
        let count = Atomic<Int>(0)
    }

    private struct Statements {
        let begin: OpaquePointer
        let commit: OpaquePointer
        let rollback: OpaquePointer
        let saveTodo: OpaquePointer
        let appendEntry: OpaquePointer
        let moveHead: OpaquePointer
        let moveWatermark: OpaquePointer
        let pruneBefore: OpaquePointer
        let firstRecent: OpaquePointer
        let readMeta: OpaquePointer
        let readAfter: OpaquePointer

        var all: [OpaquePointer] {
            [
                begin, commit, rollback, saveTodo, appendEntry, moveHead, moveWatermark, pruneBefore, firstRecent,
                readMeta, readAfter,
            ]
        }
    }

    /// A failed SQLite call: its result code and SQLite's message.
    struct Failure: Error, CustomStringConvertible {
        let code: Int32
        let message: String
        var description: String { "SQLite error \(code): \(message)" }
    }

    /// Where the prune by age ends: the first entry, from the oldest on, recorded at or after
    /// ?1. Entries before it go (none past the watermark). Entries are recorded in seq order
    /// (after a clock set back, an entry stamped older than the one before it waits for its
    /// turn), so this reads only the entries the prune drops and one more, with no index on
    /// `recorded_at` to keep up at every commit (schema step 11).
    /// How long a statement waits for a lock another process holds before it fails (`busy`).
    static let busyTimeoutMs = 5_000

    static let firstRecentSQL = "SELECT seq FROM journal WHERE recorded_at >= ?1 ORDER BY seq LIMIT 1"

    /// The size the WAL file is cut back to when it starts over (`PRAGMA journal_size_limit`).
    static let walSizeLimitBytes = 64 << 20
    /// The database's page size, as the file has it (set when the database was created; see
    /// `GroupCommitStore.defaultSQLitePageBytes`): a WAL frame holds one page. Read once at
    /// open, never changed after.
    private(set) var pageBytes = 4_096

    /// SQLite copies text and blobs bound with this destructor before the call returns.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    private init(handle: OpaquePointer, deferred: DeferredRows) {
        self.handle = handle
        self.deferred = deferred
    }

    /// Opens the database at `path` (which migrations have prepared) for writing. The writer
    /// never checkpoints (`wal_autocheckpoint=0`): `SQLiteBackend` does, on a connection of
    /// its own. With `synchronousFull`, a commit's WAL frames are gathered into writes of up
    /// to `walWriteBufferBytes` (`SQLiteDataSyncVFS`; zero: none).
    /// `cacheKiB`: the connection's page cache (`PRAGMA cache_size`), in KiB. `deferredTodos`:
    /// how many todos may have their newest change in the journal only (`DeferredRows`); 0
    /// writes every todo's row with the commit of its change. `retainedEntries`: the journal
    /// entries the store keeps at most (bounds how long a row waits).
    static func open(
        path: String,
        synchronousFull: Bool,
        walWriteBufferBytes: Int = 0,
        cacheKiB: Int = GroupCommitStore.defaultSQLiteCacheKiB,
        deferredTodos: Int = 0,
        retainedEntries: UInt64 = .max
    ) throws -> SQLiteWriter {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
        // The WAL is synced with fdatasync (SQLiteDataSyncVFS), where the VFS could be made.
        // Its writes are gathered only where every commit syncs it: the sync is what makes
        // them reach the file before other connections learn of the commit.
        let vfs = SQLiteDataSyncVFS.shared?.name(writeBufferBytes: synchronousFull ? walWriteBufferBytes : 0)
        let opened = sqlite_nio_sqlite3_open_v2(path, &handle, flags, vfs)
        guard opened == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite_nio_sqlite3_errmsg($0)) } ?? "cannot open"
            if let handle { sqlite_nio_sqlite3_close_v2(handle) }
            throw Failure(code: opened, message: message)
        }
        // SQLite opens a file it may not write (its mode, its owner) read-only without a word;
        // every commit would then fail, and stay failing after the file is fixed.
        if sqlite_nio_sqlite3_db_readonly(handle, "main") == 1 {
            sqlite_nio_sqlite3_close_v2(handle)
            throw Failure(
                code: SQLITE_READONLY,
                message: "the database file \(path) is not writable by the daemon's user (check its owner and mode)"
            )
        }
        let writer = SQLiteWriter(
            handle: handle,
            deferred: DeferredRows(limit: deferredTodos, retainedEntries: retainedEntries)
        )
        do {
            // A lock held by another connection (a reader's snapshot never blocks a WAL writer;
            // this is for anything else) fails the commit after this long, not never.
            sqlite_nio_sqlite3_busy_timeout(handle, Int32(Self.busyTimeoutMs))
            try writer.execute("PRAGMA journal_mode=WAL")
            try writer.execute("PRAGMA synchronous=\(synchronousFull ? "FULL" : "NORMAL")")
            try writer.execute("PRAGMA wal_autocheckpoint=0")
            // Pages in the database file are read through a map, not a read(2) each, so the
            // cache mostly holds pages of the WAL. Keep it small: SQLite empties it of pages
            // past the end of the file at every commit, and a B-tree balance that moves pages
            // (it parks one at the page of the 1 GiB lock byte) makes that a scan of the
            // whole cache. With 64 MiB, a daemon under steady load spent about a fifth of its
            // CPU per request on that (docs/DECISIONS.md, "The writer's page cache").
            try writer.execute("PRAGMA cache_size=-\(max(cacheKiB, 64))")
            writer.pageBytes = try writer.integerPragma("page_size")
            try writer.execute("PRAGMA mmap_size=268435456")
            // After a checkpoint the WAL restarts from its beginning; keep the file from staying large.
            try writer.execute("PRAGMA journal_size_limit=\(walSizeLimitBytes)")
            // Replaces the automatic checkpoint's hook (turned off above): after each commit,
            // note the WAL's size for the checkpoints.
            sqlite_nio_sqlite3_wal_hook(
                handle,
                { context, _, _, pages in
                    guard let context else { return SQLITE_OK }
                    Unmanaged<WALFrames>.fromOpaque(context).takeUnretainedValue().count.store(
                        Int(pages),
                        ordering: .relaxed
                    )
                    return SQLITE_OK
                },
                Unmanaged.passUnretained(writer.frames).toOpaque()
            )
            writer.statements = Statements(
                begin: try writer.prepare("BEGIN IMMEDIATE"),
                commit: try writer.prepare("COMMIT"),
                rollback: try writer.prepare("ROLLBACK"),
                saveTodo: try writer.prepare(
                    """
                    INSERT INTO todos (id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version)
                    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                    ON CONFLICT(id) DO UPDATE SET created_at = excluded.created_at, title = excluded.title,
                      subtitle = excluded.subtitle, priority = excluded.priority, completed_at = excluded.completed_at,
                      deleted = excluded.deleted, version = excluded.version
                    """
                ),
                appendEntry: try writer.prepare(
                    "INSERT INTO journal (seq, type, payload, recorded_at, mid, row_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
                ),
                moveHead: try writer.prepare("UPDATE meta SET value = CAST(?1 AS TEXT) WHERE key = 'head'"),
                moveWatermark: try writer.prepare(
                    "UPDATE meta SET value = CAST(?1 AS TEXT) WHERE key = 'materialized'"
                ),
                // Never past the watermark: an entry whose change is not in its row yet stays.
                pruneBefore: try writer.prepare("DELETE FROM journal WHERE seq < ?1 AND seq <= ?2"),
                firstRecent: try writer.prepare(firstRecentSQL),
                readMeta: try writer.prepare("SELECT value FROM meta WHERE key = ?1"),
                readAfter: try writer.prepare(
                    "SELECT seq, payload, row_id, recorded_at FROM journal WHERE seq > ?1 ORDER BY seq"
                )
            )
        } catch {
            writer.close()
            throw error
        }
        return writer
    }

    /// Commits the batch in one transaction: each journal entry appended (recorded at
    /// `recordedAt`, with its todo's row id), the rows of the todos that `DeferredRows` says are
    /// due saved, and with `prune` the head and the watermark stored and the journal entries it
    /// names dropped (none past the watermark).
    /// Durable when it returns; on a throw nothing of it is stored.
    func commit(_ batch: [CommitRecord], recordedAt: Int64, prune: JournalPrune?) throws {
        guard let statements else { throw Failure(code: SQLITE_MISUSE, message: "the writer is closed") }
        guard let last = batch.last else { return }
        // The WAL's own check runs at every sync (SQLiteDataSyncVFS): a removed data directory
        // fails the commit at once. The database file alone replaced or deleted is looked for
        // at most every `movedCheckInterval` (a path look-up; the cost first measured for it
        // was mostly that of the WAL's check, then an `fstat`: see `LinkCount`).
        if let gone { throw gone }
        let now = ContinuousClock.now
        if now - lastMovedCheck >= Self.movedCheckInterval {
            try checkNotMoved()
            lastMovedCheck = now
        }
        if !deferredKnown { try readDeferred() }
        // Noted before the transaction; a failure below makes the next commit read it back.
        deferredKnown = false
        for record in batch {
            deferred.changed(record.todo, rowID: record.rowID, seq: record.entry.seq, recordedAt: recordedAt)
        }
        let newHead = last.entry.seq
        let due = deferred.takeDue(head: newHead, prune: prune)
        let watermark = deferred.watermark(head: newHead)
        try transaction(statements) {
            for record in batch {
                let entry = record.entry
                let append = statements.appendEntry
                try bind(append, 1, Int64(entry.seq))
                try bind(append, 2, entry.type)
                try bind(append, 3, bytes: entry.payload)
                try bind(append, 4, recordedAt)
                try bind(append, 5, entry.mid)
                try bind(append, 6, record.rowID)
                try run(append)
            }
            for row in due { try save(row.todo, rowID: row.rowID, statements) }
            if let prune {
                // The head and the watermark are stored with each prune, which needs them, not
                // with every commit (they share a page the commit would write only for them):
                // the journal's newest entry is the head, and a watermark stored behind means only
                // more of the journal read back after a crash. A prune never drops an entry past
                // the watermark stored with it.
                try storeMeta(head: newHead, watermark: watermark, statements)
                // Keep the newest `maxEntries`, and drop what is older than `maxAgeSeconds`: one
                // range of the oldest seqs, never past the watermark.
                var keepFrom = Int64(prune.keepFrom)
                if let cutoff = prune.cutoff {
                    keepFrom = max(keepFrom, try firstEntry(recordedFrom: cutoff, statements) ?? Int64(newHead) + 1)
                }
                try bind(statements.pruneBefore, 1, keepFrom)
                try bind(statements.pruneBefore, 2, Int64(watermark))
                try run(statements.pruneBefore)
                // Read and reset after every prune, so that one by count only adds nothing to
                // the next prune by age's count.
                let steps =
                    sqlite_nio_sqlite3_stmt_status(statements.firstRecent, SQLITE_STMTSTATUS_VM_STEP, 1)
                    + sqlite_nio_sqlite3_stmt_status(statements.pruneBefore, SQLITE_STMTSTATUS_VM_STEP, 1)
                if prune.cutoff != nil { agePruneSteps = Int(steps) }
            }
        }
        head = newHead
        if prune != nil { stored = Meta(head: newHead, watermark: watermark) }
        deferredKnown = true
    }

    /// Saves every todo still waiting for its row, and moves the watermark to the head: the
    /// store is closing, and the next start then has no journal entry to apply.
    func writeDeferred() throws {
        guard let statements else { throw Failure(code: SQLITE_MISUSE, message: "the writer is closed") }
        if !deferredKnown { try readDeferred() }
        guard !deferred.isEmpty || stored != Meta(head: head, watermark: head) else { return }
        deferredKnown = false
        let rows = deferred.takeAll()
        try transaction(statements) {
            for row in rows { try save(row.todo, rowID: row.rowID, statements) }
            try storeMeta(head: head, watermark: head, statements)
        }
        stored = Meta(head: head, watermark: head)
        deferredKnown = true
    }

    /// Stores the head and the watermark (the `meta` rows `head` and `materialized`).
    private func storeMeta(head: UInt64, watermark: UInt64, _ statements: Statements) throws {
        try bind(statements.moveHead, 1, Int64(head))
        try run(statements.moveHead)
        try bind(statements.moveWatermark, 1, Int64(watermark))
        try run(statements.moveWatermark)
    }

    /// Stores `now` under `health_probe` in `meta` (read by nothing): a write that needs what
    /// a commit needs (room on the disk, a writable file), so it fails where a commit would.
    /// (Writing a value unchanged would not do: SQLite leaves a page it would not change alone.)
    func probe(at now: Int64) throws {
        guard let statements else { throw Failure(code: SQLITE_MISUSE, message: "the writer is closed") }
        if let gone { throw gone }
        try checkNotMoved()
        try transaction(statements) {
            try execute(
                "INSERT INTO meta (key, value) VALUES ('health_probe', '\(now)') "
                    + "ON CONFLICT(key) DO UPDATE SET value = excluded.value"
            )
        }
    }

    /// Refuses, as a commit would, once the database file or the write-ahead log is no longer
    /// where it was opened (deleted, with its directory or alone, or replaced): what `/healthz`
    /// looks at while commits succeed, so that it says so before a write fails. Writes nothing.
    func checkFiles() throws {
        guard let handle else { throw Failure(code: SQLITE_MISUSE, message: "the writer is closed") }
        try checkNotMoved()
        var wal: UnsafeMutablePointer<sqlite3_file>?
        let result = sqlite_nio_sqlite3_file_control(handle, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal)
        guard result == SQLITE_OK, let wal, SQLiteDataSyncVFS.shared?.walLinkCount(wal) == 0 else { return }
        throw filesGone("the write-ahead log")
    }

    /// `file` was found deleted or replaced: the failure every later commit and probe throws.
    private func filesGone(_ file: String) -> Failure {
        let failure = Failure(
            code: SQLITE_IOERR,
            message: "\(file) was deleted or replaced while the daemon ran; nothing more is written to it "
                + "(restart the daemon once the data directory is restored)"
        )
        gone = failure
        return failure
    }

    /// A store file found deleted or replaced: every commit and probe fails with it from then
    /// on, whatever found it (a commit's check, or `checkFiles` for `/healthz`).
    private var gone: Failure?

    /// How often a commit looks whether the database file is still where it was opened.
    static let movedCheckInterval = Duration.milliseconds(20)
    private var lastMovedCheck = ContinuousClock.now - .seconds(1)

    /// Keeps the WAL's frames when the connection closes (no cut back to empty, no delete):
    /// for a database file that is gone, they are the commits it held that are left.
    func keepWALAtClose() {
        guard let handle else { return }
        _ = sqlite_nio_sqlite3_exec(handle, "PRAGMA journal_size_limit=-1", nil, nil, nil)
        var persist: Int32 = 1
        _ = sqlite_nio_sqlite3_file_control(handle, "main", SQLITE_FCNTL_PERSIST_WAL, &persist)
    }

    /// Whether the database file is no longer where it was opened (deleted or replaced). One
    /// `fstat` and one `stat` (SQLite's `SQLITE_FCNTL_HAS_MOVED`).
    func databaseFileMoved() -> Bool {
        guard handle != nil else { return false }
        var moved: Int32 = 0
        let result = sqlite_nio_sqlite3_file_control(handle, "main", SQLITE_FCNTL_HAS_MOVED, &moved)
        return result == SQLITE_OK && moved != 0
    }

    /// Refuses to write to a database file that is no longer where it was opened (deleted,
    /// with its directory or alone, or replaced): SQLite would go on writing to the open file,
    /// and every write acknowledged from then on would be lost at the next start.
    private func checkNotMoved() throws {
        guard databaseFileMoved() else { return }
        throw filesGone("the database file")
    }

    /// Runs `body` in one transaction, committed when it returns; on a throw nothing of it is
    /// stored.
    private func transaction(_ statements: Statements, _ body: () throws -> Void) throws {
        try run(statements.begin)
        do {
            try body()
            try run(statements.commit)
        } catch {
            // A failed COMMIT may have rolled back already (then SQLite is in autocommit).
            if let handle, sqlite_nio_sqlite3_get_autocommit(handle) == 0 {
                _ = try? run(statements.rollback)
            }
            throw error
        }
    }

    /// Todos waiting for their row now.
    var deferredCount: Int { deferred.rows.count }

    /// The todos whose newest change is in the journal and not in their row (oldest change
    /// first), as the database holds them: what a store that opens it applies to the rows.
    func waitingRows() throws -> [DeferredRows.Row] {
        if !deferredKnown { try readDeferred() }
        return deferred.waiting
    }

    private func save(_ todo: Todo, rowID: Int64, _ statements: Statements) throws {
        let save = statements.saveTodo
        try bind(save, 1, id: todo.id)
        try bind(save, 2, rowID)
        try bind(save, 3, todo.createdAt.millisecondsSince1970)
        try bind(save, 4, todo.title)
        try bind(save, 5, todo.subtitle)
        try bind(save, 6, todo.priority.rawValue)
        try bind(save, 7, todo.completedAt?.millisecondsSince1970)
        try bind(save, 8, todo.deleted ? 1 : 0)
        try bind(save, 9, Int64(todo.version))
        try run(save)
    }

    /// Reads back what waits for its row: the journal's entries after the watermark, as the
    /// database holds them (`DeferredRows` starts over from them).
    private func readDeferred() throws {
        guard let statements else { throw Failure(code: SQLITE_MISUSE, message: "the writer is closed") }
        let storedHead = try readMeta("head", statements)
        let watermark = try readMeta("materialized", statements)
        stored = Meta(head: storedHead, watermark: watermark)
        var rebuilt = deferred.emptied
        let read = statements.readAfter
        defer {
            sqlite_nio_sqlite3_reset(read)
            sqlite_nio_sqlite3_clear_bindings(read)
        }
        try bind(read, 1, Int64(watermark))
        var newest: UInt64 = 0
        while true {
            let stepped = sqlite_nio_sqlite3_step(read)
            if stepped == SQLITE_DONE { break }
            guard stepped == SQLITE_ROW else { throw failure(stepped) }
            let seq = UInt64(sqlite_nio_sqlite3_column_int64(read, 0))
            newest = seq
            let count = Int(sqlite_nio_sqlite3_column_bytes(read, 1))
            let payload: [UInt8] =
                sqlite_nio_sqlite3_column_blob(read, 1).map { pointer in
                    Array(UnsafeRawBufferPointer(start: pointer, count: count))
                } ?? []
            let rowID: Int64? =
                sqlite_nio_sqlite3_column_type(read, 2) == SQLITE_NULL ? nil : sqlite_nio_sqlite3_column_int64(read, 2)
            let todo: Todo
            do {
                todo = try DeferredRows.todo(inEntry: seq, payload: payload, rowID: rowID)
            } catch {
                throw Failure(code: SQLITE_CORRUPT, message: error.message)
            }
            // `todo(inEntry:)` checked the row id.
            rebuilt.changed(todo, rowID: rowID ?? 0, seq: seq, recordedAt: sqlite_nio_sqlite3_column_int64(read, 3))
        }
        deferred = rebuilt
        // Every entry past the stored watermark was read, in seq order: the newest one is the
        // head, unless none is newer than the stored head (or the journal ends at the watermark).
        head = max(storedHead, newest)
        deferredKnown = true
    }

    /// The seq of the oldest entry recorded at or after `cutoff` that comes after only entries
    /// recorded before it (`firstRecentSQL`); nil when every entry was recorded before it.
    private func firstEntry(recordedFrom cutoff: Int64, _ statements: Statements) throws -> Int64? {
        let read = statements.firstRecent
        defer {
            sqlite_nio_sqlite3_reset(read)
            sqlite_nio_sqlite3_clear_bindings(read)
        }
        try bind(read, 1, cutoff)
        switch sqlite_nio_sqlite3_step(read) {
        case SQLITE_ROW: return sqlite_nio_sqlite3_column_int64(read, 0)
        case SQLITE_DONE: return nil
        case let failed: throw failure(failed)
        }
    }

    private func readMeta(_ key: String, _ statements: Statements) throws -> UInt64 {
        let read = statements.readMeta
        defer {
            sqlite_nio_sqlite3_reset(read)
            sqlite_nio_sqlite3_clear_bindings(read)
        }
        try bind(read, 1, key)
        let stepped = sqlite_nio_sqlite3_step(read)
        guard stepped == SQLITE_ROW else {
            if stepped == SQLITE_DONE { throw Failure(code: SQLITE_CORRUPT, message: "the journal has no \(key)") }
            throw failure(stepped)
        }
        guard let text = sqlite_nio_sqlite3_column_text(read, 0), let value = UInt64(String(cString: text)) else {
            throw Failure(code: SQLITE_CORRUPT, message: "the journal's \(key) is not a number")
        }
        return value
    }

    /// Copies the WAL into the database file on this connection, between two commits (a
    /// passive checkpoint: it waits for no reader). Returns the WAL's size in frames and how
    /// many of them are in the database file now; when the two are equal, the next commit
    /// starts the WAL over from its beginning.
    func checkpoint() throws -> (walFrames: Int, copied: Int) {
        guard let handle else { throw Failure(code: SQLITE_MISUSE, message: "the writer is closed") }
        var walFrames: Int32 = 0
        var copied: Int32 = 0
        let result = sqlite_nio_sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, &walFrames, &copied)
        guard result == SQLITE_OK else { throw failure(result) }
        return (Int(walFrames), Int(copied))
    }

    /// The connection's `PRAGMA cache_size`: pages when positive, KiB when negative.
    func cacheSize() throws -> Int { try integerPragma("cache_size") }

    /// The value of `PRAGMA name` (one that answers with a number).
    private func integerPragma(_ name: String) throws -> Int {
        guard let handle else { throw Failure(code: SQLITE_MISUSE, message: "the writer is closed") }
        var statement: OpaquePointer?
        let prepared = sqlite_nio_sqlite3_prepare_v2(handle, "PRAGMA \(name)", -1, &statement, nil)
        guard prepared == SQLITE_OK, let statement else { throw failure(prepared) }
        defer { sqlite_nio_sqlite3_finalize(statement) }
        let stepped = sqlite_nio_sqlite3_step(statement)
        guard stepped == SQLITE_ROW else { throw failure(stepped) }
        return Int(sqlite_nio_sqlite3_column_int64(statement, 0))
    }

    /// Finalises the statements and closes the connection; later commits throw.
    func close() {
        for statement in statements?.all ?? [] { sqlite_nio_sqlite3_finalize(statement) }
        statements = nil
        if let handle { sqlite_nio_sqlite3_close_v2(handle) }
        handle = nil
    }

    deinit {
        close()
    }

    // MARK: Statements

    private func execute(_ sql: String) throws {
        guard let handle else { throw Failure(code: SQLITE_MISUSE, message: "the writer is closed") }
        let result = sqlite_nio_sqlite3_exec(handle, sql, nil, nil, nil)
        guard result == SQLITE_OK else { throw failure(result) }
    }

    private func prepare(_ sql: String) throws -> OpaquePointer {
        var statement: OpaquePointer?
        let result = sqlite_nio_sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard result == SQLITE_OK, let statement else { throw failure(result) }
        return statement
    }

    /// Steps a statement that returns no rows to its end, then resets it and its bindings.
    private func run(_ statement: OpaquePointer) throws {
        let result = sqlite_nio_sqlite3_step(statement)
        sqlite_nio_sqlite3_reset(statement)
        sqlite_nio_sqlite3_clear_bindings(statement)
        guard result == SQLITE_DONE else { throw failure(result) }
    }

    private func bind(_ statement: OpaquePointer, _ index: Int32, _ value: Int64) throws {
        try check(sqlite_nio_sqlite3_bind_int64(statement, index, value))
    }

    private func bind(_ statement: OpaquePointer, _ index: Int32, _ value: Int64?) throws {
        guard let value else { return try check(sqlite_nio_sqlite3_bind_null(statement, index)) }
        try bind(statement, index, value)
    }

    private func bind(_ statement: OpaquePointer, _ index: Int32, _ value: String?) throws {
        guard var value else { return try check(sqlite_nio_sqlite3_bind_null(statement, index)) }
        try check(value.withUTF8 { bindText(statement, index, $0) })
    }

    /// A UUID as its canonical lowercase text, formatted on the stack (no string made).
    private func bind(_ statement: OpaquePointer, _ index: Int32, id: UUID) throws {
        let result = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 36) { buffer in
            bindText(statement, index, UnsafeBufferPointer(rebasing: buffer[..<id.writeLowercased(into: buffer)]))
        }
        try check(result)
    }

    /// Binds UTF-8 text with its length, so text holding U+0000 is stored whole (SQLite copies
    /// it before returning); SQLite's result code.
    private func bindText(_ statement: OpaquePointer, _ index: Int32, _ utf8: UnsafeBufferPointer<UInt8>) -> Int32 {
        // An empty buffer may have no address, and SQLite stores NULL for a null pointer.
        guard let base = utf8.baseAddress, !utf8.isEmpty else {
            return sqlite_nio_sqlite3_bind_text(statement, index, "", 0, Self.transient)
        }
        return base.withMemoryRebound(to: CChar.self, capacity: utf8.count) { text in
            sqlite_nio_sqlite3_bind_text64(
                statement,
                index,
                text,
                UInt64(utf8.count),
                Self.transient,
                UInt8(SQLITE_UTF8)
            )
        }
    }

    private func bind(_ statement: OpaquePointer, _ index: Int32, bytes: [UInt8]) throws {
        let result = bytes.withUnsafeBytes { raw in
            guard let base = raw.baseAddress else { return sqlite_nio_sqlite3_bind_zeroblob(statement, index, 0) }
            return sqlite_nio_sqlite3_bind_blob64(statement, index, base, UInt64(raw.count), Self.transient)
        }
        try check(result)
    }

    private func check(_ result: Int32) throws {
        guard result == SQLITE_OK else { throw failure(result) }
    }

    private func failure(_ code: Int32) -> Failure {
        Failure(code: code, message: handle.map { String(cString: sqlite_nio_sqlite3_errmsg($0)) } ?? "closed")
    }
}
