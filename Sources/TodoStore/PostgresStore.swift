import EventStream
import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import TodoApp

/// The todo store on PostgreSQL, shared by several daemons: one total order across all of them.
///
/// Writes are group-committed like `GroupCommitStore`'s, but the version checks and the seq
/// assignment happen inside the database transaction: each batch first locks the single
/// `stream_state` row (which serialises committers across daemons), reads the touched todos,
/// applies the writes, takes the next seqs from `head`, writes todos and journal rows, moves
/// `head` and sends `NOTIFY` with the new head, all in one transaction. So `seq` is gapless and
/// global, and a failed transaction leaves nothing behind.
///
/// Reads go to the database (no cache to go stale when other daemons write). A journal follower
/// (`JournalFollower`) hands other daemons' broadcasts to the hub.
public actor PostgresStore: ServedStore {

    let client: PostgresClient
    let connector: PostgresConnector
    let retention: JournalRetention
    let logger: Logger
    let claims = LocalClaims()
    let health = DatabaseHealth()
    private let now: @Sendable () -> Timestamp
    private let epoch: String
    private let eventLoopGroup: any EventLoopGroup

    private var clientTask: Task<Void, Never>?
    private var follower: JournalFollower?
    private var commitLatency = LatencyHistogram()
    private var commitsSincePrune = 0
    /// Batches being executed.
    private var executing = 0
    /// `close` waiting for the batches under way to finish.
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []
    private var closed = false

    private init(
        client: PostgresClient,
        clientTask: Task<Void, Never>,
        connector: PostgresConnector,
        epoch: String,
        retention: JournalRetention,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger,
        now: @escaping @Sendable () -> Timestamp
    ) {
        self.client = client
        self.clientTask = clientTask
        self.connector = connector
        self.epoch = epoch
        self.retention = retention
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        self.now = now
    }

    /// Connects (retrying for up to `startupTimeout` while the database is unreachable),
    /// migrates the schema under an advisory lock, and reads the epoch.
    ///
    /// Throws `StoreError` with a one-line message that names the database but never the
    /// password.
    public static func open(
        settings: PostgresSettings,
        retention: JournalRetention = JournalRetention(),
        startupTimeout: Duration = .seconds(30),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "todostream.store"),
        now: @escaping @Sendable () -> Timestamp = Timestamp.now
    ) async throws -> PostgresStore {
        let connector = try PostgresConnector(settings: settings)
        let client = PostgresClient(
            configuration: connector.clientConfiguration,
            eventLoopGroup: eventLoopGroup,
            backgroundLogger: logger
        )
        let clientTask = Task { await client.run() }
        let deadline = ContinuousClock.now.advanced(by: startupTimeout)
        var delay = Duration.milliseconds(100)
        var epoch: String?
        var lastError = ""
        while epoch == nil {
            do {
                epoch = try await client.withLease(timeout: settings.acquireTimeout) { connection in
                    try await PostgresMigrations.run(on: connection, logger: logger)
                    var epoch: String?
                    for try await value in try await connection.query(
                        "SELECT epoch FROM stream_state WHERE id = 1",
                        logger: logger
                    ).decode(String.self) {
                        epoch = value
                    }
                    guard let epoch else { throw StoreError(message: "the database has no stream_state row") }
                    return epoch
                }
            } catch let error as StoreError {
                clientTask.cancel()
                throw error
            } catch {
                lastError = Self.describe(error)
                guard ContinuousClock.now < deadline else { break }
                logger.warning(
                    "cannot reach PostgreSQL yet; retrying",
                    metadata: ["database": "\(settings)", "reason": "\(lastError)"]
                )
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
        guard let epoch else {
            clientTask.cancel()
            throw StoreError(message: "cannot reach PostgreSQL at \(settings): \(lastError)")
        }
        logger.info("PostgreSQL store open", metadata: ["database": "\(settings)", "epoch": "\(epoch)"])
        return PostgresStore(
            client: client,
            clientTask: clientTask,
            connector: connector,
            epoch: epoch,
            retention: retention,
            eventLoopGroup: eventLoopGroup,
            logger: logger,
            now: now
        )
    }

    /// A short, safe description of a database error: the SQLSTATE and message the server
    /// sent, or the kind of connection failure. Never the query's binds or the password.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let state = error.serverInfo?[.sqlState], let message = error.serverInfo?[.message] {
                return "\(state) \(message)"
            }
            return "\(error.code)"
        }
        if error is DatabaseUnavailable { return "no connection within the timeout" }
        if let error = error as? StoreError { return error.message }
        return "\(type(of: error))"
    }

    public var isHealthy: Bool { health.isUp }

    public var metrics: (commitLatency: LatencyHistogram, pendingWrites: Int) { (commitLatency, 0) }

    // MARK: Reads

    func readStored(id: UUID?) async throws(AppError) -> [Todo] {
        let logger = self.logger
        let timeout = connector.settings.acquireTimeout
        do {
            let todos = try await client.withLease(timeout: timeout) { connection in
                let query: PostgresQuery
                if let id {
                    query = """
                        SELECT id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version
                        FROM todos WHERE id = \(id.lowercased)
                        """
                } else {
                    query = """
                        SELECT id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version
                        FROM todos ORDER BY created_at DESC, seq_no DESC
                        """
                }
                return try await Self.todos(connection.query(query, logger: logger)).map(\.todo)
            }
            recordHealth(up: true)
            return todos
        } catch {
            recordHealth(up: false, error)
            throw .unavailable
        }
    }

    /// Decodes rows of `SELECT id, seq_no, created_at, title, subtitle, priority, completed_at,
    /// deleted, version`.
    static func todos(_ rows: PostgresRowSequence) async throws -> [(rowID: Int64, todo: Todo)] {
        var todos: [(rowID: Int64, todo: Todo)] = []
        for try await (id, seqNo, createdAt, title, subtitle, priority, completedAt, deleted, version) in rows.decode(
            (String, Int64, Int64, String, String, String, Int64?, Bool, Int64).self
        ) {
            let todo = try StoredTodo.decode(
                id: id,
                createdAt: createdAt,
                title: title,
                subtitle: subtitle,
                priority: priority,
                completedAt: completedAt,
                deleted: deleted,
                version: version
            )
            todos.append((seqNo, todo))
        }
        return todos
    }

    func recordHealth(up: Bool, _ error: (any Error)? = nil) {
        guard health.recordPool(up: up) else { return }
        if up {
            logger.notice("PostgreSQL answers again", metadata: ["database": "\(connector.settings)"])
        } else {
            logger.error(
                "PostgreSQL is unavailable",
                metadata: ["database": "\(connector.settings)", "reason": "\(error.map(Self.describe) ?? "")"]
            )
        }
    }

    // MARK: Batches

    /// Runs the batch in order: each run of consecutive writes commits in one transaction
    /// (versions checked and seqs taken inside it), each read goes to the database after the
    /// writes before it committed.
    public func execute(_ batch: [ModelRequest]) async -> [ModelAnswer] {
        guard !closed else {
            return batch.map { request in
                switch request {
                case .read: return .read(.failure(.unavailable))
                case .write: return .write(.failure(.unavailable))
                }
            }
        }
        executing += 1
        defer {
            executing -= 1
            if executing == 0 {
                for waiter in idleWaiters { waiter.resume() }
                idleWaiters.removeAll()
            }
        }
        var answers: [ModelAnswer] = []
        answers.reserveCapacity(batch.count)
        var index = 0
        while index < batch.count {
            if case .read(let read) = batch[index] {
                do {
                    answers.append(.read(.success(try await readStored(id: read.id))))
                } catch {
                    answers.append(.read(.failure(error)))
                }
                index += 1
                continue
            }
            var writes: [TodoWrite] = []
            while index < batch.count, case .write(let write) = batch[index] {
                writes.append(write)
                index += 1
            }
            commitsSincePrune += 1
            let prune = commitsSincePrune >= GroupCommitStore.commitsPerPrune
            if prune { commitsSincePrune = 0 }
            let started = ContinuousClock.now
            let results = await commit(writes, time: now(), prune: prune)
            commitLatency.record(ContinuousClock.now - started)
            answers.append(contentsOf: results.map { .write($0) })
        }
        return answers
    }

    // MARK: JournalReader

    public func position() async throws -> JournalPosition {
        let logger = self.logger
        let epoch = self.epoch
        return try await client.withLease(timeout: connector.settings.acquireTimeout) { connection in
            var position = JournalPosition(epoch: epoch, head: 0, oldest: 1)
            for try await (head, oldest) in try await connection.query(
                "SELECT head, (SELECT MIN(seq) FROM journal) FROM stream_state WHERE id = 1",
                logger: logger
            ).decode((Int64, Int64?).self) {
                let head = UInt64(max(0, head))
                position = JournalPosition(
                    epoch: epoch,
                    head: head,
                    oldest: min(oldest.map { UInt64(max(0, $0)) } ?? head + 1, head + 1)
                )
            }
            return position
        }
    }

    public func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry] {
        guard through > after else { return [] }
        let logger = self.logger
        return try await client.withLease(timeout: connector.settings.acquireTimeout) { connection in
            try await Self.entries(on: connection, after: after, through: through, logger: logger)
        }
    }

    static func entries(
        on connection: PostgresConnection,
        after: UInt64,
        through: UInt64,
        logger: Logger
    ) async throws -> [JournalEntry] {
        var entries: [JournalEntry] = []
        for try await (seq, type, payload) in try await connection.query(
            "SELECT seq, type, payload FROM journal WHERE seq > \(Int64(after)) AND seq <= \(Int64(through)) ORDER BY seq",
            logger: logger
        ).decode((Int64, String, ByteBuffer).self) {
            entries.append(
                JournalEntry(seq: UInt64(seq), type: type, payload: Array(payload.readableBytesView))
            )
        }
        return entries
    }

    // MARK: Following

    public func follow(
        after: UInt64,
        publish: @escaping @Sendable ([JournalEntry]) -> Void,
        resynchronized: @escaping @Sendable (UInt64) -> Void
    ) async {
        guard follower == nil, !closed else { return }
        let follower = JournalFollower(
            connector: connector,
            claims: claims,
            health: health,
            after: after,
            eventLoop: eventLoopGroup.any(),
            logger: logger,
            publish: publish,
            resynchronized: resynchronized
        )
        self.follower = follower
        follower.start()
    }

    public func close() async {
        guard !closed else { return }
        closed = true
        follower?.stop()
        // Batches under way are answered before the pool goes away.
        if executing > 0 {
            await withCheckedContinuation { idleWaiters.append($0) }
        }
        clientTask?.cancel()
        clientTask = nil
    }
}
