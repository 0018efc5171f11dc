import EventStream
import Glibc
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import ServiceLifecycle

/// Where the relay listens.
public struct ListenerConfiguration: Sendable, Hashable {
    public struct Address: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int
        /// A listening socket inherited from the service manager (socket activation); when
        /// set, it is used instead of binding host and port.
        public var inheritedDescriptor: Int32?

        public init(host: String, port: Int, inheritedDescriptor: Int32? = nil) {
            self.host = host
            self.port = port
            self.inheritedDescriptor = inheritedDescriptor
        }

        /// Parses `HOST:PORT` (`[::1]:7878` for IPv6).
        public init?(parsing text: String) {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            var host = String(text[..<colon])
            guard let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port), !host.isEmpty else {
                return nil
            }
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            self.host = host
            self.port = port
        }

        public var description: String {
            if let inheritedDescriptor { return "inherited socket \(inheritedDescriptor)" }
            return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        }
    }

    /// NDJSON over plain TCP.
    public var tcp: Address?
    /// NDJSON over TLS.
    public var tls: Address?
    /// HTTP: the web frontend, `/events` (WebSocket), `/healthz`, `/metrics`.
    public var http: Address?
    /// Serve HTTP over TLS (`https://`, `wss://`) with the TLS certificate.
    public var httpTLS: Bool = false

    public init(tcp: Address? = nil, tls: Address? = nil, http: Address? = nil, httpTLS: Bool = false) {
        self.tcp = tcp
        self.tls = tls
        self.http = http
        self.httpTLS = httpTLS
    }
}

/// The addresses actually bound (ports resolved when 0 was asked for).
public struct BoundAddresses: Sendable {
    public var tcp: SocketAddress?
    public var tls: SocketAddress?
    public var http: SocketAddress?
}

/// A listener that could not be opened: the message names the address and the reason.
public struct ListenError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// The network side of the daemon: TCP, TLS and HTTP/WebSocket listeners feeding sessions,
/// all on one hub. Runs as a `Service`: on graceful shutdown it stops accepting, tells every
/// client `draining`, lets in-flight requests finish, and closes.
public final class RelayServer<Codec: EventCodec>: Service, Sendable {
    public let hub: Hub<Codec>
    public let settings: RelaySettings
    private let services: RelayServices<Codec>
    private let listeners: ListenerConfiguration
    private let group: any EventLoopGroup
    private let tlsContext: NIOLockedValueBox<NIOSSLContext?>
    private let health: @Sendable () async -> HealthReport
    /// Set when the drain begins (`drain()`): `/healthz` says `draining` and 503 from then on.
    private let draining = NIOLockedValueBox(false)
    private let metrics: @Sendable () async -> String
    private let assets: HTTPAssets
    private let logger: Logger
    private let state = NIOLockedValueBox(State())
    /// Refused connections are logged at most once per 10 s, with a count of the others.
    private let refusals = NIOLockedValueBox(LogThrottle())
    private let children = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])
    private let deflateCodecs: DeflateCodecs

    private struct State {
        var serverChannels: [any Channel] = []
        var streamListeners: [StreamListener] = []
        var bound: BoundAddresses?
    }

    /// `assets` are the files the HTTP listener serves by URL path (`/` serves `/index.html`),
    /// e.g. a web frontend; the relay itself knows nothing of them.
    public init(
        hub: Hub<Codec>,
        settings: RelaySettings,
        submit: @escaping @Sendable (Codec.Event, Origin) -> Bool,
        journal: any JournalReader,
        listeners: ListenerConfiguration,
        tlsContext: NIOSSLContext? = nil,
        group: any EventLoopGroup,
        health: @escaping @Sendable () async -> HealthReport,
        metrics: @escaping @Sendable () async -> String = { "" },
        assets: HTTPAssets = [:],
        logger: Logger
    ) {
        self.hub = hub
        self.settings = settings
        self.services = RelayServices(hub: hub, submit: submit, journal: journal, settings: settings, logger: logger)
        self.listeners = listeners
        self.group = group
        self.deflateCodecs = DeflateCodecs(group: group)
        self.tlsContext = NIOLockedValueBox(tlsContext)
        self.health = health
        self.metrics = metrics
        self.assets = assets
        self.logger = logger
    }

    /// Replaces the TLS context used for new connections; existing ones keep theirs.
    public func replaceTLSContext(_ context: NIOSSLContext) {
        tlsContext.withLockedValue { $0 = context }
    }

    /// Binds every configured listener. Throws `ListenError` naming the address that failed;
    /// on failure nothing stays bound.
    @discardableResult
    public func start() async throws -> BoundAddresses {
        if let bound = state.withLockedValue({ $0.bound }) { return bound }
        var bound = BoundAddresses()
        var channels: [any Channel] = []
        var streamListeners: [StreamListener] = []
        do {
            if let address = listeners.tcp {
                let listener = try listenForStreams(address, kind: "TCP", halfClosure: true) { [self] in
                    try self.configureStream($0, tls: nil, descriptor: $1)
                }
                streamListeners.append(listener)
                bound.tcp = listener.localAddress
            }
            if let address = listeners.tls {
                guard tlsContext.withLockedValue({ $0 }) != nil else {
                    throw ListenError(message: "cannot listen on \(address) for TLS: no certificate configured")
                }
                let channel = try await bind(address, kind: "TLS", halfClosure: true) { [self] channel in
                    try self.configureStream(channel, tls: self.tlsContext.withLockedValue { $0 })
                }
                channels.append(channel)
                bound.tls = channel.localAddress
            }
            if let address = listeners.http {
                if listeners.httpTLS, tlsContext.withLockedValue({ $0 }) == nil {
                    throw ListenError(message: "cannot serve HTTPS on \(address): no certificate configured")
                }
                if listeners.httpTLS {
                    let channel = try await bind(address, kind: "HTTP", halfClosure: true) { [self] channel in
                        try self.configureHTTP(channel, descriptor: nil)
                    }
                    channels.append(channel)
                    bound.http = channel.localAddress
                } else {
                    // Plain HTTP: a WebSocket session writes its runs to its socket.
                    let listener = try listenForStreams(address, kind: "HTTP", halfClosure: true) { [self] in
                        try self.configureHTTP($0, descriptor: $1)
                    }
                    streamListeners.append(listener)
                    bound.http = listener.localAddress
                }
            }
        } catch {
            for listener in streamListeners { try? await listener.close().get() }
            for channel in channels { try? await channel.close() }
            throw error
        }
        let result = bound
        state.withLockedValue {
            $0.serverChannels = channels
            $0.streamListeners = streamListeners
            $0.bound = result
        }
        for listener in streamListeners {
            logger.info("listening", metadata: ["address": "\(listener.localAddress.map { "\($0)" } ?? "?")"])
        }
        for channel in channels {
            logger.info("listening", metadata: ["address": "\(channel.localAddress.map { "\($0)" } ?? "?")"])
        }
        return bound
    }

    private func bind(
        _ address: ListenerConfiguration.Address,
        kind: String,
        halfClosure: Bool = false,
        _ initializer: @escaping @Sendable (any Channel) throws -> Void
    ) async throws -> any Channel {
        let admit = admission(http: kind == "HTTP", initializer)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: Self.listenBacklog)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(.maxMessagesPerRead, value: 16)
            .childChannelOption(.allowRemoteHalfClosure, value: halfClosure)
            .childChannelInitializer(admit)
        do {
            if let descriptor = address.inheritedDescriptor {
                return try await bootstrap.withBoundSocket(descriptor).get()
            }
            return try await bootstrap.bind(host: address.host, port: address.port).get()
        } catch let error as IOError {
            throw ListenError(message: "cannot listen on \(address) (\(kind)): \(Self.reason(error))")
        } catch {
            throw ListenError(message: "cannot listen on \(address) (\(kind)): \(error)")
        }
    }

    /// The kernel's queue of connections not yet accepted, per listener.
    static var listenBacklog: Int32 { 1024 }

    /// A connection refused for the connection limits, in the set-up of a socket accepted by
    /// `StreamListener` (whose bootstrap closes it: it is not registered yet).
    struct ConnectionRefused: Error {}

    /// A new connection's first step on every listener: admitted within the connection limits
    /// (or closed: `unregistered` when the channel is not registered yet, so its set-up fails
    /// and its bootstrap closes it), tracked until it closes, then set up by `initializer`.
    private func admission(
        unregistered: Bool = false,
        http: Bool = false,
        _ initializer: @escaping @Sendable (any Channel) throws -> Void
    ) -> @Sendable (any Channel) -> EventLoopFuture<Void> {
        let hub = self.hub
        let settings = self.settings
        let children = self.children
        let logger = self.logger
        let refusals = self.refusals
        let sendBuffer = settings.configuration.socketSendBufferBytes
        return { channel in
            let ip = channel.remoteAddress?.ipAddress ?? "?"
            let limits = settings.configuration
            let admission = hub.admit(ip: ip, limits: limits, reserve: http ? limits.httpReserveConnections : 0)
            switch admission {
            case .admitted:
                break
            case .tooManyTotal, .tooManyFromIP:
                hub.metrics.refused(over: admission == .tooManyTotal ? "max_connections" : "max_connections_per_ip")
                if case .log(let leftOut) = refusals.withLockedValue({ $0.happened(at: ContinuousClock.now) }) {
                    logger.warning(
                        "connection refused: limit reached",
                        metadata: ["remote": "\(ip)", "refused.unlogged": "\(leftOut)"]
                    )
                }
                if unregistered { return channel.eventLoop.makeFailedFuture(ConnectionRefused()) }
                return channel.close()
            }
            if let sendBuffer {
                _ = channel.setOption(.socketOption(.so_sndbuf), value: SocketOptionValue(sendBuffer))
            }
            if let idle = limits.tcpKeepaliveSeconds {
                // Options of the socket alone, set before the channel's first read.
                _ = channel.setOption(.socketOption(.so_keepalive), value: 1)
                _ = channel.setOption(.tcpOption(.init(rawValue: TCP_KEEPIDLE)), value: SocketOptionValue(idle))
                _ = channel.setOption(
                    .tcpOption(.init(rawValue: TCP_KEEPINTVL)),
                    value: SocketOptionValue(max(1, idle / 3))
                )
                _ = channel.setOption(.tcpOption(.init(rawValue: TCP_KEEPCNT)), value: 3)
            }
            let key = ObjectIdentifier(channel)
            children.withLockedValue { $0[key] = channel }
            channel.closeFuture.whenComplete { _ in
                hub.release(ip: ip)
                children.withLockedValue { $0[key] = nil }
            }
            return channel.eventLoop.makeCompletedFuture { try initializer(channel) }
        }
    }

    /// A listener whose connections are accepted by `StreamListener`'s thread (plain TCP, and
    /// plain HTTP), so each session knows its socket and writes to it directly when nothing
    /// waits in NIO; `configure` sets up each connection's pipeline, given its socket.
    private func listenForStreams(
        _ address: ListenerConfiguration.Address,
        kind: String,
        halfClosure: Bool,
        _ configure: @escaping @Sendable (any Channel, CInt) throws -> Void
    ) throws -> StreamListener {
        let listener: StreamListener
        do {
            listener = try StreamListener.open(
                host: address.host,
                port: address.port,
                inheritedDescriptor: address.inheritedDescriptor,
                backlog: Self.listenBacklog,
                finishedOn: group.next()
            )
        } catch let error as IOError {
            throw ListenError(message: "cannot listen on \(address) (\(kind)): \(Self.reason(error))")
        } catch {
            throw ListenError(message: "cannot listen on \(address) (\(kind)): \(error)")
        }
        let group = self.group
        let logger = self.logger
        listener.run(logger: logger) { [self] descriptor in
            let admit = self.admission(unregistered: true, http: kind == "HTTP") { channel in
                try configure(channel, descriptor)
            }
            ClientBootstrap(group: group)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelOption(.maxMessagesPerRead, value: 16)
                .channelOption(.allowRemoteHalfClosure, value: halfClosure)
                .channelInitializer(admit)
                .withConnectedSocket(descriptor)
                .whenFailure { error in
                    guard !(error is ConnectionRefused) else { return }
                    logger.debug("connection not set up", metadata: ["error": "\(error)"])
                }
        }
        return listener
    }

    private static func reason(_ error: IOError) -> String {
        switch error.errnoCode {
        case EADDRINUSE: return "address already in use"
        case EACCES: return "permission denied"
        case EADDRNOTAVAIL: return "address not available on this machine"
        default: return "\(error)"
        }
    }

    private func configureStream(_ channel: any Channel, tls: NIOSSLContext?, descriptor: CInt? = nil) throws {
        let configuration = settings.configuration
        let sync = channel.pipeline.syncOperations
        if let tls {
            try sync.addHandler(NIOSSLServerHandler(context: tls))
            try sync.addHandler(HandshakeDeadline(timeout: .milliseconds(Int64(configuration.handshakeTimeoutMs))))
        }
        try sync.addHandler(ByteToMessageHandler(LineFrameDecoder(maxFrameBytes: configuration.maxFrameBytes)))
        try sync.addHandler(
            SessionHandler(
                services: services,
                loop: channel.eventLoop,
                transport: tls == nil ? "tcp" : "tls",
                remoteIP: channel.remoteAddress?.ipAddress ?? "?",
                startMode: tls == nil ? .onActive : .onTLSHandshake,
                socket: descriptor,
                maxFrameBytes: configuration.maxFrameBytes
            )
        )
    }

    /// `descriptor`: the connection's socket, when it is plain HTTP accepted by `StreamListener`.
    private func configureHTTP(_ channel: any Channel, descriptor: CInt?) throws {
        let configuration = settings.configuration
        let sync = channel.pipeline.syncOperations
        let secure = listeners.httpTLS
        if secure, let tls = tlsContext.withLockedValue({ $0 }) {
            try sync.addHandler(NIOSSLServerHandler(context: tls))
        }
        let services = self.services
        let settings = self.settings
        let hub = self.hub
        let allowedOrigins = configuration.allowedOrigins
        let loopbackListener = Self.isLoopback(channel.localAddress)
        // What the upgrade request carried (a token's role, an accepted deflate offer), decided
        // once in `shouldUpgrade` and used when the WebSocket pipeline is built.
        let negotiated = NIOLoopBoundBox<(role: Role?, deflate: PerMessageDeflate?)>(
            (nil, nil),
            eventLoop: channel.eventLoop
        )
        let upgrader = NIOWebSocketServerUpgrader(
            maxFrameSize: configuration.webSocketHardCapBytes,
            // The transport handler closes on the decoder's errors itself (and reads on after its
            // close frame, so that the client's unread bytes do not reset the connection).
            automaticErrorHandling: false,
            shouldUpgrade: { channel, head in
                let path = HTTPHandler.path(of: head.uri)
                // RFC 6455 §4.1: the opening handshake is a GET (anything else is answered by
                // the HTTP handler: 405).
                // Past `max_connections` or `max_connections_per_ip` (on HTTP's reserve) no
                // session is opened: the HTTP handler answers 503.
                guard head.method == .GET, path == "/events",
                    Self.originAllowed(head.headers, allowed: allowedOrigins, loopbackListener: loopbackListener),
                    WebSocketHandshake.problem(head) == nil,
                    !hub.sessionsFull(from: channel.remoteAddress?.ipAddress ?? "?", limits: settings.configuration)
                else {
                    return channel.eventLoop.makeSucceededFuture(nil)
                }
                var headers = HTTPHeaders()
                let token = Self.presentedToken(head.headers, auth: settings.auth)
                // The valid token's subprotocol; else the first offered: a browser that offered
                // any and gets none back drops the connection unexplained, where this session
                // starts unauthenticated and its greeting says `"auth":"required"`.
                if let subprotocol = token?.subprotocol ?? Self.firstOfferedSubprotocol(head.headers) {
                    headers.add(name: "Sec-WebSocket-Protocol", value: subprotocol)
                }
                let deflate = configuration.webSocketCompression ? PerMessageDeflate.negotiate(head.headers) : nil
                if let deflate {
                    headers.add(name: "Sec-WebSocket-Extensions", value: deflate.responseHeader)
                }
                negotiated.value = (token?.role, deflate)
                return channel.eventLoop.makeSucceededFuture(headers)
            },
            upgradePipelineHandler: { [deflateCodecs] channel, _ in
                let (role, deflate) = negotiated.value
                return channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    let decoder = try sync.context(handlerType: ByteToMessageHandler<WebSocketFrameDecoder>.self)
                    try sync.addHandler(WebSocketLengthCheck(), position: .before(decoder.handler))
                    try sync.addHandler(
                        WebSocketTransportHandler(
                            maxFrameBytes: configuration.maxFrameBytes,
                            hardCap: configuration.webSocketHardCapBytes,
                            deflate: deflate,
                            codec: deflate == nil ? nil : deflateCodecs.codec(on: channel.eventLoop),
                            compressMinBytes: configuration.webSocketCompressMinBytes,
                            closeTimeout: .milliseconds(Int64(configuration.drainTimeoutMs))
                        )
                    )
                    try sync.addHandler(
                        SessionHandler(
                            services: services,
                            loop: channel.eventLoop,
                            transport: secure ? "wss" : "ws",
                            remoteIP: channel.remoteAddress?.ipAddress ?? "?",
                            startMode: .immediately,
                            preauthenticated: role,
                            webSocketCompression: deflate != nil,
                            // Uncompressed frames, not encrypted: the hub's runs go as they are.
                            socket: deflate == nil ? descriptor : nil,
                            maxFrameBytes: configuration.maxFrameBytes
                        )
                    )
                }
            }
        )
        let httpHandler = HTTPHandler(
            requestTimeout: .milliseconds(Int64(configuration.handshakeTimeoutMs)),
            health: { [draining, health] in
                var report = await health()
                report.draining = draining.withLockedValue { $0 }
                return report
            },
            metrics: metrics,
            originAllowed: { Self.originAllowed($0, allowed: allowedOrigins, loopbackListener: loopbackListener) },
            sessionsFull: { [ip = channel.remoteAddress?.ipAddress ?? "?"] in
                hub.sessionsFull(from: ip, limits: settings.configuration)
            },
            assets: assets,
            logger: logger
        )
        let boundHandler = NIOLoopBound(httpHandler, eventLoop: channel.eventLoop)
        // Without NIO's error handler: `HTTPHandler` answers a request the parser refuses
        // itself (501 for an unknown method, nothing after an answer that closed).
        try sync.configureHTTPServerPipeline(
            withServerUpgrade: (
                upgraders: [upgrader],
                completionHandler: { context in
                    context.pipeline.syncOperations.removeHandler(boundHandler.value, promise: nil)
                }
            ),
            withErrorHandling: false
        )
        try sync.addHandler(httpHandler)
    }

    /// A valid token presented with the upgrade: `Authorization: Bearer TOKEN`, or (for
    /// browsers, which cannot set headers) one of the offered subprotocols, echoed back.
    static func presentedToken(_ headers: HTTPHeaders, auth: AuthConfiguration) -> (role: Role, subprotocol: String?)? {
        if let authorization = headers.first(name: "Authorization"), authorization.lowercased().hasPrefix("bearer ") {
            let token = String(authorization.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
            if let role = auth.role(for: token) { return (role, nil) }
        }
        for value in headers[canonicalForm: "Sec-WebSocket-Protocol"] {
            let offered = String(value).trimmingCharacters(in: .whitespaces)
            if let role = auth.role(for: offered) { return (role, offered) }
        }
        return nil
    }

    /// The first subprotocol the client offered, if any.
    static func firstOfferedSubprotocol(_ headers: HTTPHeaders) -> String? {
        headers[canonicalForm: "Sec-WebSocket-Protocol"].lazy
            .map { String($0).trimmingCharacters(in: .whitespaces) }
            .first { !$0.isEmpty }
    }

    /// Browsers send `Origin`; other clients usually do not. Without a configured list, an
    /// origin must name the same host the request was sent to.
    ///
    /// On a loopback listener the host must also be named as loopback is (`localhost`, a
    /// `.localhost` name or an IP address): a page whose own name an attacker pointed at
    /// 127.0.0.1 (DNS rebinding) sends that name as both Origin and Host, and would otherwise
    /// pass as this host's own page.
    static func originAllowed(_ headers: HTTPHeaders, allowed: [String], loopbackListener: Bool = false) -> Bool {
        guard let origin = headers.first(name: "Origin") else { return true }
        if allowed.contains("*") || allowed.contains(origin) { return true }
        guard allowed.isEmpty, let host = headers.first(name: "Host") else { return false }
        let originHost = origin.split(separator: "/", omittingEmptySubsequences: true).dropFirst().first.map(
            String.init
        )
        guard originHost?.lowercased() == host.lowercased() else { return false }
        return !loopbackListener || namesLoopback(host)
    }

    /// Whether a connection came in on a loopback address (127.0.0.0/8, ::1).
    static func isLoopback(_ address: SocketAddress?) -> Bool {
        switch address {
        case .v4(let v4): return v4.address.sin_addr.s_addr.bigEndian >> 24 == 127
        case .v6: return address?.ipAddress == "::1" || address?.ipAddress?.hasPrefix("::ffff:127.") == true
        default: return false
        }
    }

    /// Whether a Host header's name is one DNS cannot give another meaning: `localhost`, a
    /// `.localhost` name (RFC 6761), or an IP address.
    static func namesLoopback(_ host: String) -> Bool {
        let host = host.lowercased()
        if host.hasPrefix("[") { return true }  // An IPv6 literal.
        let name = host.split(separator: ":", maxSplits: 1).first.map(String.init) ?? host
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { UInt8($0) != nil }
    }

    // MARK: Service

    public func run() async throws {
        try await start()
        await (try? gracefulShutdown())
        await drain()
    }

    /// Stops accepting, tells clients `draining`, waits (bounded) for in-flight requests, then
    /// closes every connection.
    public func drain() async {
        draining.withLockedValue { $0 = true }
        let (channels, streamListeners) = state.withLockedValue { state in
            defer {
                state.serverChannels = []
                state.streamListeners = []
            }
            return (state.serverChannels, state.streamListeners)
        }
        for listener in streamListeners { try? await listener.close().get() }
        for channel in channels { try? await channel.close() }
        let configuration = settings.configuration
        let base = configuration.drainReconnectAfterMs
        await hub.forEachSession { session in
            session.sendDraining(reconnectAfterMs: base + Int.random(in: 0...max(1, base / 2)))
        }
        let deadline = NIODeadline.now() + .milliseconds(Int64(configuration.drainTimeoutMs))
        while NIODeadline.now() < deadline {
            let busy = NIOLockedValueBox(false)
            await hub.forEachSession { session in
                if !session.isIdle { busy.withLockedValue { $0 = true } }
            }
            if !busy.withLockedValue({ $0 }) { break }
            try? await Task.sleep(for: .milliseconds(10))
        }
        // Every connection at once: a TLS connection's close waits for the client's close_notify
        // (up to `tls.close_timeout_ms`), and one after another those waits would add up past
        // any stop timeout.
        let open = children.withLockedValue { Array($0.values) }
        let closes = open.map { channel in
            let promise = channel.eventLoop.makePromise(of: Void.self)
            channel.close(promise: promise)
            return promise.futureResult
        }
        for close in closes { try? await close.get() }
        logger.info("relay drained")
    }
}
