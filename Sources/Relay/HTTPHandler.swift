import EventStream
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL

typealias EventStreamJSON = JSONWriter

/// Files the HTTP listener serves, by URL path (`/index.html`, `/app.js`), with their content
/// types.
public typealias HTTPAssets = [String: (contentType: String, bytes: [UInt8])]

/// What `/healthz` reports.
public struct HealthReport: Sendable {
    public var storageOK: Bool
    public var connections: Int
    public var seq: UInt64
    public var epoch: String
    /// Times this daemon gave up on seqs pruned from a shared journal before it read them.
    public var resyncs: Int
    /// The daemon is shutting down gracefully: `/healthz` says 503, so that a load balancer
    /// (which may ask on a connection kept open from before) stops sending clients here.
    public var draining = false

    public init(storageOK: Bool, connections: Int, seq: UInt64, epoch: String, resyncs: Int = 0) {
        self.resyncs = resyncs
        self.storageOK = storageOK
        self.connections = connections
        self.seq = seq
        self.epoch = epoch
    }
}

/// The HTTP listener's fixed routes: `/healthz`, `/metrics`, a clear answer for `/events`
/// requests that are not WebSocket upgrades, and the files the relay was given (a web frontend)
/// at their paths, `/` being `/index.html`. Files are served from memory, never from paths
/// joined onto the filesystem.
final class HTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let health: @Sendable () async -> HealthReport
    private let metrics: @Sendable () async -> String
    private let originAllowed: @Sendable (HTTPHeaders) -> Bool
    /// Whether every connection `max_connections` or `max_connections_per_ip` allows is taken
    /// (an upgrade then gets 503).
    private let sessionsFull: @Sendable () -> Bool
    private let assets: HTTPAssets
    private let logger: Logger?
    private var head: HTTPRequestHead?
    /// A whole request must arrive within this long (`limits.handshake_timeout_ms`): from the
    /// connection's start (a TLS handshake included) and again after each answer; past it the
    /// connection is closed. Slow or stalled requests hold no connection slot for long.
    private let requestTimeout: TimeAmount
    private var requestTimer: Scheduled<Void>?

    init(
        requestTimeout: TimeAmount = .seconds(10),
        health: @escaping @Sendable () async -> HealthReport,
        metrics: @escaping @Sendable () async -> String,
        originAllowed: @escaping @Sendable (HTTPHeaders) -> Bool = { _ in true },
        sessionsFull: @escaping @Sendable () -> Bool = { false },
        assets: HTTPAssets = [:],
        logger: Logger? = nil
    ) {
        self.logger = logger
        self.sessionsFull = sessionsFull
        self.health = health
        self.metrics = metrics
        self.originAllowed = originAllowed
        self.assets = assets
        self.requestTimeout = requestTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        awaitRequest(context)
    }

    /// Removed at a WebSocket upgrade: the stream has no deadline.
    func handlerRemoved(context: ChannelHandlerContext) {
        requestTimer?.cancel()
        requestTimer = nil
    }

    private func awaitRequest(_ context: ChannelHandlerContext) {
        requestTimer?.cancel()
        let channel = context.channel
        requestTimer = context.eventLoop.scheduleTask(in: requestTimeout) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // After an answer that closes the connection, no further request is read (RFC 9112
        // §9.6): what follows it is dropped until the close.
        if answeredClosing { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            // RFC 9110 §10.1.1: an HTTP/1.0 request's 100-continue is ignored.
            if head.version.major == 1, head.version.minor >= 1, let expectation = head.headers.first(name: "Expect") {
                expect(context, expectation, head)
            }
        case .body:
            break
        case .end:
            guard let head else { return }
            self.head = nil
            requestTimer?.cancel()
            requestTimer = nil
            guard context.channel.isWritable else {
                // Answers the client has not taken fill the channel: this one waits (and, as
                // NIO's pipelining handler holds the requests behind it, so do they, and reads),
                // so that a client that pipelines requests and reads nothing holds one answer
                // past the channel's high water mark, not one per request. A client that takes
                // nothing for the request timeout is closed.
                answerWaiting = head
                awaitRequest(context)
                return
            }
            route(context, head)
        }
    }

    /// A request whose answer waits until the channel takes more (`channelRead`).
    private var answerWaiting: HTTPRequestHead?

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, let head = answerWaiting {
            answerWaiting = nil
            requestTimer?.cancel()
            requestTimer = nil
            route(context, head)
        }
        context.fireChannelWritabilityChanged()
    }

    /// A request NIO could not parse is answered here (NIO's own error handler is not in the
    /// pipeline): `400`, or `501` for a method the parser does not know, with
    /// `Connection: close`, and the connection ends once the answer is out. Other errors (a
    /// refused upgrade's among them) go on down the pipeline: the request is answered as any
    /// other.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOSSLError || error is BoringSSLError {
            // A TLS handshake refused (HTTPS): logged as the NDJSON-over-TLS listener logs it
            // (an untrusted or missing client certificate, plain HTTP to the HTTPS port).
            logger?.info(
                "TLS connection failed",
                metadata: [
                    "remote": "\(context.channel.remoteAddress?.ipAddress ?? "?")",
                    "reason": "\(TLSFailure.describe("\(error)", peer: "the client"))",
                ]
            )
            context.close(promise: nil)
            return
        }
        guard let error = error as? HTTPParserError else { return context.fireErrorCaught(error) }
        // NIO's pipelining handler passes a parse error on only once the answer before it is
        // out. After an answer that closed the connection, the bytes that followed it are no
        // request (llhttp calls them data after `Connection: close`): nothing more is sent.
        // (That answer's own write closes the connection once it is out: closing here, while
        // NIO's pipelining handler hands this error on from inside that write, would drop it.)
        guard !answeredClosing else { return }
        answeredClosing = true
        let (status, text) =
            error == .invalidMethod
            ? (HTTPResponseStatus.notImplemented, "Unknown method: only GET and HEAD are supported.\n")
            : (.badRequest, "Bad request: not HTTP/1.1 this server can read.\n")
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: String(text.utf8.count))
        headers.add(name: "Date", value: HTTPDate.now())
        headers.add(name: "Connection", value: "close")
        if error == .invalidMethod { headers.add(name: "Allow", value: "GET, HEAD") }
        send(
            context,
            HTTPResponseHead(version: .http1_1, status: status, headers: headers),
            body: Array(text.utf8),
            keepAlive: false
        )
    }

    /// An answer that closes the connection was written: nothing more is read or answered.
    private var answeredClosing = false

    /// Whether the client may still send: a client that half-closes (`nc -N`, a script that
    /// shuts its output after the request) gets the answer to what it sent, and the connection
    /// closes once that answer is out, as on the NDJSON listener.
    private enum Input {
        case open
        case closed
    }
    private var input = Input.open
    /// An answer is being made off the loop (`/healthz`, `/metrics`).
    private var answering = false

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let event = event as? ChannelEvent, event == .inputClosed else {
            return context.fireUserInboundEventTriggered(event)
        }
        input = .closed
        // A request being read ends with the parser's error for it (400, closing); one being
        // answered, or waiting for room, closes with its answer. With neither, nothing is left.
        guard head == nil, answerWaiting == nil, !answering, !answeredClosing else { return }
        // The last answer, kept alive before the half-close came, is out first.
        let channel = context.channel
        if let lastAnswer {
            lastAnswer.whenComplete { _ in channel.close(promise: nil) }
        } else {
            channel.close(promise: nil)
        }
    }

    /// The write of the last answer's end, while it may still be on its way.
    private var lastAnswer: EventLoopFuture<Void>?

    /// `Expect` (RFC 9110 §10.1.1). No route takes a body, so `100-continue` on a request
    /// that is answered anyway (`GET`, `HEAD`) gets `100 Continue` at once, and on any other
    /// method the final `405` at once, closing (the body it would send is not wanted); any
    /// other expectation is `417`.
    private func expect(_ context: ChannelHandlerContext, _ expectation: String, _ head: HTTPRequestHead) {
        guard expectation.trimmingCharacters(in: .whitespaces).lowercased() == "100-continue" else {
            self.head = nil
            return respond(
                context,
                head,
                .expectationFailed,
                "text/plain; charset=utf-8",
                Array("Only the expectation 100-continue is supported.\n".utf8),
                close: true
            )
        }
        guard head.method == .GET || head.method == .HEAD else {
            self.head = nil
            return route(context, head, close: true)
        }
        let interim = HTTPResponseHead(version: head.version, status: .continue)
        context.writeAndFlush(wrapOutboundOut(.head(interim)), promise: nil)
    }

    /// The web client's module (`Sources/TodoWeb/web/todostream.js`).
    static let clientModulePath = "/todostream.js"

    private func route(_ context: ChannelHandlerContext, _ head: HTTPRequestHead, close: Bool = false) {
        let path = Self.path(of: head.uri)
        // RFC 9112 §3.2: an HTTP/1.1 request without a Host, or any request with more than one
        // or with one that is no host, is answered 400 (the same for a WebSocket handshake,
        // RFC 6455 §4.1).
        let hosts = head.headers["Host"]
        if hosts.count > 1 || (hosts.isEmpty && (head.version.major > 1 || head.version.minor >= 1))
            || !hosts.allSatisfy(Self.isHost)
        {
            return respond(
                context,
                head,
                .badRequest,
                "text/plain; charset=utf-8",
                Array("A request needs exactly one Host header, a host and an optional port (RFC 9112 §3.2).\n".utf8),
                close: true
            )
        }
        guard head.method == .GET || head.method == .HEAD else {
            return respond(
                context,
                head,
                .methodNotAllowed,
                "text/plain; charset=utf-8",
                Array("Only GET and HEAD are supported.\n".utf8),
                extra: [("Allow", "GET, HEAD")],
                // After a CONNECT the parser reads no further request on this connection.
                close: close || head.method == .CONNECT
            )
        }
        if path == "/healthz" {
            answering = true
            let health = self.health
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let loop = context.eventLoop
            Task {
                let report = await health()
                loop.execute {
                    let (handler, context) = bound.value
                    var writer = JSONWriterProxy()
                    let body = writer.health(report)
                    handler.respond(
                        context,
                        head,
                        report.storageOK && !report.draining ? .ok : .serviceUnavailable,
                        "application/json",
                        body,
                        // The connection ends with the daemon: a checker asks again elsewhere.
                        close: report.draining
                    )
                }
            }
            return
        }
        if path == "/metrics" {
            answering = true
            let metrics = self.metrics
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let loop = context.eventLoop
            Task {
                let text = await metrics()
                loop.execute {
                    let (handler, context) = bound.value
                    handler.respond(context, head, .ok, "text/plain; version=0.0.4; charset=utf-8", Array(text.utf8))
                }
            }
            return
        }
        if path == "/events" {
            // An upgrade reaches this handler only when it was refused; say why.
            if !originAllowed(head.headers) {
                return respond(
                    context,
                    head,
                    .forbidden,
                    "text/plain; charset=utf-8",
                    Array("This Origin may not open /events (see websocket.allowed_origins).\n".utf8)
                )
            }
            let problem = WebSocketHandshake.problem(head)
            if case .malformed(let reason) = problem {
                return respond(context, head, .badRequest, "text/plain; charset=utf-8", Array((reason + "\n").utf8))
            }
            if problem == nil, sessionsFull() {
                return respond(
                    context,
                    head,
                    .serviceUnavailable,
                    "text/plain; charset=utf-8",
                    Array(
                        "Too many connections (limits.max_connections or max_connections_per_ip); try again later.\n"
                            .utf8
                    ),
                    extra: [("Retry-After", "1")],
                    close: true
                )
            }
            // A valid upgrade here is one the upgrader did not see: it takes only a connection's
            // first request (NIO's), and this one came after another.
            let late = problem == nil
            let reason =
                late
                ? "A WebSocket upgrade must be the first request on its connection: open a new connection for /events.\n"
                : "/events is a WebSocket endpoint: connect with a WebSocket client (allowed origin, Upgrade: websocket, Sec-WebSocket-Version: 13).\n"
            return respond(
                context,
                head,
                .upgradeRequired,
                "text/plain; charset=utf-8",
                Array(reason.utf8),
                // RFC 9110 §7.8: a response that sends Upgrade also sends `Connection: upgrade`.
                extra: [
                    ("Upgrade", "websocket"), ("Connection", "upgrade"),
                    ("Sec-WebSocket-Version", WebSocketHandshake.version),
                ],
                close: late
            )
        }
        if let asset = assets[path == "/" ? "/index.html" : path] {
            var extra = [("Cache-Control", "no-cache")]
            // The client module is for frontends served anywhere (docs/web.md): a page on another
            // origin imports it as a module, which the browser allows only with this header. It
            // is code anyone may read, and the header lets no page read anything else.
            if path == Self.clientModulePath { extra.append(("Access-Control-Allow-Origin", "*")) }
            return respond(context, head, .ok, asset.contentType, asset.bytes, extra: extra)
        }
        respond(context, head, .notFound, "text/plain; charset=utf-8", Array("Not found.\n".utf8))
    }

    /// RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing; it is
    /// answered, and the connection closes after it (what follows could be read wrongly).
    static func hasFaultyFraming(_ head: HTTPRequestHead) -> Bool {
        head.version.major == 1 && head.version.minor == 0 && head.headers.contains(name: "Transfer-Encoding")
    }

    /// Whether `value` is a `Host` header's value (RFC 9112 §3.2, RFC 3986 §3.2.2): a name or
    /// an address and an optional port, made of the characters those allow (an IPv6 address in
    /// brackets); empty is allowed (a target with no authority).
    static func isHost(_ value: String) -> Bool {
        value.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default:
                return hostPunctuation.contains(byte)
            }
        }
    }

    /// The characters other than letters and digits that a `Host` value may hold.
    private static let hostPunctuation = Set("-._~%!$&'()*+,;=:[]".utf8)

    /// The path of a request target, without its query: origin form (`/healthz?x`) or absolute
    /// form (`http://host:port/healthz`, which RFC 9112 §3.2.2 says a server must accept).
    static func path(of uri: String) -> String {
        var target = Substring(uri)
        for scheme in ["http://", "https://"] where target.lowercased().hasPrefix(scheme) {
            let authorityAndPath = target.dropFirst(scheme.count)
            target = authorityAndPath.firstIndex(of: "/").map { authorityAndPath[$0...] } ?? "/"
        }
        let path = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        return path.isEmpty ? "/" : decodingUnreserved(path)
    }

    /// `path` with each percent-encoded unreserved character (a letter, a digit, `-`, `.`, `_`,
    /// `~`) decoded: RFC 3986 §6.2.2.2 makes `/%68ealthz` the same path as `/healthz`. Any other
    /// escape (`%2F`, `%20`, a malformed one) is left as it is, so it names no route.
    static func decodingUnreserved(_ path: Substring) -> String {
        guard path.utf8.contains(UInt8(ascii: "%")) else { return String(path) }
        let bytes = Array(path.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
                let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2]),
                isUnreserved(high << 4 | low)
            {
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            true
        default: false
        }
    }

    static let contentSecurityPolicy =
        "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; "
        + "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

    private func respond(
        _ context: ChannelHandlerContext,
        _ request: HTTPRequestHead,
        _ status: HTTPResponseStatus,
        _ contentType: String,
        _ body: [UInt8],
        extra: [(String, String)] = [],
        close: Bool = false
    ) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: contentType)
        headers.add(name: "Content-Length", value: String(body.count))
        headers.add(name: "Date", value: HTTPDate.now())
        headers.add(name: "X-Content-Type-Options", value: "nosniff")
        // The page loads only its own files and talks only to this daemon, and no other site
        // may frame it (its delete buttons would be a click away from someone else's page).
        headers.add(name: "Content-Security-Policy", value: Self.contentSecurityPolicy)
        headers.add(name: "X-Frame-Options", value: "DENY")
        headers.add(name: "Referrer-Policy", value: "no-referrer")
        for (name, value) in extra { headers.add(name: name, value: value) }
        answering = false
        let keepAlive = request.isKeepAlive && !close && input == .open && !Self.hasFaultyFraming(request)
        if !keepAlive {
            answeredClosing = true
            // One Connection header: `upgrade, close` after a 426 that closes.
            let tokens = headers["Connection"] + ["close"]
            headers.replaceOrAdd(name: "Connection", value: tokens.joined(separator: ", "))
        } else if request.version.minor == 0 {
            // An HTTP/1.0 client closes after the answer unless told it may send another.
            headers.add(name: "Connection", value: "keep-alive")
        }
        send(
            context,
            // RFC 9110 §6.2: the answer carries the highest version the daemon speaks.
            HTTPResponseHead(version: .http1_1, status: status, headers: headers),
            body: request.method == .HEAD ? nil : body,
            keepAlive: keepAlive
        )
    }

    /// Writes an answer (`body` nil: a HEAD's, without one); kept alive, the connection waits
    /// for the next request, else its output is shut once the answer is out.
    private func send(_ context: ChannelHandlerContext, _ head: HTTPResponseHead, body: [UInt8]?, keepAlive: Bool) {
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if let body { context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil) }
        let channel = context.channel
        if keepAlive { awaitRequest(context) }
        let linger = lingerTimeout
        let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        lastAnswer = written
        written.whenComplete { _ in
            if !keepAlive { Self.shutAfterAnswer(channel, linger: linger) }
        }
    }

    /// At most this long, after an answer that closes the connection, for the client to close.
    private var lingerTimeout: TimeAmount { min(requestTimeout, .seconds(2)) }

    /// After an answer that closes the connection: its output is shut, so that the client reads
    /// the answer and then the end, while what it still sends (a body the answer did not wait
    /// for, a pipelined request) is read and dropped; the connection closes when the client
    /// closes, or after `linger`. Closed at once with the client's bytes unread, the kernel
    /// reset the connection, which can throw away the answer before the client reads it.
    private static func shutAfterAnswer(_ channel: any Channel, linger: TimeAmount) {
        channel.close(mode: .output).whenFailure { _ in channel.close(promise: nil) }
        channel.eventLoop.scheduleTask(in: linger) { channel.close(promise: nil) }
    }
}

/// Builds the `/healthz` body.
struct JSONWriterProxy {
    mutating func health(_ report: HealthReport) -> [UInt8] {
        var writer = EventStreamJSON()
        writer.beginObject()
        writer.field("status", report.draining ? "draining" : report.storageOK ? "ok" : "unavailable")
        writer.field("storage", report.storageOK ? "ok" : "down")
        writer.field("connections", report.connections)
        writer.field("seq", report.seq)
        writer.field("epoch", report.epoch)
        writer.field("resyncs", report.resyncs)
        writer.endObject()
        return writer.bytes
    }
}

/// HTTP's date (RFC 9110 §5.6.7, IMF-fixdate): `Sun, 06 Nov 1994 08:49:37 GMT`.
enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func now() -> String { format(secondsSince1970: Int(Date().timeIntervalSince1970)) }

    static func format(secondsSince1970 seconds: Int) -> String {
        let dayNumber = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - dayNumber * 86_400
        // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
        let shifted = dayNumber + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthPrime = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthPrime + 2) / 5 + 1
        let month = monthPrime < 10 ? monthPrime + 3 : monthPrime - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        let weekday = ((dayNumber % 7) + 11) % 7  // 1970-01-01 was a Thursday
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(days[weekday]), \(two(day)) \(months[month - 1]) \(year) "
            + "\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60)) GMT"
    }
}
