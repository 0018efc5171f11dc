import EventStream
import Foundation
import Relay
import TodoStore
import Yams

/// The daemon's settings from a YAML file, then `TODOSTREAM_…` environment variables, then
/// flags (each overriding the one before). Every key is listed in `ConfigFile.keys` and
/// documented in `config/todostreamd.yaml`; an unknown key or a value out of range is an error
/// that names the key.
struct ConfigError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

enum ConfigFile {
    enum Kind {
        case string
        case address
        case bool
        case int(ClosedRange<Int>)
        case choice([String])
        case strings
        case tokens
    }

    /// Every key, with its kind.
    static let keys: [String: Kind] = [
        "data_dir": .string,
        "storage": .choice(["sqlite", "memory", "postgres"]),
        "postgres_url": .string,
        "postgres.pool_size": .int(1...1000),
        "postgres.timeout_ms": .int(100...600_000),
        "postgres.catch_up_interval_ms": .int(50...600_000),
        "postgres.startup_timeout_ms": .int(0...3_600_000),
        "postgres.max_pending_writes": .int(1...1_000_000),
        "log_level": .choice(["trace", "debug", "info", "notice", "warning", "error", "critical"]),
        "allow_insecure": .bool,
        "listen.tcp": .address,
        "listen.http": .address,
        "listen.tls": .address,
        "tls.cert": .string,
        "tls.key": .string,
        "tls.client_ca": .string,
        "tls.http": .bool,
        "tls.dev": .bool,
        "auth.tokens": .tokens,
        "websocket.allowed_origins": .strings,
        "websocket.compression": .bool,
        "monitor.redact_fields": .strings,
        "websocket.compress_min_bytes": .int(0...(64 << 20)),
        "limits.max_frame_bytes": .int(256...(1 << 20)),
        "limits.websocket_max_message_bytes": .int(1024...(64 << 20)),
        "limits.max_queue_bytes": .int(1024...(1 << 30)),
        "limits.max_queue_frames": .int(16...10_000_000),
        "limits.slow_consumer_grace_ms": .int(0...600_000),
        "limits.slow_consumer_check_ms": .int(1...600_000),
        "limits.max_pipelined_frames": .int(1...100_000),
        "limits.max_subscriptions": .int(1...10_000),
        "limits.max_connections": .int(1...10_000_000),
        "limits.max_connections_per_ip": .int(1...10_000_000),
        "limits.rate_limit_per_second": .int(1...10_000_000),
        "limits.rate_limit_burst": .int(1...10_000_000),
        "limits.unauthenticated_idle_seconds": .int(1...86_400),
        "limits.initial_hold_ms": .int(0...10_000),
        "limits.socket_send_buffer_bytes": .int(0...(64 << 20)),
        "journal.max_entries": .int(1...1_000_000_000),
        "journal.max_age_seconds": .int(0...(10 * 365 * 86_400)),
        "store.max_batch": .int(1...65_536),
        "store.max_queued_requests": .int(1...10_000_000),
        "store.synchronous": .choice(["full", "normal"]),
        "shutdown.drain_timeout_ms": .int(0...600_000),
        "shutdown.reconnect_after_ms": .int(0...600_000),
    ]

    typealias Values = [String: Any]

    /// Reads and checks a YAML file: its keys, flattened to `a.b` form.
    static func read(path: String) throws -> Values {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ConfigError(message: "cannot read config file \(path)")
        }
        let document: Any?
        do {
            document = try Yams.load(yaml: text)
        } catch {
            throw ConfigError(message: "\(path) is not valid YAML: \(error)")
        }
        guard let document else { return [:] }
        guard let root = document as? [String: Any] else {
            throw ConfigError(message: "\(path): the top level must be a mapping of keys")
        }
        var flat: Values = [:]
        try flatten(root, prefix: "", into: &flat, path: path)
        for (key, value) in flat { try check(key, value) }
        return flat
    }

    private static func flatten(_ node: [String: Any], prefix: String, into flat: inout Values, path: String) throws {
        for (name, value) in node {
            let key = prefix.isEmpty ? name : "\(prefix).\(name)"
            if keys[key] != nil {
                flat[key] = value
            } else if let nested = value as? [String: Any], keys.keys.contains(where: { $0.hasPrefix(key + ".") }) {
                try flatten(nested, prefix: key, into: &flat, path: path)
            } else {
                throw ConfigError(message: "\(path): unknown key \(key)")
            }
        }
    }

    /// The environment's overrides: `TODOSTREAM_LIMITS_MAX_FRAME_BYTES` for `limits.max_frame_bytes`.
    static func environmentValues(_ environment: [String: String]) throws -> Values {
        var values: Values = [:]
        for key in keys.keys {
            let name = environmentName(key)
            guard let text = environment[name] else { continue }
            let value: Any
            switch keys[key] {
            case .int:
                guard let number = Int(text) else { throw ConfigError(message: "\(name) must be a whole number") }
                value = number
            case .bool:
                guard
                    let flag = ["true": true, "1": true, "yes": true, "false": false, "0": false, "no": false][
                        text.lowercased()
                    ]
                else { throw ConfigError(message: "\(name) must be true or false") }
                value = flag
            case .strings:
                value = text.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) }
            case .tokens:
                throw ConfigError(message: "\(name): tokens are set in the config file, not the environment")
            default:
                value = text
            }
            try check(key, value, name: name)
            values[key] = value
        }
        return values
    }

    /// Checks values given as flags, naming the flag in errors.
    static func checked(_ values: Values, naming name: (String) -> String) throws -> Values {
        for (key, value) in values { try check(key, value, name: name(key)) }
        return values
    }

    static func flagName(_ key: String) -> String {
        let flags = [
            "data_dir": "--data-dir", "listen.tcp": "--listen", "listen.http": "--http-listen",
            "listen.tls": "--tls-listen", "tls.cert": "--tls-cert", "tls.key": "--tls-key",
            "tls.client_ca": "--tls-client-ca", "tls.dev": "--dev-tls", "tls.http": "--http-tls",
            "storage": "--storage", "postgres_url": "--postgres-url", "limits.max_frame_bytes": "--max-frame-bytes",
            "limits.max_queue_bytes": "--max-queue-bytes", "limits.max_connections": "--max-connections",
            "limits.rate_limit_per_second": "--rate-limit", "limits.rate_limit_burst": "--rate-limit",
            "log_level": "--log-level", "allow_insecure": "--allow-insecure",
        ]
        return flags[key] ?? key
    }

    static func environmentName(_ key: String) -> String {
        "TODOSTREAM_" + key.uppercased().replacingOccurrences(of: ".", with: "_")
    }

    private static func check(_ key: String, _ value: Any, name: String? = nil) throws {
        let label = name ?? key
        switch keys[key] {
        case .none:
            throw ConfigError(message: "unknown key \(label)")
        case .string:
            guard value is String else { throw ConfigError(message: "\(label) must be a string") }
        case .address:
            // YAML reads a bare `off` as false.
            if let flag = value as? Bool, flag == false { return }
            guard let text = value as? String, text == "off" || ListenerConfiguration.Address(parsing: text) != nil
            else {
                throw ConfigError(message: "\(label) must be HOST:PORT or off")
            }
        case .bool:
            guard value is Bool else { throw ConfigError(message: "\(label) must be true or false") }
        case .int(let range):
            guard let number = value as? Int else { throw ConfigError(message: "\(label) must be a whole number") }
            guard range.contains(number) else {
                throw ConfigError(
                    message: "\(label) is \(number), out of range \(range.lowerBound)...\(range.upperBound)"
                )
            }
        case .choice(let choices):
            guard let text = value as? String, choices.contains(text) else {
                throw ConfigError(message: "\(label) must be one of \(choices.joined(separator: ", "))")
            }
        case .strings:
            guard value is [String] || (value as? [Any])?.isEmpty == true else {
                throw ConfigError(message: "\(label) must be a list of strings")
            }
        case .tokens:
            guard let list = value as? [Any] else { throw ConfigError(message: "\(label) must be a list") }
            for (index, item) in list.enumerated() {
                guard let entry = item as? [String: Any] else {
                    throw ConfigError(
                        message: "\(label)[\(index)] must be a mapping with role and token or token_sha256"
                    )
                }
                for field in entry.keys where !["role", "token", "token_sha256"].contains(field) {
                    throw ConfigError(message: "\(label)[\(index)]: unknown key \(field)")
                }
                guard let role = entry["role"] as? String, Role(rawValue: role) != nil else {
                    throw ConfigError(message: "\(label)[\(index)].role must be view or monitor")
                }
                let plain = entry["token"] as? String
                let hashed = entry["token_sha256"] as? String
                guard (plain == nil) != (hashed == nil) else {
                    throw ConfigError(message: "\(label)[\(index)] needs exactly one of token or token_sha256")
                }
                if let plain, plain.count < 8 {
                    throw ConfigError(message: "\(label)[\(index)].token must be at least 8 characters")
                }
                if let hashed, hashed.count != 64 || !hashed.allSatisfy(\.isHexDigit) {
                    throw ConfigError(message: "\(label)[\(index)].token_sha256 must be 64 hex digits")
                }
            }
        }
    }

    /// Applies values (from a file or the environment) to options.
    static func apply(_ values: Values, to options: inout DaemonOptions) throws {
        func address(_ key: String) -> ListenerConfiguration.Address?? {
            if let flag = values[key] as? Bool, flag == false { return .some(nil) }
            guard let text = values[key] as? String else { return .none }
            return .some(text == "off" ? nil : ListenerConfiguration.Address(parsing: text))
        }
        func int(_ key: String) -> Int? { values[key] as? Int }
        if let value = values["data_dir"] as? String { options.dataDirectory = value }
        if let value = values["storage"] as? String, let storage = DaemonOptions.Storage(rawValue: value) {
            options.storage = storage
        }
        if let value = values["postgres_url"] as? String { options.postgresURL = value }
        if let value = int("postgres.pool_size") { options.postgres.poolSize = value }
        if let value = int("postgres.timeout_ms") { options.postgres.timeout = .milliseconds(value) }
        if let value = int("postgres.catch_up_interval_ms") { options.postgres.catchUpInterval = .milliseconds(value) }
        if let value = int("postgres.startup_timeout_ms") { options.postgres.startupTimeout = .milliseconds(value) }
        if let value = int("postgres.max_pending_writes") { options.postgres.maxPendingWrites = value }
        if let value = values["log_level"] as? String { options.logLevel = value }
        if let value = values["allow_insecure"] as? Bool { options.allowInsecure = value }
        if let value = address("listen.tcp") { options.listeners.tcp = value }
        if let value = address("listen.http") { options.listeners.http = value }
        if let value = address("listen.tls") { options.listeners.tls = value }
        if let value = values["tls.cert"] as? String { options.tlsCertificatePath = value }
        if let value = values["tls.key"] as? String { options.tlsKeyPath = value }
        if let value = values["tls.client_ca"] as? String { options.tlsClientCAPath = value }
        if let value = values["tls.http"] as? Bool { options.listeners.httpTLS = value }
        if let value = values["tls.dev"] as? Bool { options.devTLS = value }
        if let list = values["auth.tokens"] as? [Any] {
            var tokens: [TokenEntry] = []
            for case let entry as [String: Any] in list {
                guard let role = (entry["role"] as? String).flatMap(Role.init(rawValue:)) else { continue }
                if let plain = entry["token"] as? String {
                    tokens.append(TokenEntry(sha256: TokenEntry.digest(plain), role: role))
                }
                if let hashed = entry["token_sha256"] as? String {
                    tokens.append(TokenEntry(sha256: hashed.lowercased(), role: role))
                }
            }
            options.tokens = tokens
        }
        if let list = values["websocket.allowed_origins"] as? [String] { options.relay.allowedOrigins = list }
        if let value = values["websocket.compression"] as? Bool { options.relay.webSocketCompression = value }
        if let list = values["monitor.redact_fields"] as? [String] { options.relay.monitorRedactedFields = list }
        if let value = int("websocket.compress_min_bytes") { options.relay.webSocketCompressMinBytes = value }
        if let value = int("limits.max_frame_bytes") { options.relay.maxFrameBytes = value }
        if let value = int("limits.websocket_max_message_bytes") { options.relay.webSocketHardCapBytes = value }
        if let value = int("limits.max_queue_bytes") { options.relay.maxQueueBytes = value }
        if let value = int("limits.max_queue_frames") { options.relay.maxQueueFrames = value }
        if let value = int("limits.slow_consumer_grace_ms") { options.relay.slowConsumerGraceMs = value }
        if let value = int("limits.slow_consumer_check_ms") { options.relay.slowConsumerCheckMs = value }
        if let value = int("limits.max_pipelined_frames") { options.relay.maxPipelinedFrames = value }
        if let value = int("limits.max_subscriptions") { options.relay.maxSubscriptions = value }
        if let value = int("limits.max_connections") { options.relay.maxConnections = value }
        if let value = int("limits.max_connections_per_ip") { options.relay.maxConnectionsPerIP = value }
        if let value = int("limits.rate_limit_per_second") { options.relay.rateLimitPerSecond = Double(value) }
        if let value = int("limits.rate_limit_burst") { options.relay.rateLimitBurst = Double(value) }
        if let value = int("limits.unauthenticated_idle_seconds") { options.relay.unauthenticatedIdleSeconds = value }
        if let value = int("limits.initial_hold_ms") { options.relay.initialHoldMs = value }
        if let value = int("limits.socket_send_buffer_bytes") {
            options.relay.socketSendBufferBytes = value == 0 ? nil : value
        }
        if let value = int("journal.max_entries") { options.retention.maxEntries = UInt64(value) }
        if let value = int("journal.max_age_seconds") { options.retention.maxAgeSeconds = UInt64(value) }
        if let value = int("store.max_batch") { options.maxBatch = value }
        if let value = int("store.max_queued_requests") { options.maxQueuedRequests = value }
        if let value = values["store.synchronous"] as? String { options.synchronousFull = value == "full" }
        if let value = int("shutdown.drain_timeout_ms") { options.relay.drainTimeoutMs = value }
        if let value = int("shutdown.reconnect_after_ms") { options.relay.drainReconnectAfterMs = value }
    }
}
