import Foundation

/// Where and how to reach PostgreSQL, parsed from a libpq-style URL:
/// `postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=MODE&sslrootcert=FILE`, or a Unix
/// socket directory as `?host=/run/postgresql` (with `&port=N` when not 5432: the port names
/// the socket file).
///
/// `description` never shows the password.
public struct PostgresSettings: Sendable, Hashable, CustomStringConvertible {
    /// libpq's `sslmode`, without `allow`.
    public enum TLSMode: String, Sendable, Hashable, CaseIterable {
        /// Plain text only.
        case disable
        /// TLS when the server offers it, else plain text; the certificate is not checked.
        case prefer
        /// TLS or nothing; the certificate is not checked.
        case require
        /// TLS; the certificate must be signed by `sslrootcert`.
        case verifyCA = "verify-ca"
        /// TLS; the certificate must be signed by `sslrootcert` and name the host.
        case verifyFull = "verify-full"
    }

    public var host: String
    public var port: Int
    /// When set, connect through the Unix socket in this directory instead of TCP.
    public var socketDirectory: String?
    public var user: String
    public var password: String?
    public var database: String
    public var tlsMode: TLSMode
    /// PEM CA bundle for `verify-ca` and `verify-full`.
    public var rootCertificatePath: String?
    /// Connections the pool keeps at most (the journal follower's own connection is extra).
    public var poolSize: Int = 8
    /// How long a request waits for a pooled connection before it is answered `unavailable`.
    public var acquireTimeout: Duration = .seconds(5)
    /// How often the journal follower reads the journal even without a notification.
    public var catchUpInterval: Duration = .seconds(1)

    /// The Unix socket path (`DIR/.s.PGSQL.PORT`) when connecting through one.
    public var socketPath: String? {
        socketDirectory.map { ($0 as NSString).appendingPathComponent(".s.PGSQL.\(port)") }
    }

    public var description: String {
        let place = socketDirectory.map { "\($0) (unix socket, port \(port))" } ?? "\(host):\(port)"
        return "postgres://\(user)@\(place)/\(database) sslmode=\(tlsMode.rawValue)"
    }

    /// A failure to parse; its message never contains the password.
    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    /// Parses a `postgres://` or `postgresql://` URL.
    public init(url text: String) throws(ParseError) {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            scheme == "postgres" || scheme == "postgresql"
        else {
            throw ParseError(message: "must be a URL like postgres://USER:PASSWORD@HOST:PORT/DATABASE")
        }
        var host = components.host ?? ""
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        var port = components.port ?? 5432
        var user = components.user?.removingPercentEncoding ?? components.user ?? ""
        let password = components.password.map { $0.removingPercentEncoding ?? $0 }
        var path = components.path
        if path.hasPrefix("/") { path.removeFirst() }
        let database = path.removingPercentEncoding ?? path
        var tlsMode = TLSMode.prefer
        var socketDirectory: String?
        var rootCertificatePath: String?
        for item in components.queryItems ?? [] {
            let value = item.value ?? ""
            switch item.name {
            case "sslmode":
                guard let mode = TLSMode(rawValue: value) else {
                    throw ParseError(
                        message: "has sslmode=\(value); use one of "
                            + TLSMode.allCases.map(\.rawValue).joined(separator: ", ")
                    )
                }
                tlsMode = mode
            case "sslrootcert":
                rootCertificatePath = value
            case "host":
                guard value.hasPrefix("/") else {
                    throw ParseError(message: "has host=\(value); only a Unix socket directory (an absolute path)")
                }
                socketDirectory = value
            case "user":
                if user.isEmpty { user = value }
            case "port":
                guard let number = Int(value) else { throw ParseError(message: "has port=\(value), not a number") }
                port = number
            default:
                throw ParseError(message: "has the unknown parameter \(item.name)")
            }
        }
        guard (1...65_535).contains(port) else { throw ParseError(message: "has a port out of range") }
        guard !host.isEmpty || socketDirectory != nil else {
            throw ParseError(message: "names no host (give HOST or ?host=/socket/directory)")
        }
        guard !user.isEmpty else { throw ParseError(message: "names no user") }
        if (tlsMode == .verifyCA || tlsMode == .verifyFull) && rootCertificatePath == nil {
            throw ParseError(message: "has sslmode=\(tlsMode.rawValue), which needs sslrootcert=FILE")
        }
        if socketDirectory != nil && tlsMode != .prefer && tlsMode != .disable {
            throw ParseError(message: "asks for TLS over a Unix socket, which PostgreSQL does not offer")
        }
        self.host = host.isEmpty ? "localhost" : host
        self.port = port
        self.socketDirectory = socketDirectory
        self.user = user
        self.password = password
        self.database = database.isEmpty ? user : database
        self.tlsMode = socketDirectory != nil ? .disable : tlsMode
        self.rootCertificatePath = rootCertificatePath
    }
}
