import EventStream
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import Relay
import ServiceLifecycle
import TodoApp
import TodoStore
import TodoWeb
import UnixSignals

/// Everything `serve` needs, from flags (and later a config file).
struct DaemonOptions: Sendable {
    enum Storage: String, Sendable {
        case sqlite
        case memory
        case postgres
    }

    /// Tuning for `storage: postgres` (the URL is `postgresURL`).
    struct PostgresTuning: Sendable, Hashable {
        var poolSize = 8
        var timeout: Duration = .seconds(5)
        var catchUpInterval: Duration = .seconds(1)
        var commitFollowGrace: Duration = .milliseconds(5)
        var startupTimeout: Duration = .seconds(30)
        var maxPendingWrites = 16_384
        var stagingGuesses = 16_384
    }

    var dataDirectory: String = DaemonOptions.defaultDataDirectory
    /// The engine as configured; nil when no setting names one (see `engine`).
    var storage: Storage?
    /// `postgres://…`; holds a password: never logged.
    var postgresURL: String?
    var postgres = PostgresTuning()
    var listeners = ListenerConfiguration(
        tcp: .init(host: "127.0.0.1", port: 7878),
        http: .init(host: "127.0.0.1", port: 8080)
    )
    var relay = RelayConfiguration()
    var tokens: [TokenEntry] = []
    var logLevel = "info"
    /// Listening on a non-loopback address without TLS and without tokens needs this.
    var allowInsecure = false
    /// The config file, re-read on SIGHUP.
    var configPath: String?
    var tlsCertificatePath: String?
    var tlsKeyPath: String?
    /// PEM CA bundle: when set, TLS clients must present a certificate it signed.
    var tlsClientCAPath: String?
    /// Generate (once) a self-signed certificate into the data directory when none is given.
    var devTLS = false
    /// How long a TLS connection the daemon closes waits for the client's close_notify.
    var tlsCloseTimeout: TimeAmount = .seconds(1)
    var retention = JournalRetention()
    var maxBatch = 256
    /// List rows whose JSON is kept for list answers (`RowJSONCache`); 0 keeps none.
    var listRowCache = 10_000
    /// How long the sequencer's thread stays awake for the next request after a batch; nil:
    /// by engine (`sequencerSpin`).
    var sequencerSpinMicroseconds: Int?

    /// The spin in force. SQLite commits on the sequencer's thread, so the next request
    /// usually comes while it spins; a PostgreSQL commit is awaited on the network, longer
    /// than a spin, which would then be CPU taken from the database on the same machine.
    var sequencerSpin: Duration {
        .microseconds(sequencerSpinMicroseconds ?? (engine == .postgres ? 0 : 400))
    }
    /// Whether the sequencer hands a batch's answers to the event loops on a thread of its own
    /// when the next batch is waiting (`Sequencer`); nil: by engine (`offloadHandOver`).
    var handOverThread: Bool?

    /// The hand-over thread in force. With PostgreSQL the next batch's commit is then on the
    /// network while the last one's answers are encoded (one daemon, 64 clients: about a tenth
    /// more writes per second). A SQLite commit is short and on the sequencer's own thread:
    /// there the extra thread only costs CPU.
    var offloadHandOver: Bool { handOverThread ?? (engine == .postgres) }
    /// How long a batch may wait for more requests (`BatchGathering`), in microseconds; nil:
    /// by engine (`sequencerGather`).
    var sequencerGatherMicroseconds: Int?

    /// The gathering in force. With PostgreSQL, and only while other daemons commit too
    /// (`gatherWhen`), clients that take turns share one commit instead of paying one per
    /// group, and the daemons' commits take fewer turns at the ordering lock (two daemons on
    /// one 2-core machine: about a quarter more writes per second). A SQLite commit is short:
    /// there it stays off.
    var sequencerGather: Duration {
        .microseconds(sequencerGatherMicroseconds ?? (engine == .postgres ? 2000 : 0))
    }
    /// Requests waiting for the sequencer at most.
    var maxQueuedRequests = 65_536
    var synchronousFull = true
    /// SQLite with `synchronousFull`: the bytes of a commit's WAL frames gathered into one
    /// write (`SQLiteDataSyncVFS`); 0 writes each frame as SQLite does.
    var walWriteBufferBytes = 1 << 20
    /// SQLite: the writer's page cache, in KiB.
    var sqliteCacheKiB = GroupCommitStore.defaultSQLiteCacheKiB
    var sqlitePageBytes = GroupCommitStore.defaultSQLitePageBytes
    /// SQLite: todos whose newest change may be in the journal only (0: none).
    var sqliteDeferredTodos = GroupCommitStore.defaultSQLiteDeferredTodos
    /// Where systemd's variables (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, …) are read from.
    var environment: [String: String] = ProcessInfo.processInfo.environment

    /// `$STATE_DIRECTORY` under systemd, else `./todostream-data`.
    static var defaultDataDirectory: String { defaultDataDirectory(in: ProcessInfo.processInfo.environment) }

    /// `$STATE_DIRECTORY` (its first path) in `environment`, else `./todostream-data`.
    static func defaultDataDirectory(in environment: [String: String]) -> String {
        if let state = environment["STATE_DIRECTORY"], !state.isEmpty {
            return String(state.split(separator: ":").first ?? Substring(state))
        }
        return "todostream-data"
    }
}

/// What `/metrics` reads from the store.
struct StoreFigures: Sendable {
    var healthy: Bool
    var commitLatency: LatencyHistogram
    /// `StorageSpace`'s lines (SQLite): asked with the store's figures, behind the same
    /// patience, so that a file system that does not answer holds one scrape, not every one.
    var space: [String] = []
}

/// A startup failure, said in one line.
struct StartupError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

/// The wired daemon: store, servers, bus, hub and relay, and the one service group that runs
/// every long-running part of it.
///
/// The services, in the order they start; the group tells each to stop only once every service
/// after it has returned, so a shutdown runs from the bottom up:
/// 1. `StoreConnectionsService`: the store's connections (PostgreSQL's pool, `PostgresClient.run()`);
/// 2. `StoreService`: closes the store;
/// 3. `JournalFollowerService`: other daemons' broadcasts (PostgreSQL);
/// 4. `SequencerService`: runs what is still queued, then returns;
/// 5. the relay: tells every client `draining`, lets in-flight requests finish, closes;
/// 6. `SystemdService`: the watchdog while serving, `STOPPING=1` first thing in a shutdown;
/// 7. `SignalService`, when signals are given: SIGTERM/SIGINT start the shutdown, SIGHUP reloads.
final class Daemon: Sendable {
    /// How long `/healthz` and `/metrics` wait for the store before they say storage is down.
    static let storePatience = Duration.seconds(2)

    private let reloader: Reloader
    var options: DaemonOptions { reloader.options.withLockedValue { $0 } }
    let store: any ServedStore
    let sequencer: Sequencer<Event>
    let relay: RelayServer<TodoWireCodec>
    let addresses: BoundAddresses
    let logger: Logger
    var notifier: SystemdNotifier { reloader.notifier }

    private let serviceGroup: ServiceGroup

    private init(
        reloader: Reloader,
        store: any ServedStore,
        sequencer: Sequencer<Event>,
        relay: RelayServer<TodoWireCodec>,
        addresses: BoundAddresses,
        services: [ServiceGroupConfiguration.ServiceConfiguration],
        logger: Logger
    ) {
        self.reloader = reloader
        self.store = store
        self.sequencer = sequencer
        self.relay = relay
        self.addresses = addresses
        self.logger = logger
        // No `gracefulShutdownSignals`: `SignalService` handles every signal, in one place.
        self.serviceGroup = ServiceGroup(configuration: .init(services: services, logger: logger))
    }

    /// Opens storage and binds every listener. Throws `StartupError` naming what failed; the
    /// store is closed again on any failure after it opened.
    ///
    /// The group handles `signals` once it runs (`SignalService`). Create them before starting
    /// (`UnixSignalsSequence(trapping: .sigterm, .sigint, .sighup)` traps them at once), so that
    /// a signal during start-up waits for the group instead of killing the process.
    static func start<Signals: AsyncSequence & Sendable>(
        _ options: DaemonOptions,
        logger: Logger,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        signals: Signals,
        store givenStore: (any ServedStore)? = nil,
        resolver: (@Sendable () throws -> DaemonOptions)? = nil
    ) async throws -> Daemon where Signals.Element == UnixSignal {
        try await start(
            options,
            logger: logger,
            group: group,
            store: givenStore,
            resolver: resolver,
            signalService: { reloader in
                SignalService(signals: signals, reload: { _ = reloader.reload() }, logger: logger)
            }
        )
    }

    /// `start` without signals: the daemon stops through `shutdown()` only.
    static func start(
        _ options: DaemonOptions,
        logger: Logger,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        store givenStore: (any ServedStore)? = nil,
        resolver: (@Sendable () throws -> DaemonOptions)? = nil
    ) async throws -> Daemon {
        try await start(
            options,
            logger: logger,
            group: group,
            store: givenStore,
            resolver: resolver,
            signalService: nil
        )
    }

    private static func start(
        _ options: DaemonOptions,
        logger: Logger,
        group: any EventLoopGroup,
        store givenStore: (any ServedStore)?,
        resolver: (@Sendable () throws -> DaemonOptions)?,
        signalService: (@Sendable (Reloader) -> any Service)?
    ) async throws -> Daemon {
        // The thread the sequencer runs on, and the SQLite store with it.
        let sequencerThread = StoreThread(
            name: "sequencer",
            spin: options.sequencerSpin
        )
        let store: any ServedStore
        if let givenStore {
            store = givenStore
        } else {
            store = try await openStore(options, logger: logger, group: group, thread: sequencerThread)
        }
        do {
            return try await wire(
                options,
                store: store,
                logger: logger,
                group: group,
                sequencerThread: sequencerThread,
                resolver: resolver,
                signalService: signalService
            )
        } catch {
            // Nothing runs yet: the store is closed here, once, and never by a service.
            await store.close()
            throw error
        }
    }

    /// When a batch may wait for more requests: with PostgreSQL, while other daemons have
    /// committed within the last second (their commits and this daemon's take turns at the
    /// ordering lock); otherwise always (only when `store.sequencer_gather_us` is set).
    private static func gatherWhen(_ store: any ServedStore) -> @Sendable () -> Bool {
        guard let others = (store as? PostgresStore)?.otherCommitters else { return { true } }
        return { others.committed(within: .seconds(1)) }
    }

    /// Everything `start` does once the store is open.
    private static func wire(
        _ options: DaemonOptions,
        store: any ServedStore,
        logger: Logger,
        group: any EventLoopGroup,
        sequencerThread: StoreThread,
        resolver: (@Sendable () throws -> DaemonOptions)?,
        signalService: (@Sendable (Reloader) -> any Service)?
    ) async throws -> Daemon {
        let position: JournalPosition
        do {
            position = try await store.startingPosition()
        } catch {
            throw StartupError(message: "cannot read the journal's position: the database did not answer")
        }
        var loops: [any EventLoop] = []
        for loop in group.makeIterator() { loops.append(loop) }
        let codec = TodoWireCodec(rowCache: RowJSONCache(capacity: options.listRowCache))
        let hub = Hub(codec: codec, epoch: position.epoch, head: position.head, loops: loops)
        let capacity =
            options.engine == .postgres
            ? min(options.maxQueuedRequests, options.postgres.maxPendingWrites) : options.maxQueuedRequests
        var offload: Sequencer<Event>.Offload?
        if options.offloadHandOver {
            let handOverThread = StoreThread(name: "handover")
            offload = { @Sendable work in handOverThread.execute(work) }
        }
        let sequencer = Sequencer<Event>(
            bus: EventBus(servers: [ViewModelServer()], model: ModelServer(store: store)),
            sink: hub,
            capacity: capacity,
            maxBatch: options.maxBatch,
            offload: offload,
            gatherFor: options.sequencerGather,
            gatherWhen: gatherWhen(store)
        )

        var options = options
        if options.devTLS, options.tlsCertificatePath == nil {
            // On loopback only: `DaemonOptions.validate` refused any other address.
            do {
                let files = try DevCertificate.ensure(in: options.dataDirectory)
                options.tlsCertificatePath = files.certificatePath
                options.tlsKeyPath = files.keyPath
                logger.notice(
                    "using the development certificate",
                    metadata: ["path": "\(files.certificatePath)", "sha256": "\(files.fingerprint)"]
                )
            } catch {
                throw StartupError(
                    message: "cannot create the development certificate in \(options.dataDirectory): \(error)"
                )
            }
        }
        var tlsContext: NIOSSLContext?
        if let cert = options.tlsCertificatePath, let key = options.tlsKeyPath {
            tlsContext = try makeTLSContext(
                certificatePath: cert,
                keyPath: key,
                clientCAPath: options.tlsClientCAPath,
                closeTimeout: options.tlsCloseTimeout
            )
            // Served anyway (the operator may be about to replace it), but said loudly: every
            // client that checks it refuses it.
            if let problem = certificateDateProblem(cert) {
                logger.error("\(problem): clients will refuse it; replace it and reload")
            }
            if options.listeners.tls == nil, !options.listeners.httpTLS {
                logger.warning(
                    "a TLS certificate is given but no listener uses it: add listen.tls (--tls-listen) or tls.http (--http-tls)"
                )
            }
        }

        let settings = RelaySettings(configuration: options.relay, auth: options.auth)
        // A storage stall holds the store's thread: monitoring gets "down" after this long.
        let healthLookout = StoreLookout(initial: true, patience: Self.storePatience)
        let figuresLookout = StoreLookout(
            initial: StoreFigures(healthy: true, commitLatency: LatencyHistogram()),
            patience: Self.storePatience
        )
        let relay = RelayServer(
            hub: hub,
            settings: settings,
            submit: { event, origin in sequencer.submit(event, origin: origin) },
            journal: store,
            listeners: options.listeners,
            tlsContext: tlsContext,
            group: group,
            health: {
                HealthReport(
                    storageOK: await healthLookout.value({ await store.isHealthy }, stalled: { _ in false }),
                    connections: hub.connectionCount,
                    seq: hub.seq,
                    epoch: hub.epoch,
                    resyncs: hub.metrics.resynchronizations
                )
            },
            metrics: { [sqliteDirectory = options.engine == .sqlite ? options.dataDirectory : nil] in
                let figures = await figuresLookout.value(
                    {
                        StoreFigures(
                            healthy: await store.lastSeenHealthy,
                            commitLatency: await store.commitLatency,
                            space: StorageSpace.prometheus(directory: sqliteDirectory)
                        )
                    },
                    stalled: { StoreFigures(healthy: false, commitLatency: $0.commitLatency) }
                )
                let (storeHealthy, commitLatency) = (figures.healthy, figures.commitLatency)
                let loops = await hub.loopMetrics()
                return hub.metrics.render(
                    seq: hub.seq,
                    loops: loops,
                    extra: [
                        "# HELP todostream_storage_up Whether the last storage commit succeeded.",
                        "# TYPE todostream_storage_up gauge",
                        "todostream_storage_up \(storeHealthy ? 1 : 0)",
                        "# HELP todostream_store_pending_writes Requests queued for the sequencer's next batch.",
                        "# TYPE todostream_store_pending_writes gauge",
                        "todostream_store_pending_writes \(sequencer.queued)",
                    ] + figures.space
                        + commitLatency.prometheus(
                            name: "todostream_store_commit_seconds",
                            help:
                                "Time to commit one group of writes (todos and journal, one transaction; "
                                + "failed commits included)."
                        )
                )
            },
            assets: TodoWeb.files,
            logger: logger
        )
        let addresses: BoundAddresses
        do {
            addresses = try await relay.start()
        } catch let error as ListenError {
            throw StartupError(message: error.message)
        }
        let reloader = Reloader(
            options: NIOLockedValueBox(options),
            resolver: resolver,
            relay: relay,
            notifier: SystemdNotifier(environment: options.environment),
            logger: logger
        )
        reloader.certificateInUse.withLockedValue { $0 = options.tlsCertificatePath.flatMap(Reloader.contents(of:)) }
        let systemd = SystemdService(
            notifier: reloader.notifier,
            watchdogInterval: SystemdNotifier.watchdogInterval(environment: options.environment),
            statusInterval: .seconds(5),
            probe: { [group, store, relay, reloader] in
                await Self.probe(group: group, store: store, relay: relay).map(reloader.status)
            },
            logger: logger
        )
        // Other daemons' broadcasts (several daemons on one database) merge into the same order.
        let follower = JournalFollowerService(
            store: store,
            after: position.head,
            publish: { entries in hub.publishJournal(entries) },
            resynchronized: { seq in hub.resynchronize(through: seq) }
        )
        // In start order; the group stops them in reverse (see `Daemon`).
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: StoreConnectionsService(store: store), serviceName: "store-connections"),
            .init(service: StoreService(store: store), serviceName: "store"),
            .init(service: follower, serviceName: "journal-follower"),
            .init(service: SequencerService(sequencer: sequencer, thread: sequencerThread), serviceName: "sequencer"),
            .init(service: relay, serviceName: "relay"),
            .init(service: systemd, serviceName: "systemd"),
        ]
        if let signalService {
            // Returns on SIGTERM/SIGINT: that shuts the group down gracefully, in reverse order.
            services.append(
                .init(
                    service: signalService(reloader),
                    successTerminationBehavior: .gracefullyShutdownGroup,
                    serviceName: "signals"
                )
            )
        }
        // Said once everything is up, so that a startup failure stays a one-line error.
        logger.notice(
            "serving",
            metadata: ["engine": "\(options.engine.rawValue)", "database": "\(options.databaseDescription)"]
        )
        return Daemon(
            reloader: reloader,
            store: store,
            sequencer: sequencer,
            relay: relay,
            addresses: addresses,
            services: services,
            logger: logger
        )
    }

    private static func openStore(
        _ options: DaemonOptions,
        logger: Logger,
        group: any EventLoopGroup,
        thread: StoreThread
    ) async throws -> any ServedStore {
        switch options.engine {
        case .memory:
            return await GroupCommitStore.inMemory(retention: options.retention, executor: thread).0
        case .sqlite:
            do {
                let store = try await GroupCommitStore.sqlite(
                    directory: options.dataDirectory,
                    retention: options.retention,
                    synchronousFull: options.synchronousFull,
                    walWriteBufferBytes: options.walWriteBufferBytes,
                    cacheKiB: options.sqliteCacheKiB,
                    pageBytes: options.sqlitePageBytes,
                    deferredTodos: options.sqliteDeferredTodos,
                    eventLoop: group.next(),
                    thread: thread,
                    logger: logger
                )
                return store
            } catch let error as StoreError {
                throw StartupError(message: error.message)
            }
        case .postgres:
            do {
                var settings = try PostgresSettings(url: options.postgresURL ?? "")
                settings.poolSize = options.postgres.poolSize
                settings.acquireTimeout = options.postgres.timeout
                settings.catchUpInterval = options.postgres.catchUpInterval
                settings.commitFollowGrace = options.postgres.commitFollowGrace
                settings.stagingGuesses = options.postgres.stagingGuesses
                let store = try await PostgresStore.open(
                    settings: settings,
                    retention: options.retention,
                    startupTimeout: options.postgres.startupTimeout,
                    eventLoopGroup: group,
                    taskExecutor: thread.tasks,
                    logger: logger
                )
                return store
            } catch let error as PostgresSettings.ParseError {
                throw StartupError(message: "postgres_url \(error.message)")
            } catch let error as StoreError {
                throw StartupError(message: error.message)
            }
        }
    }

    /// Whether `host` can only be reached from this machine: `localhost`, an IPv4 literal in
    /// 127.0.0.0/8 (also IPv4-mapped), or `::1`. A host *name* such as `127.example.com` is not
    /// loopback, whatever it starts with.
    static func isLoopback(_ host: String) -> Bool {
        var text = host.lowercased()
        if text.hasPrefix("["), text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        if text == "localhost" || text == "::1" || text == "0:0:0:0:0:0:0:1" { return true }
        if text.hasPrefix("::ffff:") { text = String(text.dropFirst("::ffff:".count)) }
        let octets = text.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4 else { return false }
        for octet in octets {
            guard (1...3).contains(octet.count), octet.allSatisfy(\.isASCII), octet.allSatisfy(\.isNumber),
                let value = Int(octet), value <= 255
            else { return false }
        }
        return octets[0] == "127"
    }

    /// What is wrong with the dates of the certificate at `path` (its first, the server's),
    /// at `now`: nil when it is valid, or cannot be read (`makeTLSContext` says why then).
    static func certificateDateProblem(_ path: String, now: Date = Date()) -> String? {
        guard let certificate = try? NIOSSLCertificate.fromPEMFile(path).first else { return nil }
        return certificateDateProblem(certificate, path: path, now: now)
    }

    /// The same, of a certificate file's bytes already read (`path` names it in the message).
    static func certificateDateProblem(pem: [UInt8], path: String, now: Date = Date()) -> String? {
        guard let certificate = try? NIOSSLCertificate.fromPEMBytes(pem).first else { return nil }
        return certificateDateProblem(certificate, path: path, now: now)
    }

    private static func certificateDateProblem(_ certificate: NIOSSLCertificate, path: String, now: Date) -> String? {
        let formatter = ISO8601DateFormatter()
        let notAfter = Date(timeIntervalSince1970: TimeInterval(certificate.notValidAfter))
        let notBefore = Date(timeIntervalSince1970: TimeInterval(certificate.notValidBefore))
        if now > notAfter { return "the TLS certificate \(path) expired on \(formatter.string(from: notAfter))" }
        if now < notBefore {
            return "the TLS certificate \(path) is not valid until \(formatter.string(from: notBefore))"
        }
        return nil
    }

    static func makeTLSContext(
        certificatePath: String,
        keyPath: String,
        clientCAPath: String?,
        closeTimeout: TimeAmount
    ) throws -> NIOSSLContext {
        // Each file on its own, so that the message names the one at fault, in plain words.
        func load<T>(_ what: String, _ path: String, _ contents: String, _ read: () throws -> T) throws -> T {
            if let problem = Self.unreadable(path) {
                throw StartupError(message: "cannot load TLS \(what) \(path): \(problem)")
            }
            do {
                return try read()
            } catch {
                throw StartupError(message: "cannot load TLS \(what) \(path): it holds no PEM \(contents)")
            }
        }
        let chain = try load("certificate", certificatePath, "certificate") {
            try NIOSSLCertificate.fromPEMFile(certificatePath).map { NIOSSLCertificateSource.certificate($0) }
        }
        guard !chain.isEmpty else {
            throw StartupError(message: "cannot load TLS certificate \(certificatePath): it holds no PEM certificate")
        }
        let key = try load("key", keyPath, "private key") { try NIOSSLPrivateKey(file: keyPath, format: .pem) }
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain,
            privateKey: .privateKey(key)
        )
        configuration.minimumTLSVersion = .tlsv12
        // A connection the daemon closes (a drain, a slow consumer) waits this long at most
        // for the client's close_notify before the socket is closed.
        configuration.shutdownTimeout = closeTimeout
        if let clientCAPath {
            let roots = try load("client CA", clientCAPath, "certificate") {
                try NIOSSLCertificate.fromPEMFile(clientCAPath)
            }
            configuration.trustRoots = .certificates(roots)
            configuration.certificateVerification = .noHostnameVerification
        }
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw StartupError(
                message: "cannot load TLS certificate \(certificatePath) with key \(keyPath): "
                    + "the key does not match the certificate"
                    + (chain.count > 1
                        ? " (the first in the file: the server's own must come first, then its intermediates)" : "")
            )
        }
    }

    /// Why `path` cannot be read, in plain words; nil when it can.
    private static func unreadable(_ path: String) -> String? {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { return "no such file" }
        if isDirectory.boolValue { return "it is a directory" }
        guard access(path, R_OK) == 0 else { return String(cString: strerror(errno)).lowercased() }
        return nil
    }

    /// Serves until SIGTERM/SIGINT (or `shutdown()`), then drains and closes storage. SIGHUP

    /// Runs every service until SIGTERM/SIGINT (through `SignalService`) or `shutdown()`, then
    /// shuts them down in reverse order: the relay drains, the sequencer answers what is
    /// queued, the store closes. Returns once all of them have; nothing it started outlives it.
    func run() async throws {
        try await serviceGroup.run()
    }

    /// One round trip through every event loop and the store, bounded in time. Nil when any of
    /// them does not answer within `timeout`: then the watchdog must not be fed.
    static func probe(
        group: any EventLoopGroup,
        store: any ServedStore,
        relay: RelayServer<TodoWireCodec>,
        timeout: Duration = .seconds(2)
    ) async -> String? {
        let answered = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let once = NIOLockedValueBox<CheckedContinuation<Bool, Never>?>(continuation)
            @Sendable func finish(_ value: Bool) {
                once.withLockedValue { pending in
                    pending?.resume(returning: value)
                    pending = nil
                }
            }
            let timer = Task {
                do {
                    try await Task.sleep(for: timeout)
                } catch {
                    return  // cancelled: the probe answered
                }
                finish(false)
            }
            Task {
                var loops: [any EventLoop] = []
                for loop in group.makeIterator() { loops.append(loop) }
                for loop in loops { try? await loop.submit {}.get() }
                _ = await store.lastSeenHealthy
                finish(true)
                timer.cancel()
            }
        }
        guard answered else { return nil }
        let hub = relay.hub
        return "\(hub.connectionCount) connections, seq \(hub.seq)"
    }

    /// Reloads what can change while running (what SIGHUP does); see `Reloader`.
    @discardableResult
    func reload() -> Bool {
        reloader.reload()
    }

    /// Starts a graceful shutdown, as SIGTERM does. Before `run()`, the group remembers it and
    /// shuts down as soon as it runs.
    func shutdown() async {
        await serviceGroup.triggerGracefulShutdown()
    }
}

/// The space left for a SQLite store, for `/metrics`: a disk that fills up fails every commit
/// (`/healthz` then says so), and this is what an alert watches before it does.
enum StorageSpace {
    /// `todostream_storage_free_bytes` (what an unprivileged writer may still use on the data
    /// directory's file system) and `todostream_storage_file_bytes` (the database and its WAL);
    /// nothing without a directory (the other engines) or when the file system cannot be asked.
    static func prometheus(directory: String?) -> [String] {
        guard let directory else { return [] }
        var space = statvfs()
        guard statvfs(directory, &space) == 0 else { return [] }
        let free = UInt64(space.f_bavail) * UInt64(space.f_frsize)
        var files: UInt64 = 0
        let (database, wal) = GroupCommitStore.sqliteFiles(in: directory)
        for path in [database, wal] {
            var status = stat()
            if stat(path, &status) == 0 { files += UInt64(status.st_size) }
        }
        return [
            "# HELP todostream_storage_free_bytes Space left on the data directory's file system (SQLite).",
            "# TYPE todostream_storage_free_bytes gauge",
            "todostream_storage_free_bytes \(free)",
            "# HELP todostream_storage_file_bytes Size of the SQLite database and its WAL.",
            "# TYPE todostream_storage_file_bytes gauge",
            "todostream_storage_file_bytes \(files)",
        ]
    }
}
