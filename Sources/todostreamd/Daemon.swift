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
        var startupTimeout: Duration = .seconds(30)
        var maxPendingWrites = 16_384
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
    var retention = JournalRetention()
    var maxBatch = 256
    /// Requests waiting for the sequencer at most.
    var maxQueuedRequests = 65_536
    var synchronousFull = true
    /// Where systemd's variables (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, …) are read from.
    var environment: [String: String] = ProcessInfo.processInfo.environment

    /// `$STATE_DIRECTORY` under systemd, else `./todostream-data`.
    static var defaultDataDirectory: String {
        if let state = ProcessInfo.processInfo.environment["STATE_DIRECTORY"], !state.isEmpty {
            return String(state.split(separator: ":").first ?? Substring(state))
        }
        return "todostream-data"
    }
}

/// A startup failure, said in one line.
struct StartupError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

/// The wired daemon: store, servers, bus, hub and relay.
final class Daemon: Sendable {
    private let currentOptions: NIOLockedValueBox<DaemonOptions>
    /// Produces fresh options on reload (the config file, the environment, the flags).
    private let resolver: (@Sendable () throws -> DaemonOptions)?
    var options: DaemonOptions { currentOptions.withLockedValue { $0 } }
    let store: any ServedStore
    let sequencer: Sequencer<Event>
    let relay: RelayServer<TodoWireCodec>
    let addresses: BoundAddresses
    let logger: Logger

    private let serviceGroup: ServiceGroup
    let notifier: SystemdNotifier

    private init(
        options: DaemonOptions,
        resolver: (@Sendable () throws -> DaemonOptions)?,
        store: any ServedStore,
        sequencer: Sequencer<Event>,
        sequencerLoop: any EventLoop,
        relay: RelayServer<TodoWireCodec>,
        addresses: BoundAddresses,
        signals: [UnixSignal],
        group: any EventLoopGroup,
        logger: Logger
    ) {
        self.currentOptions = NIOLockedValueBox(options)
        self.resolver = resolver
        self.store = store
        self.sequencer = sequencer
        self.relay = relay
        self.addresses = addresses
        self.logger = logger
        let notifier = SystemdNotifier(environment: options.environment)
        self.notifier = notifier
        let systemd = SystemdService(
            notifier: notifier,
            watchdogInterval: SystemdNotifier.watchdogInterval(environment: options.environment),
            statusInterval: .seconds(5),
            probe: { [group, store, relay] in await Self.probe(group: group, store: store, relay: relay) },
            logger: logger
        )
        // Shut down in reverse order: systemd hears STOPPING first, then the relay drains, then
        // the sequencer answers what is still queued.
        self.serviceGroup = ServiceGroup(
            configuration: .init(
                services: [
                    .init(service: SequencerService(sequencer: sequencer, loop: sequencerLoop)), .init(service: relay),
                    .init(service: systemd),
                ],
                gracefulShutdownSignals: signals,
                logger: logger
            )
        )
    }

    /// Opens storage and binds every listener. Throws `StartupError` naming what failed.
    static func start(
        _ options: DaemonOptions,
        logger: Logger,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        signals: [UnixSignal] = [.sigterm, .sigint],
        store givenStore: (any ServedStore)? = nil,
        resolver: (@Sendable () throws -> DaemonOptions)? = nil
    ) async throws -> Daemon {
        // The loop the sequencer runs on, and the SQLite store with it.
        let sequencerLoop = group.next()
        let store: any ServedStore
        if let givenStore {
            store = givenStore
        } else {
            store = try await openStore(options, logger: logger, group: group, loop: sequencerLoop)
        }
        let position: JournalPosition
        do {
            position = try await store.position()
        } catch {
            await store.close()
            throw StartupError(message: "cannot read the journal's position: the database did not answer")
        }
        var loops: [any EventLoop] = []
        for loop in group.makeIterator() { loops.append(loop) }
        let hub = Hub(codec: TodoWireCodec(), epoch: position.epoch, head: position.head, loops: loops)
        let capacity =
            options.engine == .postgres
            ? min(options.maxQueuedRequests, options.postgres.maxPendingWrites) : options.maxQueuedRequests
        let sequencer = Sequencer<Event>(
            bus: EventBus(servers: [ViewModelServer()], model: ModelServer(store: store)),
            sink: hub,
            capacity: capacity,
            maxBatch: options.maxBatch
        )
        // Other daemons' broadcasts (several daemons on one database) merge into the same order.
        await store.follow(
            after: position.head,
            publish: { entries in hub.publishJournal(entries) },
            resynchronized: { seq in hub.resynchronize(through: seq) }
        )

        var options = options
        if options.devTLS, options.tlsCertificatePath == nil {
            for address in [options.listeners.tls, options.listeners.httpTLS ? options.listeners.http : nil].compactMap(
                { $0 })
            where !Self.isLoopback(address.host) {
                throw StartupError(
                    message:
                        "--dev-tls is for development on loopback only, not \(address); give --tls-cert and --tls-key"
                )
            }
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
            tlsContext = try makeTLSContext(certificatePath: cert, keyPath: key, clientCAPath: options.tlsClientCAPath)
        }

        let settings = RelaySettings(configuration: options.relay, auth: options.auth)
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
                    storageOK: await store.isHealthy,
                    connections: hub.connectionCount,
                    seq: hub.seq,
                    epoch: hub.epoch,
                    resyncs: hub.metrics.resynchronizations
                )
            },
            metrics: {
                let storeHealthy = await store.isHealthy
                let storeMetrics = await store.metrics
                let loops = await hub.loopMetrics()
                return hub.metrics.render(
                    seq: hub.seq,
                    loops: loops,
                    extra: [
                        "# HELP todostream_storage_up Whether the last storage commit succeeded.",
                        "# TYPE todostream_storage_up gauge",
                        "todostream_storage_up \(storeHealthy ? 1 : 0)",
                        "# HELP todostream_store_pending_writes Writes waiting for the next group commit.",
                        "# TYPE todostream_store_pending_writes gauge",
                        "todostream_store_pending_writes \(storeMetrics.pendingWrites)",
                    ]
                        + storeMetrics.commitLatency.prometheus(
                            name: "todostream_store_commit_seconds",
                            help: "Time to commit one group of writes (todos and journal, one transaction)."
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
            await store.close()
            throw StartupError(message: error.message)
        }
        // Said once everything is up, so that a startup failure stays a one-line error.
        logger.notice(
            "serving",
            metadata: ["engine": "\(options.engine.rawValue)", "database": "\(options.databaseDescription)"]
        )
        return Daemon(
            options: options,
            resolver: resolver,
            store: store,
            sequencer: sequencer,
            sequencerLoop: sequencerLoop,
            relay: relay,
            addresses: addresses,
            signals: signals,
            group: group,
            logger: logger
        )
    }

    private static func openStore(
        _ options: DaemonOptions,
        logger: Logger,
        group: any EventLoopGroup,
        loop: any EventLoop
    ) async throws -> any ServedStore {
        switch options.engine {
        case .memory:
            return await GroupCommitStore.inMemory(retention: options.retention, eventLoop: loop).0
        case .sqlite:
            do {
                let store = try await GroupCommitStore.sqlite(
                    directory: options.dataDirectory,
                    retention: options.retention,
                    synchronousFull: options.synchronousFull,
                    eventLoop: loop,
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
                let store = try await PostgresStore.open(
                    settings: settings,
                    retention: options.retention,
                    startupTimeout: options.postgres.startupTimeout,
                    eventLoopGroup: group,
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

    static func makeTLSContext(certificatePath: String, keyPath: String, clientCAPath: String?) throws -> NIOSSLContext
    {
        do {
            let chain = try NIOSSLCertificate.fromPEMFile(certificatePath).map {
                NIOSSLCertificateSource.certificate($0)
            }
            guard !chain.isEmpty else { throw StartupError(message: "no certificate in \(certificatePath)") }
            let key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
            var configuration = TLSConfiguration.makeServerConfiguration(
                certificateChain: chain,
                privateKey: .privateKey(key)
            )
            configuration.minimumTLSVersion = .tlsv12
            if let clientCAPath {
                configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(clientCAPath))
                configuration.certificateVerification = .noHostnameVerification
            }
            return try NIOSSLContext(configuration: configuration)
        } catch let error as StartupError {
            throw error
        } catch {
            throw StartupError(message: "cannot load TLS certificate \(certificatePath) and key \(keyPath): \(error)")
        }
    }

    /// Serves until SIGTERM/SIGINT (or `shutdown()`), then drains and closes storage. SIGHUP
    /// reloads what can change live.
    func run(handleHangup: Bool = true) async throws {
        let hangups = Task {
            guard handleHangup else { return }
            for await _ in await UnixSignalsSequence(trapping: .sighup) {
                reload()
            }
        }
        defer { hangups.cancel() }
        try await serviceGroup.run()
        await store.close()
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
                _ = await store.isHealthy
                finish(true)
                timer.cancel()
            }
        }
        guard answered else { return nil }
        let hub = relay.hub
        return "\(hub.connectionCount) connections, seq \(hub.seq)"
    }

    /// Reloads what can change while running: the config file (through `resolver`, which
    /// re-reads the file and the environment and re-applies the flags), limits, tokens, and
    /// the TLS certificate and key. Everything is checked first; on any error the old settings
    /// stay in force, the reason is logged, and nobody is disconnected.
    @discardableResult
    func reload() -> Bool {
        logger.notice("reloading")
        notifier.notify("RELOADING=1\nMONOTONIC_USEC=\(SystemdNotifier.monotonicMicroseconds())")
        defer { notifier.notify("READY=1") }
        let current = currentOptions.withLockedValue { $0 }
        var next: DaemonOptions
        do {
            next = try resolver?() ?? current
        } catch {
            logger.error("config not reloaded; keeping the old one", metadata: ["reason": "\(error)"])
            return false
        }
        if next.devTLS, next.tlsCertificatePath == nil {
            next.tlsCertificatePath = current.tlsCertificatePath
            next.tlsKeyPath = current.tlsKeyPath
        }
        if next.listeners != current.listeners || next.dataDirectory != current.dataDirectory
            || next.storage != current.storage || next.postgresURL != current.postgresURL
            || next.postgres != current.postgres
        {
            logger.warning(
                "listeners, data_dir, storage and postgres settings change only on restart; keeping the running ones"
            )
            next.listeners = current.listeners
            next.dataDirectory = current.dataDirectory
            next.storage = current.storage
            next.postgresURL = current.postgresURL
            next.postgres = current.postgres
        }
        if let cert = next.tlsCertificatePath, let key = next.tlsKeyPath {
            do {
                let context = try Self.makeTLSContext(
                    certificatePath: cert,
                    keyPath: key,
                    clientCAPath: next.tlsClientCAPath
                )
                relay.replaceTLSContext(context)
                logger.notice("TLS certificate reloaded", metadata: ["path": "\(cert)"])
            } catch {
                logger.error(
                    "not reloaded: the TLS certificate is unusable; keeping the old settings",
                    metadata: ["reason": "\(error)"]
                )
                return false
            }
        }
        relay.settings.update(configuration: next.relay, auth: next.auth)
        if next.logLevel != current.logLevel, let level = Logger.Level(rawValue: next.logLevel) {
            LogLevelControl.level = level
            logger.notice("log level changed", metadata: ["log_level": "\(level)"])
        }
        currentOptions.withLockedValue { $0 = next }
        logger.notice("reloaded")
        return true
    }

    /// Starts a graceful shutdown, as SIGTERM does.
    func shutdown() async {
        await serviceGroup.triggerGracefulShutdown()
    }
}
