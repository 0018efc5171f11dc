import Foundation
import NIOHTTP1

/// What RFC 6455 §4.2.1 asks of an opening handshake on `/events`, checked before the upgrade:
/// a request that fails it is not upgraded, and `HTTPHandler` answers it with `problem`'s status.
enum WebSocketHandshake {
    /// The one version of the protocol the daemon speaks.
    static let version = "13"

    enum Problem: Equatable {
        /// No `Upgrade: websocket`: a plain HTTP request (426, with the headers to send).
        case notAnUpgrade
        /// A version other than 13, or none (426 with `Sec-WebSocket-Version: 13`, §4.2.2).
        case version
        /// A handshake missing what §4.2.1 requires (400): the reason, for a person.
        case malformed(String)
    }

    /// Why `head` is not an opening handshake the daemon accepts; nil when it is one.
    static func problem(_ head: HTTPRequestHead) -> Problem? {
        let headers = head.headers
        guard tokens(headers, "Upgrade").contains("websocket") else { return .notAnUpgrade }
        // Values as NIO's upgrader reads them: without the whitespace around them (RFC 9110 §5.5).
        guard headers[canonicalForm: "Sec-WebSocket-Version"] == [Substring(version)] else { return .version }
        guard head.version.major > 1 || (head.version.major == 1 && head.version.minor >= 1) else {
            return .malformed("A WebSocket handshake is an HTTP/1.1 request.")
        }
        // NIO's upgrader takes only a GET; any other method with these headers is no handshake
        // either, and is not to be told it came too late (RFC 6455 §4.1).
        guard head.method == .GET else {
            return .malformed("A WebSocket handshake is a GET request (RFC 6455 §4.1).")
        }
        guard headers["Host"].count == 1 else {
            return .malformed("A WebSocket handshake needs one Host header.")
        }
        guard tokens(headers, "Connection").contains("upgrade") else {
            return .malformed("A WebSocket handshake needs 'Connection: Upgrade'.")
        }
        let keys = headers[canonicalForm: "Sec-WebSocket-Key"]
        guard keys.count == 1, let key = keys.first, Data(base64Encoded: String(key))?.count == 16 else {
            return .malformed("Sec-WebSocket-Key must be 16 bytes in base64 (RFC 6455 §4.1).")
        }
        return nil
    }

    /// The comma-separated tokens of every `name` header, trimmed and lowercased.
    private static func tokens(_ headers: HTTPHeaders, _ name: String) -> [String] {
        headers[name].flatMap { $0.split(separator: ",") }.map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        }
    }
}
