import EventStream
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SQLiteNIO
import TodoApp

/// SQLite in WAL mode in the data directory: one connection writes (one commit per batch), one
/// reads, one checkpoints.
///
/// The writer (`SQLiteWriter`) is called synchronously on the store's thread, with statements
/// prepared once. The reader and the checkpointer are sqlite-nio connections, whose calls run on
/// a thread pool, never on an event loop. The writer does not checkpoint on its own
/// (`wal_autocheckpoint=0`), so no commit waits for the WAL to be copied into the database
/// file: every `checkpointEvery` commits a passive checkpoint runs on its own connection,
/// beside the commits (one at a time), and runs again when it left a large WAL behind, so that
/// the WAL starts over; only a WAL that grows large all the same has its tail copied by the
/// writer before a commit (`CheckpointStateMachine`).
final class SQLiteBackend: StorageBackend {
    private let writer: SQLiteWriter
    private let thread: StoreThread
    private let reader: SQLiteConnection
    private let checkpointer: SQLiteConnection
    let retention: JournalRetention
    private let logger: Logger
    private let checkpoints: NIOLockedValueBox<Checkpoints>
    /// The data directory's lock, given up at `close()`.
    private let directoryLock: DirectoryLock?
    /// Where the database file was opened.
    private let path: String
    /// Failed commits and checkpoints are logged the first time, then at most once per interval
    /// with a count (storage that fails, a full disk, fails every batch: hundreds a second).
    private let failureLogs = NIOLockedValueBox((commits: LogThrottle(), checkpoints: LogThrottle()))

    /// Commits between the starts of two background copies of the WAL.
    static let checkpointEvery = 64
    /// How long the checkpoint at close waits for other processes' readers.
    static let closeCheckpointWaitMs = 1_000
    /// The WAL's size from which copies run again at once to catch up, and from which the
    /// writer copies the tail itself (see `CheckpointStateMachine`), in bytes of pages.
    static let restartBytes = 4 << 20
    static let tailBytes = 16 << 20
    /// The WAL's size from which the writer copies the tail whatever the copies did: what the
    /// WAL file is cut back to when it starts over (64 MiB).
    static let limitBytes = SQLiteWriter.walSizeLimitBytes

    /// `limitBytes` in WAL frames of `pageBytes` each.
    static func limitFrames(pageBytes: Int) -> Int { limitBytes / pageBytes }

    private struct Checkpoints {
        var machine: CheckpointStateMachine
        /// The background copy, while one runs.
        var copy: Task<Void, Never>?

        /// The thresholds in frames of the database's pages.
        init(pageBytes: Int) {
            machine = CheckpointStateMachine(
                copyEvery: SQLiteBackend.checkpointEvery,
                restartFrames: SQLiteBackend.restartBytes / pageBytes,
                tailFrames: SQLiteBackend.tailBytes / pageBytes,
                limitFrames: SQLiteBackend.limitFrames(pageBytes: pageBytes),
                maxPasses: 4
            )
        }
    }

    private init(
        writer: SQLiteWriter,
        thread: StoreThread,
        reader: SQLiteConnection,
        checkpointer: SQLiteConnection,
        retention: JournalRetention,
        logger: Logger,
        directoryLock: DirectoryLock?,
        path: String
    ) {
        self.directoryLock = directoryLock
        self.path = path
        self.writer = writer
        self.checkpoints = NIOLockedValueBox(Checkpoints(pageBytes: writer.pageBytes))
        self.thread = thread
        self.reader = reader
        self.checkpointer = checkpointer
        self.retention = retention
        self.logger = logger
    }

    static let fileName = "todostream.sqlite"

    static func open(
        directory: String,
        retention: JournalRetention,
        synchronousFull: Bool,
        walWriteBufferBytes: Int,
        cacheKiB: Int,
        pageBytes: Int,
        deferredTodos: Int,
        threadPool: NIOThreadPool,
        eventLoop: any EventLoop,
        thread: StoreThread,
        logger: Logger,
        directoryLock: DirectoryLock?
    ) async throws -> SQLiteBackend {
        let path = (directory as NSString).appendingPathComponent(fileName)
        // The reader migrates the schema first, then only reads.
        let reader = try await SQLiteConnection.open(
            storage: .file(path: path),
            threadPool: threadPool,
            logger: logger,
            on: eventLoop
        )
        var opened: (writer: SQLiteWriter?, checkpointer: SQLiteConnection?) = (nil, nil)
        do {
            // The page size of a database created now (one that has pages keeps its own):
            // before anything is written, the WAL mode's header included.
            try await reader.exec("PRAGMA page_size=\(pageBytes)")
            try await reader.exec("PRAGMA journal_mode=WAL")
            try await Migrations.run(on: reader)
            try await reader.exec("PRAGMA query_only=1")
            // sqlite-nio's busy handler retries for ever: another process holding a lock (a
            // backup, an operator's shell) would hold a read up for as long. A bounded wait, as
            // the writer has, then `unavailable`.
            try await reader.exec("PRAGMA busy_timeout=\(SQLiteWriter.busyTimeoutMs)")
            let writer = try await thread.perform {
                try SQLiteWriter.open(
                    path: path,
                    synchronousFull: synchronousFull,
                    walWriteBufferBytes: walWriteBufferBytes,
                    cacheKiB: cacheKiB,
                    deferredTodos: deferredTodos,
                    retainedEntries: retention.maxEntries
                )
            }
            opened.writer = writer
            let checkpointer = try await SQLiteConnection.open(
                storage: .file(path: path),
                threadPool: threadPool,
                logger: logger,
                on: eventLoop
            )
            opened.checkpointer = checkpointer
            try await checkpointer.exec("PRAGMA synchronous=\(synchronousFull ? "FULL" : "NORMAL")")
            // The background copies never wait (PASSIVE); the one at close waits this long for
            // another process's readers, then leaves the WAL for the next start.
            try await checkpointer.exec("PRAGMA busy_timeout=\(Self.closeCheckpointWaitMs)")
            return SQLiteBackend(
                writer: writer,
                thread: thread,
                reader: reader,
                checkpointer: checkpointer,
                retention: retention,
                logger: logger,
                directoryLock: directoryLock,
                path: path
            )
        } catch {
            // The futures, not the async calls: a start cancelled by a stop signal must still close them.
            try? await opened.checkpointer?.close().get()
            if let writer = opened.writer { _ = try? await thread.perform { writer.close() } }
            try? await reader.close().get()
            throw error
        }
    }

    func load() async throws -> LoadedState {
        let todoRows = try await reader.rows(
            "SELECT id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version FROM todos",
            []
        )
        var todos: [(rowID: Int64, todo: Todo)] = []
        todos.reserveCapacity(todoRows.count)
        for row in todoRows {
            guard let id = row.column("id")?.string, let rowID = row.column("seq_no")?.integer,
                let createdAt = row.column("created_at")?.integer
            else { throw StoreError(message: "A stored todo row is damaged.") }
            let todo = try StoredTodo.decode(
                id: id,
                createdAt: Int64(createdAt),
                title: row.column("title")?.string ?? "",
                subtitle: row.column("subtitle")?.string ?? "",
                priority: row.column("priority")?.string ?? "",
                completedAt: row.column("completed_at")?.integer.map(Int64.init),
                deleted: (row.column("deleted")?.integer ?? 0) != 0,
                version: Int64(row.column("version")?.integer ?? 0)
            )
            todos.append((Int64(rowID), todo))
        }
        // Changes whose rows were not written yet (DeferredRows) are in the journal after the
        // watermark: the writer reads them back (it needs them for its commits too), and each
        // waiting todo's newest change replaces its row.
        let writer = self.writer
        // So does the head: the stored one is written with each prune and at close, and the
        // journal's newest entry is the head between them.
        let (waiting, head) = try await thread.perform { (try writer.waitingRows(), writer.head) }
        if !waiting.isEmpty {
            var index: [UUID: Int] = [:]
            for (position, entry) in todos.enumerated() { index[entry.todo.id] = position }
            for row in waiting {
                let entry = (rowID: row.rowID, todo: row.todo)
                if let position = index[row.todo.id] {
                    todos[position] = entry
                } else {
                    index[row.todo.id] = todos.count
                    todos.append(entry)
                }
            }
        }
        let epochRows = try await reader.rows("SELECT value FROM meta WHERE key = 'epoch'", [])
        guard let epoch = epochRows.first?.column("value")?.string else {
            throw StoreError(message: "The journal has no epoch.")
        }
        let oldest = try await oldestRetained() ?? head + 1
        let mutationRows = try await reader.rows(
            "SELECT seq, type, payload, mid, recorded_at FROM journal WHERE mid IS NOT NULL ORDER BY seq",
            []
        )
        var mutations: [RememberedMutations.Applied] = []
        mutations.reserveCapacity(mutationRows.count)
        for row in mutationRows {
            guard let seq = row.column("seq")?.integer, let type = row.column("type")?.string,
                var payload = row.column("payload")?.blob, let mid = row.column("mid")?.string,
                let recordedAt = row.column("recorded_at")?.integer
            else { throw StoreError(message: "A journal entry with a mid is damaged.") }
            let bytes = payload.readBytes(length: payload.readableBytes) ?? []
            mutations.append(
                RememberedMutations.Applied(
                    entry: JournalEntry(seq: UInt64(seq), type: type, payload: bytes, mid: mid),
                    recordedAt: Int64(recordedAt)
                )
            )
        }
        return LoadedState(
            todos: todos,
            position: JournalPosition(epoch: epoch, head: head, oldest: oldest),
            mutations: mutations
        )
    }

    /// A write of the probe's time under a key of its own in `meta`, on the store's thread.
    nonisolated(nonsending) func probe() async throws {
        assert(thread.isCurrent, "SQLite writes run on the store's thread")
        try writer.probe(at: Timestamp.now().millisecondsSince1970)
    }

    /// The database file and the WAL looked for, on the store's thread (no write).
    nonisolated(nonsending) func checkFiles() async throws {
        assert(thread.isCurrent, "the writer's files are looked at on the store's thread")
        try writer.checkFiles()
    }

    /// Commits synchronously: the caller is the store, on the store's thread.
    nonisolated(nonsending) func commit(
        _ batch: [CommitRecord],
        recordedAt: Int64,
        prune: JournalPrune?
    ) async throws {
        guard !batch.isEmpty else { return }
        assert(thread.isCurrent, "SQLite commits run on the store's thread")
        if case .copyTail = checkpoints.withLockedValue({ $0.machine.beforeCommit() }) { copyTail() }
        do {
            try writer.commit(batch, recordedAt: recordedAt, prune: prune)
        } catch {
            if case .log(let leftOut) = failureLogs.withLockedValue({ $0.commits.happened(at: ContinuousClock.now) }) {
                logger.error("commit failed", metadata: ["error": "\(error)", "failures.unlogged": "\(leftOut)"])
            }
            throw error
        }
        checkpointIfDue()
    }

    func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry] {
        guard through > after else { return [] }
        let rows = try await reader.rows(
            "SELECT seq, type, payload, mid FROM journal WHERE seq > ? AND seq <= ? ORDER BY seq",
            [.integer(SQLiteInt64(after)), .integer(SQLiteInt64(through))]
        )
        return rows.compactMap { row in
            guard let seq = row.column("seq")?.integer, let type = row.column("type")?.string,
                var payload = row.column("payload")?.blob
            else { return nil }
            return JournalEntry(
                seq: UInt64(seq),
                type: type,
                payload: payload.readBytes(length: payload.readableBytes) ?? [],
                mid: row.column("mid")?.string
            )
        }
    }

    func oldestRetained() async throws -> UInt64? {
        let rows = try await reader.rows("SELECT MIN(seq) AS oldest FROM journal", [])
        return rows.first?.column("oldest")?.integer.map { UInt64($0) }
    }

    /// Starts the background copy of the WAL (a passive checkpoint on its own connection) every
    /// `checkpointEvery` commits, unless one is still running: commits go on meanwhile and never
    /// wait for it.
    private func checkpointIfDue() {
        let checkpointer = self.checkpointer
        let failureLogs = self.failureLogs
        let checkpoints = self.checkpoints
        let logger = self.logger
        let writer = self.writer
        checkpoints.withLockedValue { state in
            guard case .startCopy = state.machine.committed(walFrames: writer.walFrames) else { return }
            state.copy = Task {
                var again = true
                while again {
                    var result: CheckpointStateMachine.CopyResult?
                    do {
                        let row = try await checkpointer.rows("PRAGMA wal_checkpoint(PASSIVE)", []).first
                        // Compared with the WAL as the writer has it now, not as the copy saw it
                        // when it started: commits went on meanwhile.
                        result = CheckpointStateMachine.CopyResult(
                            walFrames: writer.walFrames,
                            copied: row?.column("checkpointed")?.integer ?? 0
                        )
                    } catch {
                        Self.logCheckpointFailure(error, failureLogs, logger)
                    }
                    again = checkpoints.withLockedValue { state in
                        guard case .copyAgain = state.machine.copyEnded(result) else {
                            state.copy = nil
                            return false
                        }
                        return true
                    }
                }
            }
        }
    }

    /// Copies what the background copies left in the WAL, on the writer before a commit, so
    /// that the commit starts the WAL over.
    private func copyTail() {
        do {
            let started = ContinuousClock.now
            let (walFrames, copied) = try writer.checkpoint()
            logger.debug(
                "WAL tail copied",
                metadata: ["wal.frames": "\(walFrames)", "duration": "\(ContinuousClock.now - started)"]
            )
            if copied < walFrames {
                logger.debug("WAL not restarted: a reader holds it", metadata: ["wal.frames": "\(walFrames)"])
            }
        } catch {
            Self.logCheckpointFailure(error, failureLogs, logger)
        }
    }

    private static func logCheckpointFailure(
        _ error: any Error,
        _ logs: NIOLockedValueBox<(commits: LogThrottle, checkpoints: LogThrottle)>,
        _ logger: Logger
    ) {
        guard case .log(let leftOut) = logs.withLockedValue({ $0.checkpoints.happened(at: ContinuousClock.now) })
        else { return }
        logger.warning(
            "WAL checkpoint failed",
            metadata: ["error": "\(String(reflecting: error))", "failures.unlogged": "\(leftOut)"]
        )
    }

    func close() async {
        let running = checkpoints.withLockedValue { state -> Task<Void, Never>? in
            state.machine.close()
            return state.copy
        }
        await running?.value
        // The rows still waiting are written, so that the next start applies no journal entry.
        let writer = self.writer
        let logger = self.logger
        _ = try? await thread.perform {
            do {
                try writer.writeDeferred()
            } catch {
                logger.warning("rows not written at close", metadata: ["error": "\(error)"])
            }
        }
        // A database file deleted or replaced while the daemon ran still holds every commit in
        // the file the daemon has open: saved before anything else touches the WAL.
        let moved = (try? await thread.perform { writer.databaseFileMoved() }) ?? false
        let saved = moved ? await saveDatabaseWhoseFileIsGone() : false
        if moved, !saved {
            // The WAL is what is left of those commits: kept as it is.
            _ = try? await thread.perform { writer.keepWALAtClose() }
        }
        // What is left in the WAL goes into the database file now, not on the next start;
        // unless another process is reading the database: the stop does not wait for it.
        if !moved { await checkpointAtClose() }
        try? await checkpointer.close().get()
        try? await reader.close().get()
        _ = try? await thread.perform { writer.close() }
        if moved { Self.setAsideTheWAL(of: path, saved: saved, logger: logger) }
        directoryLock?.release()
    }

    /// Copies what is left in the WAL into the database file, and empties the WAL.
    private func checkpointAtClose() async {
        do {
            let row = try await checkpointer.rows("PRAGMA wal_checkpoint(TRUNCATE)", []).first
            if row?.column("busy")?.integer == 1 {
                logger.notice(
                    "WAL left for the next start: another process has the database open in a transaction"
                )
            }
        } catch {
            logger.notice("WAL left for the next start", metadata: ["error": "\(String(reflecting: error))"])
        }
    }
}

extension SQLiteBackend {
    /// The WAL at `path` belongs to the database file that is gone: left there, the next start
    /// would apply it to whatever file is there now. Removed once everything was saved; else
    /// left where no file took the database's place (the start then refuses, and says why),
    /// and moved aside where one did.
    fileprivate static func setAsideTheWAL(of path: String, saved: Bool, logger: Logger) {
        let files = FileManager.default
        if saved {
            for suffix in ["-wal", "-shm"] { try? files.removeItem(atPath: path + suffix) }
        } else if files.fileExists(atPath: path) {
            let aside = path + "-wal.of-a-replaced-file-\(Timestamp.now().millisecondsSince1970)"
            try? files.moveItem(atPath: path + "-wal", toPath: aside)
            try? files.removeItem(atPath: path + "-shm")
            logger.critical("the write-ahead log of the replaced database file was moved to \(aside)")
        }
    }

    /// The database file was deleted or replaced while the daemon ran (`databaseFileMoved`). Every
    /// commit is still in the file the daemon has open and its WAL; the checkpoint at close
    /// would copy them into that file and empty the WAL, and the only copy would go with the
    /// process. So a complete copy is written first (`VACUUM INTO`, from the database as the
    /// daemon sees it): put where the file was when nothing is there now (the next start then
    /// finds everything), next to it when another file took its place (not overwritten: an
    /// operator may have restored a backup there).
    /// Returns whether it was saved.
    fileprivate func saveDatabaseWhoseFileIsGone() async -> Bool {
        let saving = path + ".saving"
        let saved =
            FileManager.default.fileExists(atPath: path)
            ? path + ".saved-\(Timestamp.now().millisecondsSince1970)" : path
        do {
            try? FileManager.default.removeItem(atPath: saving)
            try await checkpointer.exec("VACUUM INTO ?", [.text(saving)])
            // Not over a file that appeared meanwhile.
            guard saved != path || !FileManager.default.fileExists(atPath: path) else {
                throw StoreError(message: "a file appeared at \(path) while the database was being saved")
            }
            try FileManager.default.moveItem(atPath: saving, toPath: saved)
            logger.error(
                "the database file was deleted or replaced while the daemon ran; every commit was saved to \(saved)",
                metadata: ["path": "\(saved)"]
            )
            return true
        } catch {
            logger.critical(
                "the database file was deleted or replaced while the daemon ran, and saving its commits failed; they are in the write-ahead log of a file no longer in the data directory",
                metadata: ["error": "\(String(reflecting: error))"]
            )
            return false
        }
    }
}

extension SQLiteConnection {
    /// Runs one statement on the thread pool and resumes the caller on its own executor (the
    /// store's event loop) once it is done: the future-based call, so no hop through the global
    /// executor on the way back.
    nonisolated(nonsending) func exec(_ sql: String, _ binds: [SQLiteData] = []) async throws {
        let done: EventLoopFuture<Void> = self.query(sql, binds) { _ in }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            done.whenComplete { continuation.resume(with: $0) }
        }
    }

    func rows(_ sql: String, _ binds: [SQLiteData]) async throws -> [SQLiteRow] {
        let collected = RowCollector()
        try await self.query(sql, binds) { row in collected.append(row) }
        return collected.rows
    }
}

/// Collects rows from sqlite-nio's callback, which runs on the thread pool.
private final class RowCollector: @unchecked Sendable {
    // Invariant: `append` is called only from inside one `query` call, serially, and `rows` is
    // read only after that call returned.
    private(set) var rows: [SQLiteRow] = []
    func append(_ row: SQLiteRow) { rows.append(row) }
}
