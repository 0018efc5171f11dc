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
        /// The leases of each generation under way, each as the function that abandons it: called
        /// when the generation is retired (a query to a lost server does not always fail by
        /// itself, even once its connection is closed).
        var leased: [Int: [Int: @Sendable () -> Void]] = [:]
        /// Leases started so far (keys of `leased`).
        var leases = 0
        /// Selections made so far (connection ids for their probes).
        var selections = 0
    }

    private let connector: PostgresConnector
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let shared: NIOLockedValueBox<Shared>
    /// Selections to start, with the delay before each.
    private let wakeups: AsyncStream<Duration>
    private let wake: AsyncStream<Duration>.Continuation

    /// A pool whose first client is for the server at `server` (the one the store opened on).
    init(connector: PostgresConnector, server: Int, eventLoopGroup: any EventLoopGroup, logger: Logger) {
        self.connector = connector
        self.eventLoopGroup = eventLoopGroup
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
            let (generation, client) = shared.withLockedValue { ($0.generation, $0.client) }
            let entered = NIOLockedValueBox(false)
            do {
                let result = try await client.withLease(timeout: timeout) { connection in
                    try await self.abandonable(generation: generation, connection: connection, entered: entered) {
                        try await body(connection)
                    }
                }
                shared.withLockedValue { _ = $0.machine.leaseSucceeded(generation: generation) }
                return result
            } catch {
                let replaced = shared.withLockedValue { $0.generation != generation }
                guard replaced, error is ServerChanged || Self.suggestsServerLoss(error) else {
                    report(error, generation: generation)
                    throw error
                }
                guard !retried, !entered.withLockedValue({ $0 }), !Task.isCancelled else { throw ServerChanged() }
                retried = true
            }
        }
    }

    private enum LeaseRun<Result: Sendable> {
        case starting
        case running(CheckedContinuation<Result, any Error>)
        case over
    }

    /// Runs `body` for a lease of `generation` so that retiring the generation abandons it at
    /// once: the lease then fails with `ServerChanged` and its connection is closed, and `body` is
    /// left to finish or fail on its own, as a lease that overruns its timeout is (a COMMIT it
    /// had sent is then resolved as in doubt by its caller). Throws `ServerChanged` without
    /// running `body` when the generation is retired already; sets `entered` when `body` runs.
    private func abandonable<Result: Sendable>(
        generation: Int,
        connection: PostgresConnection,
        entered: NIOLockedValueBox<Bool>,
        _ body: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        let run = NIOLockedValueBox(LeaseRun<Result>.starting)
        let abandon: @Sendable () -> Void = {
            let waiting = run.withLockedValue { run -> CheckedContinuation<Result, any Error>?? in
                defer { run = .over }
                switch run {
                case .starting: return .some(nil)
                case .running(let continuation): return .some(continuation)
                case .over: return nil
                }
            }
            guard let waiting else { return }
            waiting?.resume(throwing: ServerChanged())
            Self.closeNow(connection)
        }
        let lease = shared.withLockedValue { shared -> Int? in
            guard shared.generation == generation else { return nil }
            shared.leases += 1
            shared.leased[generation, default: [:]][shared.leases] = abandon
            return shared.leases
        }
        guard let lease else { throw ServerChanged() }
        defer { shared.withLockedValue { _ = $0.leased[generation]?.removeValue(forKey: lease) } }
        entered.withLockedValue { $0 = true }
        return try await withCheckedThrowingContinuation { continuation in
            let abandoned = run.withLockedValue { run -> Bool in
                guard case .starting = run else { return true }
                run = .running(continuation)
                return false
            }
            guard !abandoned else {
                continuation.resume(throwing: ServerChanged())
                return
            }
            Task {
                let result: Swift.Result<Result, any Error>
                do {
                    result = .success(try await body())
                } catch {
                    result = .failure(error)
                }
                let waiting = run.withLockedValue { run -> CheckedContinuation<Result, any Error>? in
                    defer { run = .over }
                    guard case .running(let continuation) = run else { return nil }
                    return continuation
                }
                waiting?.resume(with: result)
            }
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
            for await delay in wakeups {
                await select(after: delay, in: &group)
            }
            let stops = shared.withLockedValue { shared in
                _ = shared.machine.shutDown()
                defer { shared.stops.removeAll() }
                return Array(shared.stops.values)
            }
            for stop in stops { stop.finish() }
        }
    }

    /// Closes the connection's channel without waiting (the pool's synchronous `close()`).
    private static func closeNow(_ connection: PostgresConnection) {
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
                for abandon in leased?.values ?? [:].values { abandon() }
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
