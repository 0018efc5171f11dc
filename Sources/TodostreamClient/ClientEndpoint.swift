/// Where the daemon is and how to speak to it: `tcp://host:port`, `tls://host:port`,
/// `ws://host:port/path`, `wss://host:port/path` (the path defaults to `/events`).
public struct ClientEndpoint: Sendable, Hashable, CustomStringConvertible {
    public enum Transport: String, Sendable, Hashable {
        case tcp
        case tls
        case ws
        case wss

        var defaultPort: Int {
            switch self {
            case .tcp, .tls: return 7878
            case .ws: return 8080
            case .wss: return 8443
            }
        }

        var isWebSocket: Bool { self == .ws || self == .wss }
        var isEncrypted: Bool { self == .tls || self == .wss }
    }

    public var transport: Transport
    public var host: String
    public var port: Int
    /// The WebSocket path; unused for TCP and TLS.
    public var path: String

    public init(transport: Transport, host: String, port: Int, path: String = "/events") {
        self.transport = transport
        self.host = host
        self.port = port
        self.path = path
    }

    /// Parses `scheme://host[:port][/path]`; IPv6 hosts in brackets (`tcp://[::1]:7878`).
    public init(url: String) throws(ClientError) {
        guard let schemeEnd = url.range(of: "://"),
            let transport = Transport(rawValue: url[..<schemeEnd.lowerBound].lowercased())
        else {
            throw ClientError(.invalidURL, "\(url): the URL must start with tcp://, tls://, ws:// or wss://.")
        }
        var rest = Substring(url[schemeEnd.upperBound...])
        var path = "/events"
        if let slash = rest.firstIndex(of: "/") {
            path = String(rest[slash...])
            rest = rest[..<slash]
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else {
                throw ClientError(.invalidURL, "\(url): an IPv6 host needs a closing ].")
            }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { throw ClientError(.invalidURL, "\(url): the host is missing.") }
        var port = transport.defaultPort
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else {
                throw ClientError(.invalidURL, "\(url): the port must be a number from 1 to 65535.")
            }
            port = value
        }
        self.init(transport: transport, host: String(host), port: port, path: path)
    }

    /// `host:port`, an IPv6 host in brackets (`[::1]:8080`): a URL's authority, an HTTP `Host`.
    var authority: String {
        (host.contains(":") ? "[\(host)]" : host) + ":\(port)"
    }

    public var description: String {
        "\(transport.rawValue)://\(authority)" + (transport.isWebSocket ? path : "")
    }
}
