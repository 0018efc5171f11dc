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
/// `stream_state` row (which serialises committers across daemons), checks the touched todos,
/// takes the next seqs from `head`, writes todos and journal rows and moves `head`, all in one
/// transaction; it is flushed after the lock is released, and `NOTIFY` with the new head goes
/// out once it is durable (PostgresStore+Durability). So `seq` is gapless and global, and a
/// failed transaction leaves nothing behind.
///
/// Reads go to the database, so they see other daemons' writes at once: a daemon that knows
/// every todo as of a head (`KnownTodos`) fetches only the head and the journal's entries after
/// it, and reads every todo only when those cannot bring it there. A journal follower
/// (`JournalFollower`) hands other daemons' broadcasts to the hub.
public actor PostgresStore: ServedStore {

    let pool: FailoverPool
    let connector: PostgresConnector
    let retention: JournalRetention
    let logger: Logger
    let claims = LocalClaims()
    let health = DatabaseHealth()
    private let now: @Sendable () -> Timestamp
    private let epoch: String
    /// The journal's position read at opening, before the pool runs.
    private let opened: JournalPosition
    private let eventLoopGroup: any EventLoopGroup

    /// `runConnections()` was called: the pool runs (once only) in its caller's task.
    private var poolStarted = false
    private var following = false
    /// The journal follower, once `follow` runs: a commit asks the database for the entries
    /// after its cursor and hands it those that came back (step 8).
    var follower: JournalFollower?
    /// Whether other daemons have lately committed (their entries published here).
    public nonisolated let otherCommitters = OtherCommitters()
    public internal(set) var commitLatency = LatencyHistogram()
    /// Commits since the journal was last pruned (`commit`): the first commit after a start
    /// prunes, so that a retention lowered at a restart holds from the first write on.
    var commitsSincePrune = GroupCommitStore.commitsPerPrune - 1
    /// Every todo as of a head, for reads that find the head unmoved (`KnownTodos`).
    var known: KnownTodos?
    /// What this daemon last wrote of each todo, to stage a batch without reading it first.
    var guesses: StagingGuesses
    /// The highest head this daemon's own commits left (a lower bound of the head).
    var headSeen: Int64 = 0
    /// The journal's prune under way, if any (`commit`).
    var pruning: Task<Void, Never>?
    /// Batches being executed.
    private var executing = 0
    /// `close` waiting for the batches under way to finish.
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []
    private var closed = false

    private init(
        pool: FailoverPool,
        connector: PostgresConnector,
        opened: JournalPosition,
        retention: JournalRetention,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger,
        now: @escaping @Sendable () -> Timestamp
    ) {
        self.pool = pool
        self.connector = connector
        self.epoch = opened.epoch
        self.opened = opened
        self.retention = retention
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        self.now = now
        self.guesses = StagingGuesses(limit: connector.settings.stagingGuesses)
    }

    /// Connects (retrying for up to `startupTimeout` while no server of the list is usable),
    /// migrates the schema under an advisory lock, and reads the epoch and the journal's
    /// position, all on one connection of its own that is closed again. The pool starts on the
    /// server that connection chose, and runs nothing here: it runs inside `runConnections()`,
    /// for as long as its caller's task lets it.
    ///
    /// Throws `StoreError` with a one-line message that names the database but never the
    /// password.
    public static func open(
        settings: PostgresSettings,
        retention: JournalRetention = JournalRetention(),
        startupTimeout: Duration = .seconds(30),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        taskExecutor: (any TaskExecutor)? = nil,
        logger: Logger = Logger(label: "todostream.store"),
        now: @escaping @Sendable () -> Timestamp = Timestamp.now
    ) async throws -> PostgresStore {
        let connector = try PostgresConnector(settings: settings)
        let deadline = ContinuousClock.now.advanced(by: startupTimeout)
        var delay = Duration.milliseconds(100)
        var opened: (position: JournalPosition, server: Int)?
        var lastError = ""
        while opened == nil {
            // A start that is cancelled (a stop signal while starting) ends here, not at the
            // deadline.
            try Task.checkCancellation()
            do {
                opened = try await prepare(connector: connector, eventLoop: eventLoopGroup.any(), logger: logger)
            } catch let error as StoreError {
                throw error
            } catch let error as NoFittingServer where error.settingsRefused {
                // A wrong password or database name: waiting does not change it.
                throw StoreError(message: "PostgreSQL at \(settings) refused the connection: \(error)")
            } catch let error where Self.refusesTheSchema(error) {
                // Connected, and the server refused the schema's set-up for what the database
                // is: a privilege the user lacks, or a table of its own with one of our names.
                throw StoreError(
                    message:
                        "PostgreSQL at \(settings) refused to set up the schema: \(Self.describe(error)) (the user needs the right to create tables in the database, which must hold no tables of its own named as todostream's)"
                )
            } catch {
                try Task.checkCancellation()
                lastError = Self.describe(error)
                guard ContinuousClock.now < deadline else { break }
                logger.warning(
                    "cannot reach PostgreSQL yet; retrying",
                    metadata: ["database": "\(settings)", "reason": "\(lastError)"]
                )
                try await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
        guard let opened else {
            throw StoreError(message: "cannot reach PostgreSQL at \(settings): \(lastError)")
        }
        logger.info(
            "PostgreSQL store open",
            metadata: [
                "database": "\(settings)", "database.server": "\(connector.serverName(opened.server))",
                "epoch": "\(opened.position.epoch)",
            ]
        )
        let pool = FailoverPool(
            connector: connector,
            server: opened.server,
            eventLoopGroup: eventLoopGroup,
            taskExecutor: taskExecutor,
            logger: logger
        )
        return PostgresStore(
            pool: pool,
            connector: connector,
            opened: opened.position,
            retention: retention,
            eventLoopGroup: eventLoopGroup,
            logger: logger,
            now: now
        )
    }

    /// One attempt of `open`: connects to the first usable server of the list, migrates and
    /// reads the position, bounded by the acquire timeout like a pooled lease (a connection that
    /// overruns is closed). Returns the position and the server's index.
    private static func prepare(
        connector: PostgresConnector,
        eventLoop: any EventLoop,
        logger: Logger
    ) async throws -> (position: JournalPosition, server: Int) {
        let (connection, server) = try await connector.connectToFittingServer(on: eventLoop, id: 0, logger: logger)
        do {
            let position = try await PostgresClient.run(
                within: connector.settings.acquireTimeout,
                onTimeout: { connection.close() },
                {
                    try await PostgresMigrations.run(on: connection, logger: logger)
                    var position: JournalPosition?
                    for try await (epoch, head, oldest) in try await connection.query(
                        "SELECT epoch, head, (SELECT MIN(seq) FROM journal) FROM stream_state WHERE id = 1",
                        logger: logger
                    ).decode((String, Int64, Int64?).self) {
                        position = Self.position(epoch: epoch, head: head, oldest: oldest)
                    }
                    guard let position else {
                        throw StoreError(message: "the database has no stream_state row")
                    }
                    // The follower starts after this head: make sure no crash can take it back.
                    try await Self.flush(on: connection, logger: logger)
                    return position
                }
            )
            try? await connection.close()
            return (position, server)
        } catch {
            try? await connection.close()
            throw error
        }
    }

    static func position(epoch: String, head: Int64, oldest: Int64?) -> JournalPosition {
        let head = UInt64(max(0, head))
        return JournalPosition(
            epoch: epoch,
            head: head,
            oldest: min(oldest.map { UInt64(max(0, $0)) } ?? head + 1, head + 1)
        )
    }

    /// Checks what `open` would read before it connects (the TLS files `sslrootcert` and the
    /// like name), so that `check-config` says what `serve` would. Throws `StoreError`.
    public static func checkFiles(settings: PostgresSettings) throws {
        _ = try PostgresConnector(settings: settings)
    }

    /// Whether the server refused a statement for what the database is, not for how it is
    /// doing: a privilege (42501), an object that exists or does not (42P07, 42P01, 42703),
    /// or any other error of class 42 (syntax or access rule). Retrying does not change it.
    static func refusesTheSchema(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, error.code == .server,
            let state = error.serverInfo?[.sqlState]
        else { return false }
        return state.hasPrefix("42")
    }

    /// A short, safe description of a database error: the SQLSTATE and message the server
    /// sent, or the kind of connection failure. Never the query's binds or the password.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let state = error.serverInfo?[.sqlState], let message = error.serverInfo?[.message] {
                return "\(state) \(message)"
            }
            if error.code == .sslUnsupported { return "the server does not offer TLS (see sslmode)" }
            if let underlying = error.underlying { return describe(underlying) }
            return "\(error.code)"
        }
        if let error = error as? NIOConnectionError {
            if error.dnsAAAAError != nil || error.dnsAError != nil, error.connectionErrors.isEmpty {
                return "the host name \(error.host) is not found"
            }
            if let first = error.connectionErrors.first { return describe(first.error) }
            return "cannot connect to \(error.host):\(error.port)"
        }
        if let error = error as? SocketAddressError, case .unknown(let host, _) = error {
            return "the host name \(host) is not found"
        }
        if let error = error as? IOError { return String(cString: strerror(error.errnoCode)).lowercased() }
        if error is DatabaseUnavailable { return "no connection within the timeout" }
        if let error = error as? NoFittingServer { return error.description }
        if let error = error as? ServerChanged { return error.description }
        if let error = error as? StoreError { return error.message }
        return "\(type(of: error))"
    }

    /// Down while the pool has no server to write to (from the failure that started a
    /// selection until one is chosen), whatever else still answers: a read-only server, such
    /// as an old primary after a switchover, serves the journal feed's reads but no commit.
    public var isHealthy: Bool { health.isUp && !pool.isSelecting }

    public var lastSeenHealthy: Bool { isHealthy }

    // MARK: Reads

    func readStored(id: UUID?) async throws(AppError) -> [Todo] {
        let logger = self.logger
        let timeout = connector.settings.acquireTimeout
        do {
            if try await catchUpKnown(), let known {
                guard let id else {
                    var known = known
                    let list = known.list()
                    self.known = known
                    return list
                }
                return known.todo(id: id).map { [$0] } ?? []
            }
            let generation = pool.clientGeneration
            let read = try await pool.withLease(timeout: timeout) { connection in
                try await Self.readTodos(id: id, on: connection, logger: logger)
            }
            recordHealth(up: true)
            if id == nil { known = KnownTodos(head: read.head, generation: generation, rows: read.rows) }
            return read.rows.map(\.todo)
        } catch {
            recordHealth(up: false, error)
            throw .unavailable
        }
    }

    /// Journal entries a read fetches at most to move the known todos on; further behind, it
    /// reads every todo instead.
    static let knownCatchUpLimit = 512

    /// Moves the known todos on to the database's durable head with the journal's entries after
    /// them (one statement). False when there are none on this server, or the journal cannot
    /// bring them there (too far behind, pruned, a change made by hand): then every todo must be
    /// read.
    func catchUpKnown() async throws -> Bool {
        let generation = pool.clientGeneration
        guard let asked = known?.head else { return false }
        guard known?.generation == generation else {
            // Known on another server (before a failover): of no use here.
            known = nil
            return false
        }
        let logger = self.logger
        let read = try await pool.withLease(timeout: connector.settings.acquireTimeout) { connection in
            try await Self.readJournal(after: asked, limit: Self.knownCatchUpLimit, on: connection, logger: logger)
        }
        recordHealth(up: true)
        // The daemon's own commits may have moved them on meanwhile (on this server only).
        guard var current = known, current.generation == generation, pool.clientGeneration == generation,
            current.learned(read.entries, through: read.head)
        else {
            // Not to be tried again on every read: the next list read reads them all.
            known = nil
            return false
        }
        known = current
        return true
    }

    /// Reads the head and the todo with `id` (every todo, when nil) in one statement. A head
    /// not yet durable is flushed before this returns (PostgresStore+Durability).
    static func readTodos(
        id: UUID?,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> (head: Int64, rows: [(rowID: Int64, todo: Todo)]) {
        // The first columns say where the head is and whether a commit this snapshot sees may
        // not be durable yet; the todos follow, or one row of NULLs.
        let query: PostgresQuery
        if let id {
            query = """
                WITH d AS (\(unescaped: Self.headAndDurable))
                SELECT d.head, d.head > d.durable, t.id, t.seq_no, t.created_at, t.title, t.subtitle, t.priority,
                  t.completed_at, t.deleted, t.version
                FROM d LEFT JOIN todos t ON t.id = \(id.lowercased)
                """
        } else {
            query = """
                WITH d AS (\(unescaped: Self.headAndDurable))
                SELECT d.head, d.head > d.durable, t.id, t.seq_no, t.created_at, t.title, t.subtitle, t.priority,
                  t.completed_at, t.deleted, t.version
                FROM d LEFT JOIN todos t ON true
                ORDER BY t.created_at DESC, t.seq_no DESC
                """
        }
        var head: Int64 = -1
        var unflushed = false
        var rows: [(rowID: Int64, todo: Todo)] = []
        for try await (value, flag, id, seqNo, createdAt, title, subtitle, priority, completedAt, deleted, version)
            in try await connection.query(query, logger: logger).decode(
                (Int64, Bool, String?, Int64?, Int64?, String?, String?, String?, Int64?, Bool?, Int64?).self
            )
        {
            head = value
            unflushed = unflushed || flag
            if let seqNo,
                let todo = try StoredTodo.decodeIfPresent(
                    (id, createdAt, title, subtitle, priority, completedAt, deleted, version)
                )
            {
                rows.append((seqNo, todo))
            }
        }
        try await settle(head: head, unflushed: unflushed, on: connection, logger: logger)
        return (head, rows)
    }

    /// Ends a read that found `head`: throws when there was no head row, and flushes first when
    /// the read saw a commit not yet durable, so that it answers nothing a crash of the database
    /// could still take back.
    private static func settle(
        head: Int64,
        unflushed: Bool,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws {
        guard head >= 0 else { throw StoreError(message: "the database has no stream_state row") }
        if unflushed { try await flush(on: connection, logger: logger) }
    }

    /// Reads the head and, in seq order, at most `limit` journal entries after `after` (their
    /// seqs and payloads) in one statement. A head not yet durable is flushed before this
    /// returns.
    static func readJournal(
        after: Int64,
        limit: Int,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> (head: Int64, entries: [(seq: Int64, payload: [UInt8])]) {
        let query: PostgresQuery = """
            WITH d AS (\(unescaped: Self.headAndDurable))
            SELECT d.head, d.head > d.durable, j.seq, j.payload
            FROM d LEFT JOIN LATERAL (
              SELECT seq, payload FROM journal WHERE seq > \(after) AND seq <= d.head ORDER BY seq LIMIT \(limit)
            ) j ON true
            ORDER BY j.seq
            """
        var head: Int64 = -1
        var unflushed = false
        var entries: [(seq: Int64, payload: [UInt8])] = []
        for try await (value, flag, seq, payload) in try await connection.query(query, logger: logger).decode(
            (Int64, Bool, Int64?, ByteBuffer?).self
        ) {
            head = value
            unflushed = unflushed || flag
            if let seq, let payload { entries.append((seq, Array(payload.readableBytesView))) }
        }
        try await settle(head: head, unflushed: unflushed, on: connection, logger: logger)
        return (head, entries)
    }

    func recordHealth(up: Bool, _ error: (any Error)? = nil) {
        // A failure the lease did not see (a transaction's own) may still mean that the server
        // is gone or read-only: the pool then chooses a server again.
        if let error { pool.report(error) }
        guard health.recordPool(up: up) else { return }
        if up {
            logger.notice(
                "PostgreSQL answers again",
                metadata: ["database": "\(connector.settings)", "database.server": "\(pool.serverInUse)"]
            )
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
        if let answers = await executeAtOnce(batch) { return answers }
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
            let results = await commit(writes, time: now()) ?? writes.map { _ in .failure(.unavailable) }
            answers.append(contentsOf: results.map { .write($0) })
        }
        return answers
    }

    /// A batch of reads and writes, when this daemon knows every todo (`known`): its writes
    /// commit in one transaction, at the head the todos are known at, and each read is answered
    /// from the known todos as the batch's writes before it left them. Nil, with nothing done,
    /// when that cannot be (no known todos, a batch of one kind only, or the head has moved):
    /// `execute` then runs it a run of writes at a time.
    private func executeAtOnce(_ batch: [ModelRequest]) async -> [ModelAnswer]? {
        var writes: [TodoWrite] = []
        var reads = 0
        for request in batch {
            switch request {
            case .write(let write): writes.append(write)
            case .read: reads += 1
            }
        }
        guard reads > 0, !writes.isEmpty, let (known, results) = await commitAtKnownHead(writes) else { return nil }
        // Every write failed for want of the database: so do the reads.
        let unavailable = results.allSatisfy { if case .failure(.unavailable) = $0 { true } else { false } }
        var view = known.view()
        var answers: [ModelAnswer] = []
        answers.reserveCapacity(batch.count)
        var next = 0
        for request in batch {
            switch request {
            case .write:
                let result = results[next]
                next += 1
                answers.append(.write(result))
                if case .success(let saved) = result, !saved.duplicate { view.saved(saved.todo, seq: saved.seq) }
            case .read(let read):
                answers.append(.read(unavailable ? .failure(.unavailable) : .success(view.read(id: read.id))))
            }
        }
        return answers
    }

    /// Commits `writes` at the head the todos are known at, and returns them as they were
    /// then. When another daemon committed since, they are moved on from the journal and the
    /// commit is tried once more. Nil, with nothing written, when that does not succeed.
    private func commitAtKnownHead(
        _ writes: [TodoWrite]
    ) async -> (KnownTodos, [Result<SavedTodo, AppError>])? {
        for attempt in 0..<2 {
            if attempt > 0, (try? await catchUpKnown()) != true { return nil }
            guard let known, known.generation == pool.clientGeneration else { return nil }
            if let results = await commit(writes, time: now(), expectHead: known.head) { return (known, results) }
        }
        return nil
    }

    // MARK: JournalReader

    public func position() async throws -> JournalPosition {
        let logger = self.logger
        let epoch = self.epoch
        return try await pool.withLease(timeout: connector.settings.acquireTimeout) { connection in
            var position = JournalPosition(epoch: epoch, head: 0, oldest: 1)
            for try await (head, oldest) in try await connection.query(
                "SELECT head, (SELECT MIN(seq) FROM journal) FROM stream_state WHERE id = 1",
                logger: logger
            ).decode((Int64, Int64?).self) {
                position = Self.position(epoch: epoch, head: head, oldest: oldest)
            }
            return position
        }
    }

    public func startingPosition() async throws -> JournalPosition { opened }

    public func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry] {
        guard through > after else { return [] }
        let logger = self.logger
        return try await pool.withLease(timeout: connector.settings.acquireTimeout) { connection in
            try await Self.entries(on: connection, after: after, through: through, logger: logger)
        }
    }

    static func entries(
        on connection: PostgresConnection,
        after: UInt64,
        through: UInt64,
        logger: Logger
    ) async throws -> [JournalEntry] {
        try await originEntries(on: connection, after: after, through: through, logger: logger).map(\.entry)
    }

    /// A journal entry as the follower reads it: with the batch that wrote it (`origin`, see
    /// LocalClaims; nil for entries older than schema step 4), and whether its payload was
    /// withheld (`LocalClaims.Withheld`: the entry's `payload` is then empty).
    typealias FollowedEntry = (entry: JournalEntry, origin: String?, withheld: Bool)

    /// The entries after `after` through `through`, in seq order. With `withholding`, the
    /// payloads of the entries it names are not read.
    static func originEntries(
        on connection: PostgresConnection,
        after: UInt64,
        through: UInt64,
        withholding: LocalClaims.Withheld? = nil,
        logger: Logger
    ) async throws -> [FollowedEntry] {
        var entries: [FollowedEntry] = []
        let withheld = withholding ?? .nothing
        for try await (seq, type, payload, origin, mid) in try await connection.query(
            """
            SELECT seq, type,
              CASE WHEN \(withheld.prefix) <> '' AND starts_with(origin, \(withheld.prefix)) AND NOT origin = ANY(\(withheld.except))
                THEN NULL ELSE payload END,
              origin, mid FROM journal
            WHERE seq > \(Int64(after)) AND seq <= \(Int64(through)) ORDER BY seq
            """,
            logger: logger
        ).decode((Int64, String, ByteBuffer?, String?, String?).self) {
            entries.append(followed(seq: seq, type: type, payload: payload, origin: origin, mid: mid))
        }
        return entries
    }

    private static func followed(
        seq: Int64,
        type: String,
        payload: ByteBuffer?,
        origin: String?,
        mid: String?
    ) -> FollowedEntry {
        let bytes = payload.map { Array($0.readableBytesView) } ?? []
        return (JournalEntry(seq: UInt64(seq), type: type, payload: bytes, mid: mid), origin, payload == nil)
    }

    /// In one statement: the head, how far it is durable, and the entries after `after` up to
    /// both (at most `limit`), in seq order, each with its `origin` (the journal follower's
    /// usual catch-up, which otherwise took a statement for the heads and one for the entries).
    static func durableEntries(
        on connection: PostgresConnection,
        after: UInt64,
        limit: UInt64,
        withholding: LocalClaims.Withheld? = nil,
        logger: Logger
    ) async throws -> (head: Int64, durable: Int64, entries: [FollowedEntry]) {
        let withheld = withholding ?? .nothing
        let query: PostgresQuery = """
            WITH d AS (\(unescaped: Self.headAndDurable))
            SELECT d.head, d.durable, j.seq, j.type, j.payload, j.origin, j.mid
            FROM d LEFT JOIN LATERAL (
              SELECT seq, type,
                CASE WHEN \(withheld.prefix) <> '' AND starts_with(origin, \(withheld.prefix)) AND NOT origin = ANY(\(withheld.except))
                  THEN NULL ELSE payload END AS payload,
                origin, mid FROM journal
              WHERE seq > \(Int64(after)) AND seq <= LEAST(d.head, d.durable) ORDER BY seq LIMIT \(Int64(limit))
            ) j ON true
            ORDER BY j.seq
            """
        var heads: (head: Int64, durable: Int64)?
        var entries: [FollowedEntry] = []
        for try await (head, durable, seq, type, payload, origin, mid) in try await connection.query(
            query,
            logger: logger
        ).decode((Int64, Int64, Int64?, String?, ByteBuffer?, String?, String?).self) {
            heads = (head, durable)
            guard let seq, let type else { continue }
            entries.append(followed(seq: seq, type: type, payload: payload, origin: origin, mid: mid))
        }
        guard let heads else { throw StoreError(message: "the database has no stream_state row") }
        return (heads.head, heads.durable, entries)
    }

    // MARK: Running

    /// Runs the pool until the task is cancelled (or its service is told to shut down: the
    /// client's `run()` is a service of its own). Only the first call runs it.
    public func runConnections() async {
        guard !poolStarted else { return }
        poolStarted = true
        await pool.run()
    }

    /// Runs a `JournalFollower` on a connection of its own until the task is cancelled. When its
    /// connection fails, the pool chooses a server again too (the follower's connection is
    /// often the first to notice a lost server).
    public func follow(
        after: UInt64,
        publish: @escaping @Sendable ([JournalEntry]) -> Void,
        resynchronized: @escaping @Sendable (UInt64) -> Void
    ) async {
        guard !following, !closed else { return }
        following = true
        let follower = JournalFollower(
            connector: connector,
            claims: claims,
            health: health,
            after: after,
            eventLoop: eventLoopGroup.any(),
            logger: logger,
            publish: publish,
            resynchronized: resynchronized,
            serverFailed: { [pool] error in pool.report(error) },
            poolClient: { [pool] in pool.clientGeneration },
            others: otherCommitters
        )
        self.follower = follower
        await follower.run()
        self.follower = nil
    }

    /// Refuses new batches and waits for those under way. The pool goes on until
    /// `runConnections()` is cancelled, which the daemon does right after.
    public func close() async {
        guard !closed else { return }
        closed = true
        if executing > 0 {
            await withCheckedContinuation { idleWaiters.append($0) }
        }
        await pruning?.value
    }
}
