import EventStream
import Foundation
import Logging
import NIOConcurrencyHelpers
import Relay
import Testing
import TodoApp
import TodoStore
import UnixSignals

@testable import todostreamd

/// An in-memory store that behaves like the PostgreSQL one towards the daemon: its connections
/// and its follower run until cancelled. It records what happened to it, in order.
/// A test store in front of an in-memory one: what it does not do itself, the inner one does.
protocol ForwardingStore: ServedStore {
    nonisolated var inner: GroupCommitStore { get }
}

extension ForwardingStore {
    func position() async throws -> JournalPosition { try await inner.position() }
    func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry] {
        try await inner.entries(after: after, through: through)
    }
    var isHealthy: Bool { get async { await inner.isHealthy } }
    var lastSeenHealthy: Bool { get async { await inner.lastSeenHealthy } }
    var commitLatency: LatencyHistogram { get async { await inner.commitLatency } }
    func startingPosition() async throws -> JournalPosition { try await inner.position() }
}

actor LifecycleStore: ForwardingStore {
    nonisolated let inner: GroupCommitStore
    private(set) var events: [String] = []

    init() async {
        inner = await GroupCommitStore.inMemory().0
    }

    var closeCount: Int { events.filter { $0 == "closed" }.count }

    func execute(_ batch: [ModelRequest]) async -> [ModelAnswer] { await inner.execute(batch) }

    func runConnections() async {
        events.append("connections running")
        await Self.untilCancelled()
        events.append("connections stopped")
    }

    func follow(
        after: UInt64,
        publish: @escaping @Sendable ([JournalEntry]) -> Void,
        resynchronized: @escaping @Sendable (UInt64) -> Void
    ) async {
        events.append("following")
        await Self.untilCancelled()
        events.append("stopped following")
    }

    func close() async {
        events.append("closed")
        await inner.close()
    }

    private static func untilCancelled() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(60))
        }
    }
}

@Suite(.timeLimit(.minutes(2))) struct LifecycleTests {
    private static func options() -> DaemonOptions {
        var options = DaemonOptions()
        options.storage = .memory
        options.dataDirectory = temporaryDirectory()
        options.listeners = ListenerConfiguration(tcp: .init(host: "127.0.0.1", port: 0))
        options.environment = [:]
        return options
    }

    private static var logger: Logger {
        var logger = Logger(label: "todostreamd.test")
        logger.logLevel = .critical
        return logger
    }

    /// The order of a shutdown, seen from the store: the follower stops, then the store closes
    /// (once), then its connections stop, all before `run()` returns.
    /// With SQLite, `/metrics` says how much space is left on the data directory's file system
    /// and how large the store is, for an alert before a full disk fails every commit; other
    /// engines have no such figures. SQLite as the engine nothing names (the default) too:
    /// the figures were missing unless a setting named it.
    @Test(arguments: [DaemonOptions.Storage.sqlite, nil])
    func metricsTellTheSpaceLeftForASQLiteStore(storage: DaemonOptions.Storage?) async throws {
        func figure(_ name: String, in metrics: String) -> UInt64? {
            metrics.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap {
                UInt64($0.split(separator: " ")[1])
            }
        }
        try await withDaemon(storage: storage) { daemon in
            let (client, _) = try await daemon.client()
            _ = try await client.createTodo(String(repeating: "x", count: 900))
            let metrics = try await httpGet(port: daemon.httpPort, path: "/metrics").body
            let free = try #require(figure("todostream_storage_free_bytes", in: metrics), "\(metrics)")
            #expect(free > 0)
            let files = try #require(figure("todostream_storage_file_bytes", in: metrics))
            #expect(files >= 8192, "the database and its WAL hold the todo: \(files)")
        }
        try await withDaemon(storage: .memory) { daemon in
            let metrics = try await httpGet(port: daemon.httpPort, path: "/metrics").body
            #expect(!metrics.contains("todostream_storage_free_bytes"))
        }
    }

    @Test func theStoreClosesOnceBetweenTheFollowerAndItsConnections() async throws {
        let store = await LifecycleStore()
        let daemon = try await Daemon.start(Self.options(), logger: Self.logger, store: store)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await daemon.run() }
            let (client, _) = try await daemon.client()
            _ = try await client.createTodo("before the shutdown")
            await daemon.shutdown()
            let frames = String(decoding: try await client.waitForClose(), as: UTF8.self)
            #expect(frames.contains("\"op\":\"draining\""))
            try await group.next()
        }
        let events = await store.events
        #expect(Set(events.prefix(2)) == ["connections running", "following"])
        #expect(Array(events.dropFirst(2)) == ["stopped following", "closed", "connections stopped"])
    }

    /// A daemon started from a config file with `limits.max_subscriptions` set, with signals the
    /// test raises and a resolver that reads the file again; `rewrite(n)` changes the setting.
    static func reloadableDaemon(
        maxSubscriptions: Int
    ) async throws -> (Daemon, LifecycleStore, AsyncStream<UnixSignal>.Continuation, (Int) throws -> Void) {
        let path = NSTemporaryDirectory() + "lifecycle-\(UUID().uuidString).yaml"
        let rewrite: (Int) throws -> Void = { value in
            let config =
                "storage: memory\nlisten:\n  tcp: 127.0.0.1:0\n  http: off\nlimits:\n  max_subscriptions: \(value)\n"
            try Data(config.utf8).write(to: URL(fileURLWithPath: path))
        }
        try rewrite(maxSubscriptions)
        let settings = try SettingsOptions.parse(["--config", path])
        let store = await LifecycleStore()
        let (signals, raise) = AsyncStream.makeStream(of: UnixSignal.self)
        let daemon = try await Daemon.start(
            try settings.resolve(environment: [:]),
            logger: logger,
            signals: signals,
            store: store,
            resolver: { try settings.resolve(environment: [:]) }
        )
        return (daemon, store, raise, rewrite)
    }

    /// SIGHUP reloads through the signal service; SIGTERM then ends `run()` by itself, with no
    /// `shutdown()` call, and the store closes once.
    @Test func aHangupReloadsAndATermStopsThroughTheSignalService() async throws {
        let (daemon, store, raise, rewrite) = try await Self.reloadableDaemon(maxSubscriptions: 5)
        #expect(daemon.relay.settings.configuration.maxSubscriptions == 5)
        try rewrite(7)
        raise.yield(.sighup)
        raise.yield(.sigterm)
        try await daemon.run()
        #expect(daemon.relay.settings.configuration.maxSubscriptions == 7)
        #expect(await store.closeCount == 1)
        await #expect(throws: (any Error).self) { _ = try await TestConnection.connect(port: daemon.tcpPort) }
    }

    /// A stop signal that arrives while the daemon starts waits for the group, which then
    /// shuts down gracefully at once: every service ran and stopped, the store closed once.
    @Test func aStopSignalDuringStartUpIsAGracefulStop() async throws {
        let store = await LifecycleStore()
        let (signals, raise) = AsyncStream.makeStream(of: UnixSignal.self)
        raise.yield(.sigint)
        let daemon = try await Daemon.start(Self.options(), logger: Self.logger, signals: signals, store: store)
        try await daemon.run()
        #expect(await store.closeCount == 1)
        #expect(await store.events.last == "connections stopped")
        await #expect(throws: (any Error).self) { _ = try await TestConnection.connect(port: daemon.tcpPort) }
    }

    /// `shutdown()` before `run()` is remembered: `run()` starts and stops everything.
    @Test func aShutdownBeforeRunStopsAtOnce() async throws {
        let store = await LifecycleStore()
        let daemon = try await Daemon.start(Self.options(), logger: Self.logger, store: store)
        await daemon.shutdown()
        try await daemon.run()
        #expect(await store.closeCount == 1)
        await #expect(throws: (any Error).self) { _ = try await TestConnection.connect(port: daemon.tcpPort) }
    }

    /// A start that fails after the store opened (here: an unreadable TLS certificate) closes
    /// the store, once.
    @Test func aFailedStartClosesTheStoreOnce() async throws {
        let store = await LifecycleStore()
        var options = Self.options()
        options.tlsCertificatePath = "/nonexistent/cert.pem"
        options.tlsKeyPath = "/nonexistent/key.pem"
        await #expect(throws: StartupError.self) {
            _ = try await Daemon.start(options, logger: Self.logger, store: store)
        }
        #expect(await store.events == ["closed"])
    }

    /// Signals after the signal service stopped (during the drain) are trapped and ignored: a
    /// second stop is not a second shutdown, a reload does not happen.
    @Test func signalsDuringTheDrainAreIgnored() async throws {
        let (daemon, store, raise, rewrite) = try await Self.reloadableDaemon(maxSubscriptions: 5)
        try rewrite(7)
        raise.yield(.sigterm)
        raise.yield(.sighup)
        raise.yield(.sigterm)
        try await daemon.run()
        #expect(daemon.relay.settings.configuration.maxSubscriptions == 5)
        #expect(await store.closeCount == 1)
    }
}

/// An in-memory store whose commits wait while the test holds them, telling it each time one
/// arrives.
actor GatedStore: ForwardingStore {
    nonisolated let inner: GroupCommitStore
    private var holding = false
    private var waiting: [CheckedContinuation<Void, Never>] = []
    let arrivals: AsyncStream<Void>
    private let arrived: AsyncStream<Void>.Continuation

    init() async {
        inner = await GroupCommitStore.inMemory().0
        (arrivals, arrived) = AsyncStream.makeStream(of: Void.self)
    }

    func hold() { holding = true }

    func release() {
        holding = false
        for continuation in waiting { continuation.resume() }
        waiting = []
    }

    func execute(_ batch: [ModelRequest]) async -> [ModelAnswer] {
        if holding {
            arrived.yield()
            await withCheckedContinuation { waiting.append($0) }
        }
        return await inner.execute(batch)
    }
    func runConnections() async {}
    func follow(
        after: UInt64,
        publish: @escaping @Sendable ([JournalEntry]) -> Void,
        resynchronized: @escaping @Sendable (UInt64) -> Void
    ) async {}
    func close() async { await inner.close() }
}

@Suite(.timeLimit(.minutes(2))) struct DrainTests {
    /// Once a connection is told `draining`, a request it sends is refused (`unavailable`,
    /// nothing applied) instead of committed: the drain closes the connection when the requests
    /// already in flight are answered, and a later commit's answer could be lost with it, leaving
    /// a write applied that its client was never told of. The request in flight when the drain
    /// began is still answered.
    @Test func aRequestAfterDrainingIsRefusedAndTheOneInFlightIsAnswered() async throws {
        let store = await GatedStore()
        var options = DaemonOptions()
        options.storage = .memory
        options.dataDirectory = temporaryDirectory()
        options.listeners = ListenerConfiguration(tcp: .init(host: "127.0.0.1", port: 0))
        options.environment = [:]
        options.relay.drainTimeoutMs = 60_000
        var logger = Logger(label: "todostreamd.test")
        logger.logLevel = .critical
        let daemon = try await Daemon.start(options, logger: logger, store: store)
        let running = Task { try await daemon.run() }
        let late = try await TestConnection.connect(port: daemon.tcpPort)
        _ = try await late.json()
        let made = try await late.createTodo("one")
        let todo = try #require((made["payload"] as? [String: Any])?["todo"] as? [String: Any])
        let toggle: (String) -> [String: Any] = { id in
            ["type": "RequestToggleCompleteTodoViewModel", "id": id, "payload": ["todo": ["id": todo["id"] ?? ""]]]
        }
        let busy = try await TestConnection.connect(port: daemon.tcpPort)
        _ = try await busy.json()
        await store.hold()
        try await busy.send(toggle("in flight"))
        var arrivals = store.arrivals.makeAsyncIterator()
        await arrivals.next()
        let stopping = Task { await daemon.shutdown() }
        _ = try await late.json { $0["op"] as? String == "draining" }
        try await late.send(toggle("late"))
        let (refused, _) = try await late.json { $0["re"] as? String == "late" }
        #expect(errorCode(refused) == "unavailable", "\(refused)")
        await store.release()
        let (answered, _) = try await busy.json { $0["re"] as? String == "in flight" }
        #expect(answered["seq"] as? Int == 2, "\(answered)")
        await stopping.value
        try await running.value
        // The create and the toggle in flight; not the late one.
        #expect(try await store.position().head == 2)
    }
}
