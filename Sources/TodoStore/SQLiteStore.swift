import EventStream
import Foundation
import Logging
import NIOCore
import NIOPosix
import TodoApp

extension GroupCommitStore {
    /// The SQLite writer's page cache unless configured, in KiB: SQLite's own default.
    public static let defaultSQLiteCacheKiB = 2000
    /// The page size of a new SQLite database unless configured, in bytes (SQLite's own
    /// default is 4,096). An existing database keeps the size it was created with.
    /// docs/DECISIONS.md, "SQLite pages of 8 KiB".
    public static let defaultSQLitePageBytes = 8_192

    /// Whether SQLite takes `bytes` as a page size: a power of two from 512 to 65,536.
    public static func isSQLitePageSize(_ bytes: Int) -> Bool {
        (512...65_536).contains(bytes) && bytes & (bytes - 1) == 0
    }

    /// Todos whose newest change may be in the journal only, unless configured (DeferredRows).
    public static let defaultSQLiteDeferredTodos = 16_384

    /// Opens (creating if needed) the SQLite store in `directory`. The store runs on `thread`
    /// (a new one when nil), where it commits synchronously; give the sequencer's thread so that
    /// a batch and its commit run on one thread. `eventLoop` is where the journal reads of
    /// resuming clients complete. `cacheKiB`: the writer's page cache, in KiB. `pageBytes`: the
    /// page size a database created now gets (a power of two from 512 to 65,536; an existing
    /// database keeps its own). `deferredTodos`:
    /// how many todos may have their newest change in the journal and not yet in their row (0:
    /// each row is written with the commit of its change).
    ///
    /// `lockDirectory`: hold the directory's lock (`DirectoryLock`) while open, so that no second
    /// store (in this process or another) opens it meanwhile.
    ///
    /// Throws `StoreError` with a one-line message naming the directory when it cannot be
    /// created or written, or when another store holds it.
    public static func sqlite(
        directory: String,
        retention: JournalRetention = JournalRetention(),
        synchronousFull: Bool = true,
        walWriteBufferBytes: Int = 1 << 20,
        cacheKiB: Int = defaultSQLiteCacheKiB,
        pageBytes: Int = defaultSQLitePageBytes,
        deferredTodos: Int = defaultSQLiteDeferredTodos,
        threadPool: NIOThreadPool = .singleton,
        eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any(),
        thread: StoreThread? = nil,
        logger: Logger = Logger(label: "todostream.store"),
        now: @escaping @Sendable () -> Timestamp = Timestamp.now,
        lockDirectory: Bool = true
    ) async throws -> GroupCommitStore {
        guard isSQLitePageSize(pageBytes) else {
            throw StoreError(
                message: "The SQLite page size must be a power of two from 512 to 65536 bytes, not \(pageBytes)."
            )
        }
        try prepareDirectory(directory)
        let lock = lockDirectory ? try DirectoryLock.acquire(in: directory) : nil
        if let problem = orphanedLogProblem(directory) {
            lock?.release()
            throw StoreError(message: problem)
        }
        let thread = thread ?? StoreThread()
        let backend: SQLiteBackend
        do {
            backend = try await SQLiteBackend.open(
                directory: directory,
                retention: retention,
                synchronousFull: synchronousFull,
                walWriteBufferBytes: walWriteBufferBytes,
                cacheKiB: cacheKiB,
                pageBytes: pageBytes,
                deferredTodos: deferredTodos,
                threadPool: threadPool,
                eventLoop: eventLoop,
                thread: thread,
                logger: logger,
                directoryLock: lock
            )
        } catch let error as StoreError {
            lock?.release()
            throw error
        } catch is CancellationError {
            // A stop signal while the store opens: a stop, not a failure of the database.
            lock?.release()
            throw CancellationError()
        } catch {
            lock?.release()
            logger.error("cannot open database", metadata: ["error": "\(String(reflecting: error))"])
            throw StoreError(message: "cannot open the database in data directory \(directory)")
        }
        let state: LoadedState
        do {
            state = try await backend.load()
        } catch {
            await backend.close()
            if error is CancellationError { throw error }
            throw StoreError(message: "cannot read the database in data directory \(directory): \(error)")
        }
        return GroupCommitStore(backend: backend, state: state, executor: thread, now: now)
    }

    /// What is wrong with `directory` as a data directory before anything is made there: a
    /// file where it should be (`check-config` asks too, without creating anything).
    public static func dataDirectoryProblem(_ directory: String) -> String? {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), !isDirectory.boolValue
        else { return nil }
        return "data directory \(directory) is not a directory"
    }

    /// A WAL that holds commits beside a database file that is missing or empty: starting would
    /// make a new, empty store (a new epoch) and SQLite would throw the WAL away with its data.
    /// Refused, so that the operator restores the file (or removes the WAL to start empty).
    static func orphanedLogProblem(_ directory: String) -> String? {
        let (database, wal) = sqliteFiles(in: directory)
        let walBytes = (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? NSNumber)?.intValue ?? 0
        guard walBytes > 0 else { return nil }
        let databaseBytes =
            (try? FileManager.default.attributesOfItem(atPath: database)[.size] as? NSNumber)?.intValue ?? 0
        guard databaseBytes == 0 else { return nil }
        return "the database file \(database) is missing or empty but its write-ahead log \(wal) holds "
            + "\(walBytes) bytes of commits: restore the database file, or remove the log to start with an "
            + "empty store (a new epoch)"
    }

    /// The paths of a SQLite store's database file and its write-ahead log in `directory`.
    public static func sqliteFiles(in directory: String) -> (database: String, wal: String) {
        let database = directory + "/" + SQLiteBackend.fileName
        return (database, database + "-wal")
    }

    static func prepareDirectory(_ directory: String) throws {
        if let problem = dataDirectoryProblem(directory) { throw StoreError(message: problem) }
        if !FileManager.default.fileExists(atPath: directory) {
            // Made for the daemon's user alone (0700, as PostgreSQL's), each missing level; a
            // directory that exists keeps its mode. On failure, which level and why.
            var path = directory.hasPrefix("/") ? "" : "."
            for component in directory.split(separator: "/") {
                path += "/" + component
                guard mkdir(path, 0o700) != 0 else { continue }
                let reason = errno
                if reason == EEXIST { continue }
                throw StoreError(
                    message: "cannot create data directory \(directory): \(path): "
                        + String(cString: strerror(reason)).lowercased()
                )
            }
        }
        guard access(directory, W_OK | X_OK) == 0 else {
            throw StoreError(message: "data directory \(directory) is not writable")
        }
    }
}
