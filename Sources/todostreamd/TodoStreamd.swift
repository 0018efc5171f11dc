import ArgumentParser
import EventStream
import Foundation
import Logging
import NIOConcurrencyHelpers
import Relay
import TodoStore
import UnixSignals

@main
struct TodoStreamd: AsyncParsableCommand {
    static let version = "1.0.0"

    static let configuration = CommandConfiguration(
        commandName: "todostreamd",
        abstract: "The todostream daemon: the todo app's event stream, served to remote views.",
        version: version,
        subcommands: [Serve.self, CheckConfig.self, Tap.self, Replay.self],
        defaultSubcommand: Serve.self
    )
}

/// Options shared by `serve` and `check-config`: every one overrides the config file and the
/// environment.
struct SettingsOptions: ParsableArguments {
    @Option(name: .customLong("config"), help: "A YAML config file (see config/todostreamd.yaml).")
    var config: String?

    @Option(
        name: .customLong("data-dir"),
        help: "Where the database lives (default: $STATE_DIRECTORY, else ./todostream-data)."
    )
    var dataDirectory: String?

    @Option(help: "NDJSON over TCP: HOST:PORT, or 'off' (default 127.0.0.1:7878).")
    var listen: String?

    @Option(
        name: .customLong("http-listen"),
        help: "HTTP (web page, /events WebSocket, /healthz, /metrics): HOST:PORT or 'off' (default 127.0.0.1:8080)."
    )
    var httpListen: String?

    @Option(name: .customLong("tls-listen"), help: "NDJSON over TLS: HOST:PORT (needs --tls-cert and --tls-key).")
    var tlsListen: String?

    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain for TLS.")
    var tlsCert: String?

    @Option(name: .customLong("tls-key"), help: "PEM private key for TLS.")
    var tlsKey: String?

    @Option(
        name: .customLong("tls-client-ca"),
        help: "PEM CA bundle: require TLS clients to present a certificate it signed."
    )
    var tlsClientCA: String?

    @Flag(
        name: .customLong("dev-tls"),
        help: "With no --tls-cert: generate a self-signed certificate into the data dir (loopback only)."
    )
    var devTLS = false

    @Flag(name: .customLong("http-tls"), help: "Serve the HTTP listener over TLS (https://, wss://).")
    var httpTLS = false

    @Option(
        name: .customLong("token"),
        help: "An access token as ROLE:TOKEN (role view or monitor); repeatable. Any view token makes auth required."
    )
    var tokens: [String] = []

    @Option(name: .customLong("monitor-token"), help: "A token that grants the monitor role.")
    var monitorToken: String?

    @Option(help: "Storage engine: sqlite, memory, or postgres (several daemons on one database).")
    var storage: String?

    @Option(
        name: .customLong("postgres-url"),
        help:
            "With --storage postgres: postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=MODE, or several servers as HOST1:PORT1,HOST2:PORT2 with &target_session_attrs=read-write (prefer TODOSTREAM_POSTGRES_URL for a password)."
    )
    var postgresURL: String?

    @Option(name: .customLong("max-frame-bytes"), help: "Largest frame accepted, in bytes (default 65536).")
    var maxFrameBytes: Int?

    @Option(name: .customLong("max-queue-bytes"), help: "Outbound queue bound per connection, in bytes.")
    var maxQueueBytes: Int?

    @Option(name: .customLong("max-connections"), help: "Connections accepted at once.")
    var maxConnections: Int?

    @Option(
        name: .customLong("rate-limit"),
        help: "Frames per second per connection (default 1000); sets the burst to twice it (at most 10000000)."
    )
    var rateLimit: Int?

    @Flag(name: .customLong("allow-insecure"), help: "Allow plain text on a non-loopback address without tokens.")
    var allowInsecure = false

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String?

    /// Defaults, then the config file, then `TODOSTREAM_…` variables, then these flags.
    func resolve(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> DaemonOptions {
        var options = DaemonOptions()
        options.environment = environment
        options.dataDirectory = DaemonOptions.defaultDataDirectory(in: environment)
        if let config {
            try ConfigFile.apply(try ConfigFile.read(path: config), to: &options)
            options.configPath = config
        }
        try ConfigFile.apply(try ConfigFile.environmentValues(environment), to: &options)
        var flags: ConfigFile.Values = [:]
        flags["data_dir"] = dataDirectory
        flags["listen.tcp"] = listen
        flags["listen.http"] = httpListen
        flags["listen.tls"] = tlsListen
        flags["tls.cert"] = tlsCert
        flags["tls.key"] = tlsKey
        flags["tls.client_ca"] = tlsClientCA
        if devTLS { flags["tls.dev"] = true }
        if httpTLS { flags["tls.http"] = true }
        if allowInsecure { flags["allow_insecure"] = true }
        flags["storage"] = storage
        flags["postgres_url"] = postgresURL
        flags["limits.max_frame_bytes"] = maxFrameBytes
        flags["limits.max_queue_bytes"] = maxQueueBytes
        flags["limits.max_connections"] = maxConnections
        if let rateLimit {
            flags["limits.rate_limit_per_second"] = rateLimit
            // Twice the rate, kept within the burst's own range: a rate out of range is refused
            // by its own check, with the number given (not the burst's).
            let (twice, overflow) = rateLimit.multipliedReportingOverflow(by: 2)
            flags["limits.rate_limit_burst"] = min(max(overflow ? Int.max : twice, 1), ConfigFile.maxRateLimitBurst)
        }
        flags["log_level"] = logLevel
        try ConfigFile.apply(try ConfigFile.checked(flags, naming: ConfigFile.flagName), to: &options)
        for entry in tokens {
            let parts = entry.split(separator: ":", maxSplits: 1).map(String.init)
            guard parts.count == 2, let role = Role(rawValue: parts[0]), !parts[1].isEmpty else {
                throw ConfigError(message: "--token must be ROLE:TOKEN with role view or monitor")
            }
            // The config file's rule: an empty or short token (`--token "view:$UNSET"`) would
            // let anyone in with it.
            guard parts[1].count >= ConfigFile.minimumTokenCharacters else {
                throw ConfigError(
                    message: "--token: the token must be at least \(ConfigFile.minimumTokenCharacters) characters"
                )
            }
            options.tokens.append(TokenEntry(sha256: TokenEntry.digest(parts[1]), role: role))
        }
        if let monitorToken {
            guard monitorToken.count >= ConfigFile.minimumTokenCharacters else {
                throw ConfigError(
                    message: "--monitor-token must be at least \(ConfigFile.minimumTokenCharacters) characters"
                )
            }
            options.tokens.append(TokenEntry(sha256: TokenEntry.digest(monitorToken), role: .monitor))
        }
        SocketActivation.apply(try SocketActivation.descriptors(environment: environment), to: &options.listeners)
        try options.validate()
        return options
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the daemon (the default).",
        discussion: """
            With no options: SQLite under ./todostream-data, NDJSON on 127.0.0.1:7878, HTTP on 127.0.0.1:8080. \
            Settings come from --config FILE, then TODOSTREAM_… environment variables, then flags.
            """
    )

    @OptionGroup var settings: SettingsOptions

    @Option(
        name: .customLong("port-file"),
        help: "Once every listener accepts, write the bound ports here as JSON (for scripts using port 0)."
    )
    var portFile: String?

    func run() async throws {
        // Every signal the daemon handles is trapped first thing, before the config is read and
        // anything listens, and handled in one place: the daemon's `SignalService`. One that
        // arrives while the daemon starts waits for it, so a stop during start-up is a graceful
        // stop too, not the default kill. (Only one sent within the process's first
        // milliseconds, while its libraries load and its arguments are parsed, still takes the
        // default action: nothing is open then.)
        let trapped = await UnixSignalsSequence(trapping: UnixSignal.trappedByTheDaemon)
        MemoryAllocator.configure(environment: ProcessInfo.processInfo.environment)
        let options: DaemonOptions
        do {
            options = try settings.resolve()
        } catch let error as ConfigError {
            fail(error.message)
        }
        LogLevelControl.level = Logger.Level(rawValue: options.logLevel) ?? .info
        let toJournal = JournalStream.isStandardErrorTheJournal(environment: ProcessInfo.processInfo.environment)
        LoggingSystem.bootstrap { label in
            var handler =
                toJournal
                ? StreamLogHandler(label: label, stream: JournalStream())
                : StreamLogHandler.standardError(label: label)
            handler.logLevel = .trace
            return ReloadableLogHandler(handler)
        }
        let logger = Logger(label: "todostreamd")
        // Passed on to the daemon's `SignalService`; a stop signal while the daemon is still
        // starting (retrying an unreachable PostgreSQL for `postgres.startup_timeout_ms`, longer
        // than the unit's stop timeout) also cancels the start: nothing runs yet, so that is
        // the whole graceful stop.
        let (signals, forward) = AsyncStream.makeStream(of: UnixSignal.self, bufferingPolicy: .bufferingNewest(16))
        let phase = StartPhase()
        let settings = self.settings
        let starting = Task {
            try await Daemon.start(options, logger: logger, signals: signals, resolver: { try settings.resolve() })
        }
        let forwarding = Task {
            for await signal in trapped {
                if signal.stopsTheDaemon, phase.stopDuringStart() { starting.cancel() }
                forward.yield(signal)
            }
        }
        defer { forwarding.cancel() }
        let daemon: Daemon
        do {
            daemon = try await starting.value
            phase.started()
        } catch {
            if phase.stopRequested {
                logger.notice("stopped while starting")
                return
            }
            fail((error as? StartupError)?.message ?? "cannot start: \(error)")
        }
        if let portFile {
            do {
                try writePortFile(portFile, daemon.addresses)
            } catch {
                // Nobody can find the daemon: stop it the usual way (the store closes), then fail.
                await daemon.shutdown()
                try? await daemon.run()
                fail("\(error)")
            }
        }
        try await daemon.run()
    }
}

struct CheckConfig: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Check a config file (with the environment's overrides) without starting."
    )

    @Argument(help: "The YAML config file.")
    var file: String

    func run() throws {
        var settings = try SettingsOptions.parse([])
        settings.config = file
        let options: DaemonOptions
        do {
            options = try settings.resolve()
        } catch let error as ConfigError {
            fail(error.message)
        }
        // A data directory that `serve` would use (SQLite's database, or the --dev-tls
        // certificate) must be one where it is: `serve` refuses a file there.
        if options.engine == .sqlite || options.devTLS,
            let problem = GroupCommitStore.dataDirectoryProblem(options.dataDirectory)
        {
            fail(problem)
        }
        // The files the PostgreSQL URL names (sslrootcert) are read as `serve` reads them.
        if options.engine == .postgres {
            do {
                try PostgresStore.checkFiles(settings: PostgresSettings(url: options.postgresURL ?? ""))
            } catch let error as StoreError {
                fail(error.message)
            }
        }
        // The certificate and key are loaded as `serve` loads them: a config that names files
        // it cannot use does not pass.
        if let certificate = options.tlsCertificatePath, let key = options.tlsKeyPath {
            do {
                _ = try Daemon.makeTLSContext(
                    certificatePath: certificate,
                    keyPath: key,
                    clientCAPath: options.tlsClientCAPath,
                    closeTimeout: options.tlsCloseTimeout
                )
            } catch let error as StartupError {
                fail(error.message)
            }
            if let problem = Daemon.certificateDateProblem(certificate) {
                // At the journal's warning priority when it is standard error (ExecStartPre).
                let prefix = JournalStream.prefix(.warning, environment: ProcessInfo.processInfo.environment)
                FileHandle.standardError.write(Data("\(prefix)todostreamd: warning: \(problem)\n".utf8))
            }
        }
        print("\(file): ok")
    }
}

/// Whether the daemon is still starting, and whether a stop signal came meanwhile.
final class StartPhase: Sendable {
    private let state = NIOLockedValueBox((started: false, stopRequested: false))

    /// A stop signal came: true when the daemon is still starting (the start is cancelled).
    func stopDuringStart() -> Bool {
        state.withLockedValue { state in
            guard !state.started else { return false }
            state.stopRequested = true
            return true
        }
    }

    func started() { state.withLockedValue { $0.started = true } }

    var stopRequested: Bool { state.withLockedValue { $0.stopRequested } }
}

/// Prints `todostreamd: MESSAGE` to standard error and exits 1.
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data(failureLine(message, environment: ProcessInfo.processInfo.environment).utf8))
    Foundation.exit(1)
}

/// The line `fail` writes: with the journal's error priority (`<3>`, sd-daemon(3)) when standard
/// error is the journal, as every logged line has its own, so `journalctl -p err` shows why
/// the daemon did not start.
func failureLine(_ message: String, environment: [String: String]) -> String {
    "\(JournalStream.prefix(.error, environment: environment))todostreamd: \(message)\n"
}

func writePortFile(_ path: String, _ addresses: BoundAddresses) throws {
    var fields: [String] = []
    if let port = addresses.tcp?.port { fields.append("\"tcp\":\(port)") }
    if let port = addresses.tls?.port { fields.append("\"tls\":\(port)") }
    if let port = addresses.http?.port { fields.append("\"http\":\(port)") }
    let temporary = path + ".tmp"
    do {
        try Data(("{" + fields.joined(separator: ",") + "}\n").utf8).write(to: URL(fileURLWithPath: temporary))
    } catch {
        let directory = (path as NSString).deletingLastPathComponent
        var isDirectory: ObjCBool = false
        let reason =
            !FileManager.default.fileExists(atPath: directory.isEmpty ? "." : directory, isDirectory: &isDirectory)
            ? "no such directory"
            : !isDirectory.boolValue ? "\(directory) is not a directory" : "it cannot be written there"
        throw PortFileError(message: "cannot write the port file \(path): \(reason)")
    }
    guard rename(temporary, path) == 0 else {
        throw PortFileError(message: "cannot write the port file \(path): \(String(cString: strerror(errno)))")
    }
}

/// The port file could not be written, in plain words.
struct PortFileError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
