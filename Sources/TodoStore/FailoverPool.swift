import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO

/// A lease failed because its client was replaced by one for another server while it ran: the
/// request may be tried again at once.
struct ServerChanged: Error, CustomStringConvertible {
    var description: String { "the database server in use changed during the request" }
}

/// The store's pooled connections when the database may move between servers: a
/// `PostgresClient` (which talks to one server) for the server in use, swapped for a client of
/// another server when the one in use fails and a new selection (`connectToFittingServer`)
/// settles elsewhere, e.g. on a standby promoted after the primary was lost.
///
/// `FailoverStateMachine` decides; this executes its actions. Every client runs inside `run()`
/// (so inside the service that runs the store's connections); a retired client is stopped,
/// and the leases still under way on it are abandoned (they fail with `ServerChanged`, their
/// connections are closed). Leases go to the client in use at the moment they start; while a
/// selection runs that is still the old one, whose leases fail within their timeout.
final class FailoverPool: Sendable {
    private struct Shared {
        var machine: FailoverStateMachine
        /// The client leases use, and its generation.
        var generation: Int
        var client: PostgresClient
        /// Ends the run of each running client, by generation.
        var stops: [Int: AsyncStream<Void>.Continuation] = [:]
        /// The leases of each generation under way: given up when the generation is retired (a
        /// query to a lost server does not always fail by itself, even once its connection is
        /// closed) or when their time runs out (`sweepLeases`).
        var leased: [Int: [Int: any WatchedLease]] = [:]
        /// Leases started so far (keys of `leased`).
        var leases = 0
        /// Selections made so far (connection ids for their probes).
        var selections = 0
    }

    private let connector: PostgresConnector
    private let eventLoopGroup: any EventLoopGroup
    /// Where the leases' tasks run (nil: the global pool).
    private let taskExecutor: (any TaskExecutor)?
    private let logger: Logger
    private let shared: NIOLockedValueBox<Shared>
    /// The connection of the pool's own that serves one lease at a time outside postgres-nio's
    /// pool (`OwnConnectionStateMachine`).
    private let own = NIOLockedValueBox(OwnConnectionStateMachine<PostgresConnection>())
    /// Selections to start, with the delay before each.
    private let wakeups: AsyncStream<Duration>
    private let wake: AsyncStream<Duration>.Continuation

    /// A pool whose first client is for the server at `server` (the one the store opened on).
    init(
        connector: PostgresConnector,
        server: Int,
        eventLoopGroup: any EventLoopGroup,
        taskExecutor: (any TaskExecutor)? = nil,
        logger: Logger
    ) {
        self.connector = connector
        self.eventLoopGroup = eventLoopGroup
        self.taskExecutor = taskExecutor
        self.logger = logger
        let machine = FailoverStateMachine(server: server)
        let client = Self.makeClient(
            connector: connector,
            server: server,
            eventLoopGroup: eventLoopGroup,
            logger: logger
        )
        shared = NIOLockedValueBox(
            Shared(machine: machine, generation: machine.current?.generation ?? 1, client: client)
        )
        (wakeups, wake) = AsyncStream.makeStream(of: Duration.self, bufferingPolicy: .bufferingNewest(1))
    }

    private static func makeClient(
        connector: PostgresConnector,
        server: Int,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger
    ) -> PostgresClient {
        PostgresClient(
            configuration: connector.clientConfiguration(server: server),
            eventLoopGroup: eventLoopGroup,
            backgroundLogger: logger
        )
    }

    /// The generation of the client leases go to now; it changes whenever the pool moves to
    /// another server.
    var clientGeneration: Int { shared.withLockedValue { $0.generation } }

    /// Whether the pool is choosing a server (after a failure that suggests the one in use is
    /// gone or read-only): until it has one, no commit can succeed.
    var isSelecting: Bool { shared.withLockedValue { $0.machine.isSelecting } }

    /// The server leases go to now, for messages.
    var serverInUse: String {
        connector.serverName(shared.withLockedValue { $0.machine.current?.server ?? 0 })
    }

    /// Runs `body` on a pooled connection of the client in use, like `PostgresClient.withLease`
    /// (each wait bounded by `timeout`); a failure that suggests the server is gone or read-only
    /// starts a selection. A lease whose client was replaced by one for another server while it
    /// waited, before `body` ran, is tried once more on the new client; one whose `body` had
    /// started fails with `ServerChanged` (which starts nothing: the pool has already moved).
    func withLease<Result: Sendable>(
        timeout: Duration,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        var retried = false
        while true {
            let (generation, client, server) = shared.withLockedValue {
                ($0.generation, $0.client, $0.machine.current?.server)
            }
            let run = LeaseRun<Result>()
            do {
                let result = try await lease(
                    on: client,
                    generation: generation,
                    server: server,
                    timeout: timeout,
                    run: run,
                    body
                )
                shared.withLockedValue { _ = $0.machine.leaseSucceeded(generation: generation) }
                return result
            } catch {
                let replaced = shared.withLockedValue { $0.generation != generation }
                guard replaced, error is ServerChanged || Self.suggestsServerLoss(error) else {
                    report(error, generation: generation)
                    throw error
                }
                guard !retried, !run.entered, !Task.isCancelled else { throw ServerChanged() }
                retried = true
            }
        }
    }

    /// One lease on `client` (`LeaseRace`): waits at most `timeout` for a connection, then gives
    /// `body` at most `timeout` too. The first of `body`'s end, a timeout (`DatabaseUnavailable`)
    /// and the retirement of `generation` (`ServerChanged`) answers. Given up while `body`
    /// runs, the connection is closed (the server then rolls back whatever it had not
    /// committed; a connection that dies under a query does not always fail that query) and
    /// `body` is left to finish or fail on its own; callers that commit use a
    /// `TransactionGuard` to learn whether COMMIT had been sent by then.
    ///
    /// One task per lease, and no timer: the pool's watchdog (`sweepLeases`) gives up on the
    /// leases whose time ran out, so a commit pays for no other task, sleep, timer or hop.
    ///
    /// The lease runs on the pool's own connection when it is idle (`OwnConnectionStateMachine`),
    /// on a connection of postgres-nio's pool otherwise.
    private func lease<Result: Sendable>(
        on client: PostgresClient,
        generation: Int,
        server: Int?,
        timeout: Duration,
        run: LeaseRun<Result>,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let id = shared.withLockedValue { shared -> Int? in
            guard shared.generation == generation else { return nil }
            shared.leases += 1
            shared.leased[generation, default: [:]][shared.leases] = run
            return shared.leases
        }
        guard let id else { throw ServerChanged() }
        defer { shared.withLockedValue { _ = $0.leased[generation]?.removeValue(forKey: id) } }
        let ownConnection = takeOwnConnection(generation: generation, server: server)
        let own = self.own
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                run.start(answer: continuation, timeout: timeout)
                // Cancelled before the handler was installed: stop waiting, as it would have.
                if Task.isCancelled { run.cancelled() }
                run.started(
                    Task(executorPreference: taskExecutor) {
                        let result: Swift.Result<Result, any Error>
                        do {
                            result = .success(
                                try await Self.runLease(body, on: ownConnection, own: own, orFrom: client, run: run)
                            )
                        } catch {
                            result = .failure(error)
                        }
                        run.finish(result)
                    }
                )
            }
        } onCancel: {
            run.cancelled()
        }
    }

    /// The pool's own connection for a lease of `generation`, when it is idle; otherwise nil
    /// (the lease goes to postgres-nio's pool), after closing a stale one and starting a connect
    /// to `server` when the machine asks for it.
    private func takeOwnConnection(generation: Int, server: Int?) -> PostgresConnection? {
        let now = ContinuousClock.now
        // One closed while idle (the server restarted) is replaced, and the lease goes to the
        // pool, which has noticed on its own.
        switch own.withLockedValue({ $0.take(generation: generation, now: now, isOpen: { !$0.isClosed }) }) {
        case .use(let connection):
            return connection
        case .pool(let stale, let connect):
            if let stale { Self.closeOwn(stale) }
            if let connect {
                if let server {
                    connectOwn(generation: connect, server: server)
                } else {
                    own.withLockedValue { $0.connectFailed(generation: connect, now: now) }
                }
            }
            return nil
        }
    }

    /// Connects the pool's own connection for `generation`, to `server`.
    private func connectOwn(generation: Int, server: Int) {
        let (own, connector, eventLoop, logger) = (self.own, connector, eventLoopGroup.any(), logger)
        Task(executorPreference: taskExecutor) {
            do {
                let connection = try await PostgresConnection.connect(
                    on: eventLoop,
                    configuration: connector.connectionConfiguration(server: server),
                    id: -generation,
                    logger: logger
                )
                if let unwanted = own.withLockedValue({ $0.connected(connection, generation: generation) }) {
                    Self.closeOwn(unwanted)
                }
            } catch {
                own.withLockedValue { $0.connectFailed(generation: generation, now: .now) }
            }
        }
    }

    /// Runs a lease's body on `ownConnection` when the lease took it, else on a connection of
    /// `client`'s pool.
    private static func runLease<Result: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Result,
        on ownConnection: PostgresConnection?,
        own: NIOLockedValueBox<OwnConnectionStateMachine<PostgresConnection>>,
        orFrom client: PostgresClient,
        run: LeaseRun<Result>
    ) async throws -> Result {
        if let ownConnection { return try await runOwn(ownConnection, own: own, run: run, body) }
        return try await client.withConnection { connection in
            guard run.connected(connection) else { throw DatabaseUnavailable() }
            return try await body(connection)
        }
    }

    /// Runs a lease's body on the pool's own connection and gives the connection back: kept
    /// when the body succeeded (or never ran), closed when it failed (it may be broken, or left
    /// inside a transaction).
    private static func runOwn<Result: Sendable>(
        _ connection: PostgresConnection,
        own: NIOLockedValueBox<OwnConnectionStateMachine<PostgresConnection>>,
        run: LeaseRun<Result>,
        _ body: @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let giveBack: @Sendable (Bool) -> Void = { healthy in
            if let close = own.withLockedValue({ $0.returned(healthy: healthy) }) { closeOwn(close) }
        }
        guard run.connected(connection) else {
            giveBack(true)
            throw DatabaseUnavailable()
        }
        do {
            let result = try await body(connection)
            giveBack(true)
            return result
        } catch {
            giveBack(false)
            throw error
        }
    }

    /// Tells the pool about a failure on the client of `generation` (nil: the one in use); one
    /// that suggests its server is gone or read-only starts a selection.
    func report(_ error: any Error, generation: Int? = nil) {
        guard Self.suggestsServerLoss(error) else { return }
        let action = shared.withLockedValue { $0.machine.failureReported(generation: generation) }
        guard case .select(let delay) = action else { return }
        logger.notice(
            "the PostgreSQL server in use failed; choosing a server again",
            metadata: ["database.server": "\(serverInUse)", "reason": "\(PostgresStore.describe(error))"]
        )
        wake.yield(delay)
    }

    /// Whether `error` suggests that the server is gone, going, or no longer writable (then
    /// another may be chosen), rather than a problem of the request itself.
    static func suggestsServerLoss(_ error: any Error) -> Bool {
        switch error {
        case is CancellationError, is StoreError, is PostgresDecodingError, is ServerChanged:
            return false
        case let error as PSQLError:
            switch error.code {
            case .server:
                return suggestsServerLoss(sqlState: error.serverInfo?[.sqlState])
            case .queryCancelled, .poolClosed, .tooManyParameters:
                return false
            default:
                return true
            }
        default:
            return true
        }
    }

    /// For an error the server sent: read-only (`25006`, a standby or a demoted primary),
    /// shutting down or starting up (`57P01`–`57P03`), connection problems (class `08`).
    static func suggestsServerLoss(sqlState: String?) -> Bool {
        guard let sqlState else { return false }
        return sqlState == "25006" || sqlState.hasPrefix("57P") || sqlState.hasPrefix("08")
    }

    /// Runs the client in use, and each that replaces it, until the task is cancelled. Only the
    /// first call does anything.
    func run() async {
        let first = shared.withLockedValue { shared -> (PostgresClient, AsyncStream<Void>)? in
            guard case .run(let client) = shared.machine.started() else { return nil }
            let (stopped, stop) = AsyncStream.makeStream(of: Void.self)
            shared.stops[client.generation] = stop
            return (shared.client, stopped)
        }
        guard let first else { return }
        let (client, stopped) = first
        await withDiscardingTaskGroup { group in
            Self.run(client, until: stopped, in: &group)
            group.addTask { await self.watchLeases() }
            for await delay in wakeups {
                await select(after: delay, in: &group)
            }
            let stops = shared.withLockedValue { shared in
                _ = shared.machine.shutDown()
                defer { shared.stops.removeAll() }
                return Array(shared.stops.values)
            }
            for stop in stops { stop.finish() }
            if let connection = own.withLockedValue({ $0.shutDown() }) { Self.closeOwn(connection) }
        }
    }

    /// How often the watchdog looks for leases past their time, so how late a lease's timeout
    /// may fire: a twentieth of the timeout, between 10 and 250 ms.
    var sweepInterval: Duration {
        min(max(connector.settings.acquireTimeout / 20, .milliseconds(10)), .milliseconds(250))
    }

    /// Gives up on the leases past their time, every `sweepInterval`, until the task is
    /// cancelled. One sleeping task for the whole pool instead of a timer per lease.
    private func watchLeases() async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: sweepInterval)
            } catch {
                return
            }
            sweepLeases(now: .now)
        }
    }

    /// Gives up on every lease whose current wait ran past its time at `now`: each fails with
    /// `DatabaseUnavailable`.
    func sweepLeases(now: ContinuousClock.Instant) {
        let leases = shared.withLockedValue { shared in shared.leased.values.flatMap(\.values) }
        for lease in leases { lease.giveUpIfOverdue(at: now) }
    }

    /// Closes the pool's own connection, holding on to it until it is closed (a connection
    /// dropped before its channel closed trips postgres-nio's check in debug builds).
    private static func closeOwn(_ connection: PostgresConnection) {
        Task { try? await connection.close() }
    }

    /// Closes the connection's channel without waiting (the pool's synchronous `close()`).
    fileprivate static func closeNow(_ connection: PostgresConnection) {
        let close: () -> Void = connection.close
        close()
    }

    private static func run(
        _ client: PostgresClient,
        until stopped: AsyncStream<Void>,
        in group: inout DiscardingTaskGroup
    ) {
        group.addTask {
            await withDiscardingTaskGroup { inner in
                inner.addTask { await client.run() }
                for await _ in stopped {}
                inner.cancelAll()
            }
        }
    }

    /// Selects a server, again and again after the delays the machine asks for, until one is
    /// found or the task is cancelled; swaps clients when it is another server.
    private func select(after first: Duration, in group: inout DiscardingTaskGroup) async {
        var delay = first
        var failures = 0
        while !Task.isCancelled {
            if delay > .zero {
                do {
                    try await Task.sleep(for: delay)
                } catch {
                    return
                }
            }
            let id = shared.withLockedValue { shared in
                shared.selections += 1
                return shared.selections
            }
            let found: Result<Int, any Error>
            do {
                let (connection, server) = try await connector.connectToFittingServer(
                    on: eventLoopGroup.any(),
                    id: id,
                    logger: logger
                )
                try? await connection.close()
                found = .success(server)
            } catch {
                found = .failure(error)
            }
            let (action, started) = shared.withLockedValue {
                shared -> (FailoverStateMachine.Action, (PostgresClient, AsyncStream<Void>)?) in
                let action: FailoverStateMachine.Action
                switch found {
                case .success(let server): action = shared.machine.selected(server: server)
                case .failure: action = shared.machine.selectionFailed()
                }
                guard case .swap(let next, _) = action else { return (action, nil) }
                let client = Self.makeClient(
                    connector: connector,
                    server: next.server,
                    eventLoopGroup: eventLoopGroup,
                    logger: logger
                )
                shared.generation = next.generation
                shared.client = client
                let (stopped, stop) = AsyncStream.makeStream(of: Void.self)
                shared.stops[next.generation] = stop
                return (action, (client, stopped))
            }
            switch action {
            case .keep(let client):
                logger.info(
                    "the PostgreSQL server in use is still the one to use",
                    metadata: ["database.server": "\(connector.serverName(client.server))"]
                )
                return
            case .swap(let next, let retired):
                if let started { Self.run(started.0, until: started.1, in: &group) }
                let (stop, leased) = shared.withLockedValue {
                    (
                        $0.stops.removeValue(forKey: retired.generation),
                        $0.leased.removeValue(forKey: retired.generation)
                    )
                }
                // Whatever still runs on the old server fails now rather than at its timeout
                // (a COMMIT under way is resolved as in doubt).
                for lease in leased?.values ?? [:].values { lease.giveUp(ServerChanged()) }
                stop?.finish()
                logger.notice(
                    "switched to another PostgreSQL server",
                    metadata: [
                        "database.server": "\(connector.serverName(next.server))",
                        "database.previous": "\(connector.serverName(retired.server))",
                    ]
                )
                return
            case .select(let after):
                if case .failure(let error) = found {
                    failures += 1
                    logger.log(
                        level: failures == 1 ? .warning : .debug,
                        "no usable PostgreSQL server yet; trying again",
                        metadata: ["reason": "\(PostgresStore.describe(error))"]
                    )
                }
                delay = after
            case .none, .run, .shutDown:
                return
            }
        }
    }
}

/// A lease under way, as the pool's watchdog and a retirement see it.
protocol WatchedLease: AnyObject, Sendable {
    /// Answers the caller with `error` unless it was answered already (and closes the
    /// connection under a body that had started).
    func giveUp(_ error: any Error)
    /// `giveUp(DatabaseUnavailable())` if the current wait (for a connection, or of the body)
    /// ran past its time at `now`.
    func giveUpIfOverdue(at now: ContinuousClock.Instant)
}

/// Executes one lease's `LeaseRace`: holds the caller's continuation, the connection, the
/// deadline of the current wait and the task that leases and runs the body, and does what the
/// race's answers ask.
private final class LeaseRun<Result: Sendable>: WatchedLease {
    private typealias Race = LeaseRace<CheckedContinuation<Result, any Error>>

    private struct Parts: Sendable {
        var race: Race?
        var connection: PostgresConnection?
        var timeout: Duration = .zero
        var deadline: ContinuousClock.Instant?
        var task: Task<Void, Never>?
    }

    private let parts = NIOLockedValueBox(Parts())

    /// Whether the body had started.
    var entered: Bool { parts.withLockedValue { $0.race?.entered ?? false } }

    /// The caller waits on `answer`, for a connection at most `timeout`, then for the body at
    /// most `timeout` again.
    func start(answer: CheckedContinuation<Result, any Error>, timeout: Duration) {
        let now = ContinuousClock.now
        parts.withLockedValue { parts in
            parts.race = Race(answer: answer)
            parts.timeout = timeout
            parts.deadline = now + timeout
        }
    }

    /// The task that leases and runs the body; cancelled at once when the lease was given up
    /// before it got a connection.
    func started(_ task: Task<Void, Never>) {
        let stop = parts.withLockedValue { parts -> Bool in
            parts.task = task
            guard let race = parts.race else { return false }
            return race.answered && !race.entered
        }
        if stop { task.cancel() }
    }

    /// A connection was leased; false when the lease was given up already (the body must not
    /// run).
    func connected(_ connection: PostgresConnection) -> Bool {
        let now = ContinuousClock.now
        return parts.withLockedValue { parts -> Bool in
            guard case .run = parts.race?.connected() ?? .refuse else { return false }
            parts.connection = connection
            parts.deadline = now + parts.timeout
            return true
        }
    }

    /// The body finished, or waiting for a connection failed.
    func finish(_ result: Swift.Result<Result, any Error>) {
        parts.withLockedValue { $0.race?.finished() }?.resume(with: result)
    }

    func giveUpIfOverdue(at now: ContinuousClock.Instant) {
        execute(DatabaseUnavailable()) { parts in
            guard let deadline = parts.deadline, now >= deadline else { return .none }
            return parts.race?.giveUp() ?? .none
        }
    }

    func giveUp(_ error: any Error) {
        execute(error) { $0.race?.giveUp() ?? .none }
    }

    /// The caller's task was cancelled (`LeaseRace.cancelled`).
    func cancelled() {
        execute(CancellationError()) { $0.race?.cancelled() ?? .none }
    }

    /// Asks the race in one look (a lease that got its connection meanwhile has a new
    /// deadline), then does what it answers, answering the caller with `error`.
    private func execute(_ error: any Error, _ decide: (inout Parts) -> Race.GiveUp) {
        let (action, connection, task) = parts.withLockedValue { parts in
            (decide(&parts), parts.connection, parts.task)
        }
        switch action {
        case .none:
            return
        case .answerAndStopWaiting(let answer):
            answer.resume(throwing: error)
            task?.cancel()
        case .answerAndClose(let answer):
            answer.resume(throwing: error)
            if let connection { FailoverPool.closeNow(connection) }
        }
    }
}
