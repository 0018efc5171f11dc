import EventStream
import Foundation
import Relay
import Yams

/// The daemon's settings from a YAML file, then `TODOSTREAM_…` environment variables, then
/// flags (each overriding the one before). This file parses and checks them (and is what the
/// config-file fuzz target compiles, through a symlink); `ConfigFile+Apply.swift` applies them. Every key is listed in `ConfigFile.keys` and
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
        "postgres.commit_follow_grace_us": .int(0...1_000_000),
        "postgres.staging_cache_todos": .int(0...1_000_000),
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
        "tls.close_timeout_ms": .int(0...600_000),
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
        "limits.http_reserve_connections": .int(0...10_000),
        "limits.rate_limit_per_second": .int(1...10_000_000),
        "limits.rate_limit_burst": .int(1...maxRateLimitBurst),
        "limits.unauthenticated_idle_seconds": .int(1...86_400),
        "limits.handshake_timeout_ms": .int(100...3_600_000),
        "limits.initial_hold_ms": .int(0...10_000),
        "limits.socket_send_buffer_bytes": .int(0...(64 << 20)),
        // Linux takes at most 32767 s for TCP_KEEPIDLE.
        "limits.tcp_keepalive_seconds": .int(0...32_767),
        "journal.max_entries": .int(1...1_000_000_000),
        "journal.max_age_seconds": .int(0...(10 * 365 * 86_400)),
        "store.max_batch": .int(1...65_536),
        "store.list_row_cache": .int(0...10_000_000),
        "store.sequencer_spin_us": .int(0...100_000),
        "store.sequencer_handover_thread": .bool,
        "store.sequencer_gather_us": .int(0...100_000),
        "store.max_queued_requests": .int(1...10_000_000),
        "store.synchronous": .choice(["full", "normal"]),
        "store.sqlite_wal_write_buffer_kib": .int(0...65_536),
        "store.sqlite_cache_kib": .int(64...1_048_576),
        "store.sqlite_page_bytes": .int(512...65_536),
        "store.sqlite_deferred_todos": .int(0...1_000_000),
        "shutdown.drain_timeout_ms": .int(0...600_000),
        "shutdown.reconnect_after_ms": .int(0...600_000),
    ]

    typealias Values = [String: Any]

    /// Reads and checks a YAML file: its keys, flattened to `a.b` form.
    static func read(path: String) throws -> Values {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw ConfigError(message: "cannot read config file \(path): no such file")
        }
        guard !isDirectory.boolValue else {
            throw ConfigError(message: "cannot read config file \(path): it is a directory")
        }
        // Read through a handle: `/dev/null` (no settings) and other files that are not regular
        // are read as they come.
        guard let handle = FileHandle(forReadingAtPath: path) else {
            let reason = FileManager.default.isReadableFile(atPath: path) ? "it cannot be read" : "permission denied"
            throw ConfigError(message: "cannot read config file \(path): \(reason)")
        }
        defer { try? handle.close() }
        let data: Data
        do {
            data = try handle.read(upToCount: maxBytes + 1) ?? Data()
        } catch {
            throw ConfigError(message: "cannot read config file \(path): it cannot be read")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ConfigError(message: "cannot read config file \(path): it is not UTF-8 text")
        }
        return try parse(yaml: text, path: path)
    }

    /// The largest `limits.rate_limit_burst`.
    static let maxRateLimitBurst = 10_000_000

    /// A YAML null (`~`, `null`, or nothing after the colon): a section left empty (its keys all
    /// commented out) sets nothing; a setting with it is an error that says so (taken as text, a
    /// `data_dir: ~` was a directory named `~`).
    struct Null {
        /// What a setting left null is told, after its name.
        static let problem = "has no value (~, null or nothing after the colon)"
    }

    /// The shortest token accepted, from the config file or a flag.
    static let minimumTokenCharacters = 8

    /// The largest config file read, and the most YAML nodes it may hold once aliases are
    /// followed (a handful of aliases can otherwise stand for billions of nodes).
    static let maxBytes = 1 << 20
    static let maxNodes = 100_000
    static let maxDepth = 32

    /// Parses and checks a config file's text; `path` only names it in errors.
    ///
    /// The YAML is composed into nodes and read here, not handed to a generic loader: a key
    /// that is not a plain scalar (`? [a]: b`) or a bomb of nested aliases must be an error,
    /// not a crash or an endless expansion.
    static func parse(yaml text: String, path: String) throws -> Values {
        guard text.utf8.count <= maxBytes else {
            throw ConfigError(message: "\(path) is larger than \(maxBytes) bytes")
        }
        let document: Node?
        do {
            document = try Yams.compose(yaml: text)
        } catch {
            throw ConfigError(message: "\(path) is not valid YAML: \(yamlProblem(error, text: text))")
        }
        guard let document else { return [:] }
        var budget = maxNodes
        guard let root = try plain(document, depth: 0, budget: &budget, path: path) as? [String: Any] else {
            throw ConfigError(message: "\(path): the top level must be a mapping of keys")
        }
        var flat: Values = [:]
        try flatten(root, prefix: "", into: &flat, path: path)
        // A value's error names the file it is in (the environment's and the flags' name
        // their variable or flag instead).
        for (key, value) in flat { try check(key, value, name: "\(path): \(key)") }
        return flat
    }

    /// What is wrong with the YAML and where, without the file's text: Yams's own description
    /// quotes the lines around the problem, or the whole document, tokens included, which would
    /// end up on the terminal and in the journal.
    static func yamlProblem(_ error: any Error, text: String = "") -> String {
        guard let error = error as? YamlError else { return "it cannot be read" }
        func at(_ mark: Mark) -> String { "line \(mark.line), column \(mark.column)" }
        switch error {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _),
            .composer(_, let problem, let mark, _):
            return "\(problem) at \(at(mark))"
        case .reader(let problem, _, _, _):
            return problem
        case .duplicatedKeysInMapping(let duplicates, let context):
            // Yams marks the mapping, which begins before the keys: the line of the second
            // appearance is the one to look at.
            let names = duplicates.sorted()
            if let name = names.first, let line = secondLine(of: name, in: text, from: context.mark.line) {
                return "a key given twice (\(names.joined(separator: ", "))) at line \(line)"
            }
            return "a key given twice (\(names.joined(separator: ", "))) near \(at(context.mark))"
        case .dataCouldNotBeDecoded:
            return "it is not UTF-8 text"
        default:
            return "it cannot be read"
        }
    }

    /// The line (from 1) where `key` appears as a mapping key for the second time at or after
    /// line `start`, at one indentation; nil when it cannot be told (a quoted or flow key).
    static func secondLine(of key: String, in text: String, from start: Int) -> Int? {
        var indentation: Int?
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
        where index + 1 >= start {
            let indent = line.prefix { $0 == " " }.count
            let rest = line.dropFirst(indent)
            guard rest.hasPrefix(key), rest.dropFirst(key.count).drop(while: { $0 == " " }).first == ":" else {
                continue
            }
            if let first = indentation {
                if indent == first { return index + 1 }
            } else {
                indentation = indent
            }
        }
        return nil
    }

    /// A scalar as the config's kinds need it, resolved here rather than by Yams (whose YAML 1.1
    /// resolution traps on a base-60 integer that overflows, such as `1:2:3…`, found by the
    /// fuzz target): a plain `true`/`yes`/`on` or `false`/`no`/`off` (any case) is a Bool, a
    /// plain decimal that fits 64 bits is an Int, a longer one `WholeNumberTooLarge`,
    /// everything else (quoted scalars included) is its text.
    static func value(of scalar: Node.Scalar) -> Any {
        let text = scalar.string
        // `!!null`, whatever its text, as well as a plain `~`, `null` or nothing.
        if scalar.tag.rawValue == Tag.Name.null.rawValue { return Null() }
        guard scalar.style == .plain || scalar.style == .any else { return text }
        if ["", "~", "null", "Null", "NULL"].contains(text) { return Null() }
        switch text.lowercased() {
        case "true", "yes", "on": return true
        case "false", "no", "off": return false
        default: break
        }
        if let number = Int(text.hasPrefix("+") ? String(text.dropFirst()) : text) { return number }
        if isWholeNumber(text) { return WholeNumberTooLarge(text: text) }
        return text
    }

    /// A plain decimal that does not fit 64 bits: out of every integer setting's range.
    struct WholeNumberTooLarge: CustomStringConvertible {
        let text: String
        var description: String { text }
    }

    /// Digits, with a sign or not.
    private static func isWholeNumber(_ text: String) -> Bool {
        var digits = Substring(text)
        if digits.first == "-" || digits.first == "+" { digits = digits.dropFirst() }
        return !digits.isEmpty && digits.allSatisfy { $0.isASCII && $0.isNumber }
    }

    /// A node as plain values: scalars by `value(of:)`, sequences as arrays, mappings with
    /// scalar keys as `[String: Any]`.
    private static func plain(_ node: Node, depth: Int, budget: inout Int, path: String) throws -> Any {
        budget -= 1
        guard budget >= 0 else { throw ConfigError(message: "\(path) holds more than \(maxNodes) values") }
        guard depth <= maxDepth else { throw ConfigError(message: "\(path) nests deeper than \(maxDepth) levels") }
        switch node {
        case .scalar(let scalar):
            return value(of: scalar)
        case .alias:
            throw ConfigError(message: "\(path): aliases are not supported")
        case .sequence(let sequence):
            return try sequence.map { try plain($0, depth: depth + 1, budget: &budget, path: path) }
        case .mapping(let mapping):
            var values: [String: Any] = [:]
            for (key, value) in mapping {
                guard case .scalar(let name) = key else {
                    throw ConfigError(message: "\(path): every key must be a plain name")
                }
                values[name.string] = try plain(value, depth: depth + 1, budget: &budget, path: path)
            }
            return values
        }
    }

    private static func flatten(_ node: [String: Any], prefix: String, into flat: inout Values, path: String) throws {
        for (name, value) in node {
            let key = prefix.isEmpty ? name : "\(prefix).\(name)"
            if keys[key] != nil {
                // `limits.max_frame_bytes: …` beside a `limits:` section that sets it too.
                guard flat[key] == nil else { throw ConfigError(message: "\(path): \(key) is given twice") }
                flat[key] = value
            } else if keys.keys.contains(where: { $0.hasPrefix(key + ".") }) {
                if value is Null { continue }
                guard let nested = value as? [String: Any] else {
                    throw ConfigError(message: "\(path): \(key) must be a section (its keys indented below it)")
                }
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
            case .int(let range):
                guard let number = Int(text) else {
                    throw ConfigError(message: notAnInt(name, text, range, tooLarge: isWholeNumber(text)))
                }
                value = number
            case .bool:
                guard
                    // What YAML reads as a boolean in the file reads as one here too.
                    let flag = [
                        "true": true, "1": true, "yes": true, "on": true,
                        "false": false, "0": false, "no": false, "off": false,
                    ][text.lowercased()]
                else { throw ConfigError(message: "\(name) must be true or false (or yes/no, on/off, 1/0)") }
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

    /// Why a value given for an integer setting is not one: a whole number too large for any
    /// setting (`tooLarge`) is out of its range, not "not a whole number".
    private static func notAnInt(_ label: String, _ text: String, _ range: ClosedRange<Int>, tooLarge: Bool) -> String {
        tooLarge ? outOfRange(label, text, range) : "\(label) must be a whole number"
    }

    private static func outOfRange(_ label: String, _ text: String, _ range: ClosedRange<Int>) -> String {
        "\(label) is \(text), out of range \(range.lowerBound)...\(range.upperBound)"
    }

    static func environmentName(_ key: String) -> String {
        "TODOSTREAM_" + key.uppercased().replacingOccurrences(of: ".", with: "_")
    }

    private static func check(_ key: String, _ value: Any, name: String? = nil) throws {
        let label = name ?? key
        if value is Null, keys[key] != nil {
            throw ConfigError(message: "\(label) \(Null.problem): give one, or leave it out for its default")
        }
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
            guard let number = value as? Int else {
                throw ConfigError(message: notAnInt(label, "\(value)", range, tooLarge: value is WholeNumberTooLarge))
            }
            guard range.contains(number) else { throw ConfigError(message: outOfRange(label, "\(number)", range)) }
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
                for field in ["role", "token", "token_sha256"] where entry[field] is Null {
                    throw ConfigError(message: "\(label)[\(index)].\(field) \(Null.problem)")
                }
                guard let role = entry["role"] as? String, Role(rawValue: role) != nil else {
                    throw ConfigError(message: "\(label)[\(index)].role must be view or monitor")
                }
                // YAML reads unquoted digits as a number: a token or digest that did not stay
                // text would be dropped, so it is an error here.
                for field in ["token", "token_sha256"] where entry[field] != nil && !(entry[field] is String) {
                    throw ConfigError(message: "\(label)[\(index)].\(field) must be a string (quote it)")
                }
                let plain = entry["token"] as? String
                let hashed = entry["token_sha256"] as? String
                guard (plain == nil) != (hashed == nil) else {
                    throw ConfigError(message: "\(label)[\(index)] needs exactly one of token or token_sha256")
                }
                if let plain, plain.count < ConfigFile.minimumTokenCharacters {
                    throw ConfigError(
                        message:
                            "\(label)[\(index)].token must be at least \(ConfigFile.minimumTokenCharacters) characters"
                    )
                }
                if let hashed, hashed.count != 64 || !hashed.allSatisfy(\.isHexDigit) {
                    throw ConfigError(message: "\(label)[\(index)].token_sha256 must be 64 hex digits")
                }
            }
        }
    }
}
