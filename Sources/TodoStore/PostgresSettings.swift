import Foundation

/// Where and how to reach PostgreSQL, parsed from a libpq-style URL:
/// `postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=MODE&sslrootcert=FILE`, several servers
/// as `postgres://USER:PASSWORD@HOST1:PORT1,HOST2:PORT2/DATABASE?target_session_attrs=read-write`
/// (tried in order; a host without a port takes `port=N`, else 5432), or a Unix socket directory
/// as `?host=/run/postgresql` (with `&port=N` when not 5432: the port names the socket file).
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

    /// libpq's `target_session_attrs`: which of the listed servers a connection may settle on.
    public enum TargetSessionAttributes: String, Sendable, Hashable, CaseIterable {
        /// The first server that accepts the connection.
        case any
        /// The first server whose sessions are writable (`transaction_read_only` is off).
        case readWrite = "read-write"
        /// The first server that is not in recovery (a primary, not a standby).
        case primary

        /// Whether a server must be checked for being writable before it is used.
        public var requiresWritable: Bool { self != .any }
    }

    /// One server of the list: a host name or address and its TCP port.
    public struct Server: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// The servers to try, in order; never empty. With a Unix socket directory, one entry
    /// whose port names the socket file.
    public private(set) var servers: [Server]
    /// When set, connect through the Unix socket in this directory instead of TCP.
    public var socketDirectory: String?
    public var user: String
    public var password: String?
    public var database: String
    public var tlsMode: TLSMode
    /// Which server connections settle on when several are listed (or the one is read-only).
    public var targetSessionAttributes: TargetSessionAttributes
    /// PEM CA bundle for `verify-ca` and `verify-full`.
    public var rootCertificatePath: String?
    /// Connections the pool keeps at most (the journal follower's own connection is extra).
    public var poolSize: Int = 8
    /// How long a request waits for a pooled connection before it is answered `unavailable`.
    public var acquireTimeout: Duration = .seconds(5)
    /// How often the journal follower reads the journal even without a notification.
    public var catchUpInterval: Duration = .seconds(1)
    /// While this daemon's commits bring other daemons' journal entries along, how long after
    /// such a commit the journal follower waits for the next one before it reads itself
    /// (`CatchUpStateMachine`); zero reads at once. Ten times this of such commits, and it
    /// stops wanting notifications (schema step 9). Longer than a batch's usual wait for more
    /// requests (`store.sequencer_gather_us`), so that a daemon that keeps committing does not
    /// read, and want notifications again, between two of its batches.
    public var commitFollowGrace: Duration = .milliseconds(5)
    /// Todos whose last written state a daemon keeps to stage a batch of writes without
    /// reading them first (`StagingGuesses`); 0 reads every batch's todos.
    public var stagingGuesses: Int = 16_384

    /// The first server's host.
    public var host: String { servers.first?.host ?? "localhost" }
    /// The first server's port (with a Unix socket directory, the socket's).
    public var port: Int { servers.first?.port ?? 5432 }

    /// The Unix socket path (`DIR/.s.PGSQL.PORT`) when connecting through one.
    public var socketPath: String? {
        socketDirectory.map { ($0 as NSString).appendingPathComponent(".s.PGSQL.\(port)") }
    }

    public var description: String {
        let place =
            socketDirectory.map { "\($0) (unix socket, port \(port))" }
            ?? servers.map(\.description).joined(separator: ",")
        var text = "postgres://\(user)@\(place)/\(database) sslmode=\(tlsMode.rawValue)"
        if targetSessionAttributes != .any {
            text += " target_session_attrs=\(targetSessionAttributes.rawValue)"
        }
        return text
    }

    /// A failure to parse; its message never contains the password.
    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    /// Parses a `postgres://` or `postgresql://` URL, with one server or a comma-separated list.
    public init(url text: String) throws(ParseError) {
        let shape = "must be a URL like postgres://USER:PASSWORD@HOST:PORT/DATABASE"
        guard let schemeEnd = text.range(of: "://") else { throw ParseError(message: shape) }
        let scheme = text[..<schemeEnd.lowerBound].lowercased()
        guard scheme == "postgres" || scheme == "postgresql" else { throw ParseError(message: shape) }
        var rest = Substring(text[schemeEnd.upperBound...])
        // A password (or user) with an unencoded /, ? or # ends the host part early, and the @
        // comes after it: refused without quoting any part of the URL, which would show a piece
        // of the password (it was quoted as a port or a parameter).
        let hostPartEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        if !rest[..<hostPartEnd].contains("@"), rest[hostPartEnd...].contains("@") {
            throw ParseError(
                message: "has an @ after its host part: a user or password with /, ? or # must be "
                    + "percent-encoded (%2F, %3F, %23)"
            )
        }
        guard !rest.contains("#") else { throw ParseError(message: "has a #fragment, which a database URL has not") }
        var queryText: Substring = ""
        if let question = rest.firstIndex(of: "?") {
            queryText = rest[rest.index(after: question)...]
            rest = rest[..<question]
        }
        var authority = rest
        var path: Substring = ""
        if let slash = rest.firstIndex(of: "/") {
            authority = rest[..<slash]
            path = rest[rest.index(after: slash)...]
        }
        var hostList = authority
        var user = ""
        var password: String?
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            hostList = authority[authority.index(after: at)...]
            if let colon = userInfo.firstIndex(of: ":") {
                user = Self.decode(userInfo[..<colon])
                password = Self.decode(userInfo[userInfo.index(after: colon)...])
            } else {
                user = Self.decode(userInfo)
            }
        }
        let database = Self.decode(path)

        var tlsMode = TLSMode.prefer
        var targetSessionAttributes = TargetSessionAttributes.any
        var socketDirectory: String?
        var rootCertificatePath: String?
        var defaultPort = 5432
        for item in queryText.split(separator: "&", omittingEmptySubsequences: true) {
            let name: String
            let value: String
            if let equals = item.firstIndex(of: "=") {
                name = Self.decode(item[..<equals])
                value = Self.decode(item[item.index(after: equals)...])
            } else {
                name = Self.decode(item)
                value = ""
            }
            switch name {
            case "sslmode":
                guard let mode = TLSMode(rawValue: value) else {
                    throw ParseError(
                        message: "has sslmode=\(value); use one of "
                            + TLSMode.allCases.map(\.rawValue).joined(separator: ", ")
                    )
                }
                tlsMode = mode
            case "target_session_attrs":
                guard let attributes = TargetSessionAttributes(rawValue: value) else {
                    throw ParseError(
                        message: "has target_session_attrs=\(value); use one of "
                            + TargetSessionAttributes.allCases.map(\.rawValue).joined(separator: ", ")
                    )
                }
                targetSessionAttributes = attributes
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
                guard (1...65_535).contains(number) else { throw ParseError(message: "has a port out of range") }
                defaultPort = number
            default:
                throw ParseError(message: "has the unknown parameter \(name)")
            }
        }

        let entries = hostList.split(separator: ",", omittingEmptySubsequences: false)
        var servers: [Server] = []
        for entry in entries {
            servers.append(try Self.server(entry, defaultPort: defaultPort))
        }
        if let socketDirectory {
            guard entries.count == 1 else {
                throw ParseError(message: "has host=\(socketDirectory) (a Unix socket) and a list of hosts; give one")
            }
            servers = [Server(host: "localhost", port: servers.first?.port ?? defaultPort)]
        } else if servers.contains(where: { $0.host.isEmpty }) {
            guard entries.count == 1 else { throw ParseError(message: "has an empty entry in its list of hosts") }
            throw ParseError(message: "names no host (give HOST or ?host=/socket/directory)")
        }
        guard !user.isEmpty else { throw ParseError(message: "names no user") }
        if (tlsMode == .verifyCA || tlsMode == .verifyFull) && rootCertificatePath == nil {
            throw ParseError(message: "has sslmode=\(tlsMode.rawValue), which needs sslrootcert=FILE")
        }
        if socketDirectory != nil && tlsMode != .prefer && tlsMode != .disable {
            throw ParseError(message: "asks for TLS over a Unix socket, which PostgreSQL does not offer")
        }
        self.servers = servers
        self.socketDirectory = socketDirectory
        self.user = user
        self.password = password
        self.database = database.isEmpty ? user : database
        self.tlsMode = socketDirectory != nil ? .disable : tlsMode
        self.targetSessionAttributes = targetSessionAttributes
        self.rootCertificatePath = rootCertificatePath
    }

    /// One entry of the host list: `HOST`, `HOST:PORT`, `[IPV6]` or `[IPV6]:PORT` (or empty).
    private static func server(_ entry: Substring, defaultPort: Int) throws(ParseError) -> Server {
        var host = entry
        var portText: Substring?
        if entry.hasPrefix("[") {
            guard let close = entry.firstIndex(of: "]") else {
                throw ParseError(message: "has the host \(decode(entry)) with an unclosed [")
            }
            host = entry[entry.index(after: entry.startIndex)..<close]
            let after = entry[entry.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else {
                    throw ParseError(message: "has the host \(decode(entry)); write [ADDRESS]:PORT")
                }
                portText = after.dropFirst()
            }
        } else if let colon = entry.firstIndex(of: ":") {
            host = entry[..<colon]
            portText = entry[entry.index(after: colon)...]
            guard !(portText?.contains(":") ?? false) else {
                throw ParseError(message: "has the host \(decode(entry)); write an IPv6 address as [ADDRESS]:PORT")
            }
        }
        var port = defaultPort
        if let portText {
            guard let number = Int(portText) else {
                throw ParseError(message: "has the port \(decode(portText)), not a number")
            }
            guard (1...65_535).contains(number) else { throw ParseError(message: "has a port out of range") }
            port = number
        }
        return Server(host: decode(host), port: port)
    }

    private static func decode(_ text: Substring) -> String {
        String(text).removingPercentEncoding ?? String(text)
    }
}
