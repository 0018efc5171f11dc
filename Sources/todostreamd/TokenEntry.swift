import Crypto
import EventStream
import Foundation
import Relay
import TodoStore

/// An access token as configured: its SHA-256 digest (hex) and the role it grants.
struct TokenEntry: Sendable, Hashable {
    let sha256: String
    let role: Role

    static func digest(_ token: String) -> String {
        SHA256.hash(data: Array(token.utf8)).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}

extension DaemonOptions {
    /// The relay's view of the tokens.
    var auth: AuthConfiguration {
        var digests: [String: Role] = [:]
        for token in tokens { digests[token.sha256] = token.role }
        return AuthConfiguration(digests: digests, digest: TokenEntry.digest)
    }

    /// The storage engine in use: the configured one, else PostgreSQL when a PostgreSQL URL is
    /// given, else SQLite.
    var engine: Storage {
        if let storage { return storage }
        if let postgresURL, !postgresURL.isEmpty { return .postgres }
        return .sqlite
    }

    /// Where the data lives, for the startup log: never a password.
    var databaseDescription: String {
        switch engine {
        case .memory: return "none (in memory; nothing is kept)"
        case .sqlite: return (dataDirectory as NSString).appendingPathComponent("todostream.sqlite")
        case .postgres:
            // The settings' description names host, port, database and user, never the password.
            return (try? PostgresSettings(url: postgresURL ?? "")).map { "\($0)" } ?? "?"
        }
    }

    /// Checks what no single key can: the combinations.
    func validate() throws {
        // One token under two roles would take whichever came last: a view token that is also
        // a monitor token would leave no view token, and authentication silently off.
        var roles: [String: Role] = [:]
        for token in tokens {
            if let earlier = roles.updateValue(token.role, forKey: token.sha256), earlier != token.role {
                throw ConfigError(
                    message:
                        "the same token is given two roles (\(earlier.rawValue) and \(token.role.rawValue)); give each role its own token"
                )
            }
        }
        if let storage, storage != .postgres, let postgresURL, !postgresURL.isEmpty {
            // Two daemons started this way would look like a cluster and diverge.
            throw ConfigError(
                message:
                    "postgres_url (or --postgres-url, or TODOSTREAM_POSTGRES_URL) is set but storage is \(storage.rawValue): a PostgreSQL URL needs storage postgres (or no storage setting); remove one of the two"
            )
        }
        if engine == .postgres {
            guard let postgresURL, !postgresURL.isEmpty else {
                throw ConfigError(
                    message: "storage postgres needs postgres_url (or --postgres-url, or TODOSTREAM_POSTGRES_URL)"
                )
            }
            do {
                _ = try PostgresSettings(url: postgresURL)
            } catch {
                throw ConfigError(message: "postgres_url \(error.message)")
            }
        }
        guard relay.maxFrameBytes <= relay.webSocketHardCapBytes else {
            throw ConfigError(message: "limits.max_frame_bytes must not exceed limits.websocket_max_message_bytes")
        }
        if listeners.tcp == nil && listeners.tls == nil && listeners.http == nil {
            throw ConfigError(message: "no listener: set at least one of listen.tcp, listen.tls, listen.http")
        }
        let hasCertificate = tlsCertificatePath != nil && tlsKeyPath != nil
        if (listeners.tls != nil || listeners.httpTLS) && !hasCertificate && !devTLS {
            throw ConfigError(message: "listen.tls and tls.http need tls.cert and tls.key (or tls.dev on loopback)")
        }
        if (tlsCertificatePath == nil) != (tlsKeyPath == nil) {
            throw ConfigError(message: "tls.cert and tls.key go together")
        }
        if devTLS, tlsCertificatePath == nil {
            for address in [listeners.tls, listeners.httpTLS ? listeners.http : nil].compactMap({ $0 })
            where !Daemon.isLoopback(address.host) {
                throw ConfigError(
                    message:
                        "tls.dev (--dev-tls) is for development on loopback only, not \(address); give tls.cert and tls.key (--tls-cert, --tls-key)"
                )
            }
        }
        if dataDirectory.isEmpty {
            throw ConfigError(message: "data_dir (--data-dir) is empty")
        }
        try checkListenersApart()
        guard !allowInsecure else { return }
        // Plain text to the outside with nobody checked is refused unless asked for. Only a
        // view token makes clients authenticate: a monitor token alone leaves every view open.
        guard !tokens.contains(where: { $0.role == .view }) else { return }
        var plain: [ListenerConfiguration.Address] = []
        if let tcp = listeners.tcp { plain.append(tcp) }
        if let http = listeners.http, !listeners.httpTLS { plain.append(http) }
        for address in plain where !Daemon.isLoopback(address.host) {
            throw ConfigError(
                message:
                    "refusing to listen on \(address) in plain text without a view token: anyone could read and change every todo (a monitor token alone does not make clients authenticate); add a view token or TLS, or set allow_insecure: true"
            )
        }
    }

    /// Two listeners on one port (of one address, or one of them on every address) cannot
    /// both bind: said here, so that `check-config` says it too.
    private func checkListenersApart() throws {
        let named: [(String, ListenerConfiguration.Address)] = [
            ("listen.tcp", listeners.tcp), ("listen.tls", listeners.tls), ("listen.http", listeners.http),
        ].compactMap { name, address in address.map { (name, $0) } }
        let wildcards: Set<String> = ["0.0.0.0", "::", "*", ""]
        for (index, (name, address)) in named.enumerated() where address.port != 0 && address.inheritedDescriptor == nil
        {
            for (otherName, other) in named[(index + 1)...]
            where other.port == address.port && other.inheritedDescriptor == nil
                && (other.host == address.host || wildcards.contains(other.host) || wildcards.contains(address.host))
            {
                throw ConfigError(
                    message: "\(name) and \(otherName) are both on port \(address.port) (\(address), \(other))"
                )
            }
        }
    }
}
