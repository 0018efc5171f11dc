import ArgumentParser
import EventStream
import Foundation
import Logging
import Relay

@main
struct TodoStreamd: AsyncParsableCommand {
    static let version = "1.0.0"

    static let configuration = CommandConfiguration(
        commandName: "todostreamd",
        abstract: "The todostream daemon: the todo app's event stream, served to remote views.",
        version: version,
        subcommands: [Serve.self],
        defaultSubcommand: Serve.self
    )
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the daemon (the default).",
        discussion: "With no options: SQLite under ./todostream-data, NDJSON on 127.0.0.1:7878, HTTP on 127.0.0.1:8080."
    )

    @Option(
        name: .customLong("data-dir"),
        help: "Where the database lives (default: $STATE_DIRECTORY, else ./todostream-data)."
    )
    var dataDirectory: String?

    @Option(help: "NDJSON over TCP: HOST:PORT, or 'off'.")
    var listen: String = "127.0.0.1:7878"

    @Option(
        name: .customLong("http-listen"),
        help: "HTTP (web page, /events WebSocket, /healthz, /metrics): HOST:PORT, or 'off'."
    )
    var httpListen: String = "127.0.0.1:8080"

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

    @Option(help: "Storage engine: sqlite or memory.")
    var storage: String = "sqlite"

    @Option(name: .customLong("max-frame-bytes"), help: "Largest frame accepted, in bytes.")
    var maxFrameBytes: Int = 64 * 1024

    @Option(name: .customLong("max-queue-bytes"), help: "Outbound queue bound per connection, in bytes.")
    var maxQueueBytes: Int = 4 * 1024 * 1024

    @Option(name: .customLong("max-connections"), help: "Connections accepted at once.")
    var maxConnections: Int = 10_000

    @Option(name: .customLong("rate-limit"), help: "Frames per second per connection.")
    var rateLimit: Double = 1_000

    @Option(
        name: .customLong("port-file"),
        help: "Once every listener accepts, write the bound ports here as JSON (for scripts using port 0)."
    )
    var portFile: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "info"

    func options() throws -> DaemonOptions {
        var options = DaemonOptions()
        if let dataDirectory { options.dataDirectory = dataDirectory }
        options.listeners.tcp = try address(listen, flag: "--listen")
        options.listeners.http = try address(httpListen, flag: "--http-listen")
        options.listeners.tls = try tlsListen.flatMap { try address($0, flag: "--tls-listen") }
        options.listeners.httpTLS = httpTLS
        if options.listeners.tls != nil || httpTLS {
            guard (tlsCert != nil && tlsKey != nil) || devTLS else {
                throw ValidationError(
                    "--tls-listen and --http-tls need --tls-cert and --tls-key (or --dev-tls on loopback)."
                )
            }
        }
        guard (tlsCert == nil) == (tlsKey == nil) else {
            throw ValidationError("--tls-cert and --tls-key go together.")
        }
        options.tlsCertificatePath = tlsCert
        options.tlsKeyPath = tlsKey
        options.tlsClientCAPath = tlsClientCA
        options.devTLS = devTLS
        guard let engine = DaemonOptions.Storage(rawValue: storage) else {
            throw ValidationError("--storage must be sqlite or memory.")
        }
        options.storage = engine
        var tokenRoles: [String: Role] = [:]
        for entry in tokens {
            let parts = entry.split(separator: ":", maxSplits: 1).map(String.init)
            guard parts.count == 2, let role = Role(rawValue: parts[0]), !parts[1].isEmpty else {
                throw ValidationError("--token must be ROLE:TOKEN with role view or monitor.")
            }
            tokenRoles[parts[1]] = role
        }
        if let monitorToken { tokenRoles[monitorToken] = .monitor }
        options.auth = AuthConfiguration(tokens: tokenRoles)
        guard maxFrameBytes >= 256, maxFrameBytes <= options.relay.webSocketHardCapBytes else {
            throw ValidationError("--max-frame-bytes must be between 256 and \(options.relay.webSocketHardCapBytes).")
        }
        options.relay.maxFrameBytes = maxFrameBytes
        guard maxQueueBytes >= 1024 else { throw ValidationError("--max-queue-bytes must be at least 1024.") }
        options.relay.maxQueueBytes = maxQueueBytes
        guard maxConnections >= 1 else { throw ValidationError("--max-connections must be at least 1.") }
        options.relay.maxConnections = maxConnections
        guard rateLimit > 0 else { throw ValidationError("--rate-limit must be positive.") }
        options.relay.rateLimitPerSecond = rateLimit
        options.relay.rateLimitBurst = max(rateLimit * 2, 1)
        return options
    }

    private func address(_ text: String, flag: String) throws -> ListenerConfiguration.Address? {
        if text == "off" { return nil }
        guard let address = ListenerConfiguration.Address(parsing: text) else {
            throw ValidationError("\(flag) must be HOST:PORT (or off), not \(text).")
        }
        return address
    }

    func run() async throws {
        let options = try options()
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical.")
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "todostreamd")
        let daemon: Daemon
        do {
            daemon = try await Daemon.start(options, logger: logger)
        } catch let error as StartupError {
            FileHandle.standardError.write(Data("todostreamd: \(error.message)\n".utf8))
            throw ExitCode.failure
        }
        if let portFile {
            try writePortFile(portFile, daemon.addresses)
        }
        try await daemon.run()
    }
}

func writePortFile(_ path: String, _ addresses: BoundAddresses) throws {
    var fields: [String] = []
    if let port = addresses.tcp?.port { fields.append("\"tcp\":\(port)") }
    if let port = addresses.tls?.port { fields.append("\"tls\":\(port)") }
    if let port = addresses.http?.port { fields.append("\"http\":\(port)") }
    let temporary = path + ".tmp"
    try Data(("{" + fields.joined(separator: ",") + "}\n").utf8).write(to: URL(fileURLWithPath: temporary))
    _ = rename(temporary, path)
}
