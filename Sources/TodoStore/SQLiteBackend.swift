import EventStream
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SQLiteNIO
import TodoApp

/// SQLite in WAL mode in the data directory: one connection writes (one commit per batch), one
/// reads the journal, one checkpoints. All calls run on a thread pool, never on an event loop.
///
/// The writer never checkpoints (`wal_autocheckpoint=0`), so no commit waits for the WAL to be
/// copied into the database file: every `checkpointEvery` commits a passive checkpoint runs on
/// its own connection, beside the commits (one at a time).
final class SQLiteBackend: StorageBackend {
    private let writer: SQLiteConnection
    private let reader: SQLiteConnection
    private let checkpointer: SQLiteConnection
    let retention: JournalRetention
    private let logger: Logger
    private let checkpoints = NIOLockedValueBox(CheckpointState.idle(commitsSince: 0))

    /// Commits between two checkpoints.
    static let checkpointEvery = 64

    private enum CheckpointState {
        /// No checkpoint under way; commits since the last one.
        case idle(commitsSince: Int)
        case running(Task<Void, Never>, commitsSince: Int)
        case closed
    }

    private init(
        writer: SQLiteConnection,
        reader: SQLiteConnection,
        checkpointer: SQLiteConnection,
        retention: JournalRetention,
        logger: Logger
    ) {
        self.writer = writer
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
        threadPool: NIOThreadPool,
        eventLoop: any EventLoop,
        logger: Logger
    ) async throws -> SQLiteBackend {
        let path = (directory as NSString).appendingPathComponent(fileName)
        let writer = try await SQLiteConnection.open(
            storage: .file(path: path),
            threadPool: threadPool,
            logger: logger,
            on: eventLoop
        )
        do {
            try await writer.exec("PRAGMA journal_mode=WAL")
            try await writer.exec("PRAGMA synchronous=\(synchronousFull ? "FULL" : "NORMAL")")
            try await writer.exec("PRAGMA wal_autocheckpoint=0")
            // The whole working set stays in the writer's cache; pages are read through a map,
            // not a read(2) each.
            try await writer.exec("PRAGMA cache_size=-65536")
            try await writer.exec("PRAGMA mmap_size=268435456")
            // After a checkpoint the WAL restarts from its beginning; keep the file from staying large.
            try await writer.exec("PRAGMA journal_size_limit=67108864")
            try await Migrations.run(on: writer)
            let reader = try await SQLiteConnection.open(
                storage: .file(path: path),
                threadPool: threadPool,
                logger: logger,
                on: eventLoop
            )
            try await reader.exec("PRAGMA query_only=1")
            let checkpointer = try await SQLiteConnection.open(
                storage: .file(path: path),
                threadPool: threadPool,
                logger: logger,
                on: eventLoop
            )
            try await checkpointer.exec("PRAGMA synchronous=\(synchronousFull ? "FULL" : "NORMAL")")
            return SQLiteBackend(
                writer: writer,
                reader: reader,
                checkpointer: checkpointer,
                retention: retention,
                logger: logger
            )
        } catch {
            try? await writer.close()
            throw error
        }
    }

    func load() async throws -> LoadedState {
        let todoRows = try await writer.rows(
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
        let epochRows = try await writer.rows("SELECT value FROM meta WHERE key = 'epoch'", [])
        guard let epoch = epochRows.first?.column("value")?.string else {
            throw StoreError(message: "The journal has no epoch.")
        }
        let headRows = try await writer.rows("SELECT value FROM meta WHERE key = 'head'", [])
        let head = UInt64(headRows.first?.column("value")?.string ?? "0") ?? 0
        let oldest = try await oldestRetained() ?? head + 1
        let mutationRows = try await writer.rows(
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

    nonisolated(nonsending) func commit(
        _ batch: [CommitRecord],
        recordedAt time: Int64,
        prune: JournalPrune?
    ) async throws {
        guard !batch.isEmpty else { return }
        let recordedAt = SQLiteData.integer(SQLiteInt64(time))
        var binds: [SQLiteData] = []
        binds.reserveCapacity(batch.count * 14)
        for record in batch {
            let todo = record.todo
            binds += [
                .text(todo.id.lowercased), .integer(SQLiteInt64(record.rowID)),
                .integer(SQLiteInt64(todo.createdAt.millisecondsSince1970)), .text(todo.title),
                .text(todo.subtitle),
                .text(todo.priority.rawValue),
                todo.completedAt.map { .integer(SQLiteInt64($0.millisecondsSince1970)) } ?? .null,
                .integer(todo.deleted ? 1 : 0), .integer(SQLiteInt64(todo.version)),
                .integer(SQLiteInt64(record.entry.seq)), .text(record.entry.type),
                .blob(ByteBuffer(bytes: record.entry.payload)), recordedAt,
                record.entry.mid.map { .text($0) } ?? .null,
            ]
        }
        // One statement (see `Migrations`, steps 2 and 5) writes todos, journal and head atomically.
        let values = Array(repeating: "(?,?,?,?,?,?,?,?,?,?,?,?,?,?)", count: batch.count).joined(separator: ",")
        let insert = """
            INSERT INTO commit_log (id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version,
              seq, type, payload, recorded_at, mid)
            VALUES \(values)
            """
        do {
            guard let prune else {
                // Outside BEGIN … COMMIT the statement is its own transaction, durable on return.
                try await writer.exec(insert, binds)
                checkpointIfDue()
                return
            }
            try await writer.exec("BEGIN IMMEDIATE")
            do {
                try await writer.exec(insert, binds)
                // Keep the newest `maxEntries`, and drop what is older than `maxAgeSeconds`.
                try await writer.exec("DELETE FROM journal WHERE seq < ?", [.integer(SQLiteInt64(prune.keepFrom))])
                if let cutoff = prune.cutoff {
                    try await writer.exec("DELETE FROM journal WHERE recorded_at < ?", [.integer(SQLiteInt64(cutoff))])
                }
                try await writer.exec("COMMIT")
                checkpointIfDue()
            } catch {
                try? await writer.exec("ROLLBACK")
                throw error
            }
        } catch {
            logger.error("commit failed", metadata: ["error": "\(String(reflecting: error))"])
            throw error
        }
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

    /// Starts a passive checkpoint on its own connection every `checkpointEvery` commits,
    /// unless one is still running: commits go on meanwhile and never wait for it.
    private func checkpointIfDue() {
        let checkpointer = self.checkpointer
        let checkpoints = self.checkpoints
        let logger = self.logger
        checkpoints.withLockedValue { state in
            switch state {
            case .closed:
                return
            case .running(let task, let commits):
                state = .running(task, commitsSince: commits + 1)
            case .idle(let commits) where commits + 1 < Self.checkpointEvery:
                state = .idle(commitsSince: commits + 1)
            case .idle:
                let task = Task {
                    do {
                        try await checkpointer.exec("PRAGMA wal_checkpoint(PASSIVE)")
                    } catch {
                        logger.warning("WAL checkpoint failed", metadata: ["error": "\(String(reflecting: error))"])
                    }
                    checkpoints.withLockedValue { state in
                        if case .running(_, let commits) = state { state = .idle(commitsSince: commits) }
                    }
                }
                state = .running(task, commitsSince: 0)
            }
        }
    }

    func close() async {
        let running = checkpoints.withLockedValue { state -> Task<Void, Never>? in
            defer { state = .closed }
            if case .running(let task, _) = state { return task }
            return nil
        }
        await running?.value
        // What is left in the WAL goes into the database file now, not on the next start.
        try? await checkpointer.exec("PRAGMA wal_checkpoint(TRUNCATE)")
        try? await checkpointer.close()
        try? await reader.close()
        try? await writer.close()
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
