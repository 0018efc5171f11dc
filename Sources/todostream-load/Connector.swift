import NIOCore
import NIOPosix
import NIOSSL

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the scenario's server listens.
struct Endpoint: Sendable {
    var target: Target
    var host: String
    var port: Int
    /// todostreamd only: NDJSON over TCP or TLS, or WebSocket at `/events` (port is then the
    /// HTTP listener's), with or without TLS.
    var transport: Transport = .tcp
    /// With TLS: a PEM file of the certificates to trust; nil: the server's is not checked.
    var tlsCA: String?
}

/// A connected, set-up connection.
struct ConnectionHandle: Sendable {
    let channel: any Channel
    let box: NIOLoopBoundBox<LineConnection?>

    var loop: any EventLoop { channel.eventLoop }

    /// The kernel's TCP state of the socket (Linux `tcpi_state`: 1 established, 7 closed,
    /// 8 close-wait, …), read through a 4-byte `TCP_INFO` whose first byte it is. A connection
    /// that stopped reading never sees the server close it; this does. nil when unknown.
    /// Whether the server's end of this connection is gone or no longer established, by
    /// /proc/net/tcp (`states` from `SystemProbe.tcpSocketStates()`).
    func serverSideClosed(in states: [String: String]) -> Bool? {
        guard let local = channel.localAddress, let remote = channel.remoteAddress,
            let localIP = local.ipAddress, let localPort = local.port,
            let remoteIP = remote.ipAddress, let remotePort = remote.port,
            let ours = SystemProbe.procTCPKey(ip: localIP, port: localPort),
            let theirs = SystemProbe.procTCPKey(ip: remoteIP, port: remotePort)
        else { return nil }
        guard let state = states["\(theirs)>\(ours)"] else { return true }
        return state != "01"
    }

    func tcpState() async -> Int? {
        #if os(Linux)
        let option = ChannelOptions.Types.SocketOption(level: .tcp, name: NIOBSDSocket.Option(rawValue: 11))
        guard let value = try? await channel.getOption(option).get() else { return nil }
        return Int(value & 0xFF)
        #else
        return nil
        #endif
    }

    /// Runs `body` with the connection on its loop.
    func withConnection<T: Sendable>(_ body: @escaping @Sendable (LineConnection) -> T) -> EventLoopFuture<T?> {
        let box = self.box
        return loop.submit { box.value.map(body) }
    }
}

/// Opens client connections, each from a loopback source address of its own range
/// (127.0.0.2, 127.0.0.3, … with `perAddress` connections each) so that per-IP limits and the
/// ephemeral port range of one address do not cap a scenario.
final class Connector: Sendable {
    let group: MultiThreadedEventLoopGroup
    let endpoint: Endpoint
    let run: RunState
    let perAddress: Int
    let firstAddress: Int
    /// How long a connection may take to connect and finish its protocol's setup.
    let setupTimeout: TimeAmount
    private let remote: SocketAddress
    /// The client side of TLS, made once (nil without TLS).
    private let tls: NIOSSLContext?

    init(
        group: MultiThreadedEventLoopGroup,
        endpoint: Endpoint,
        run: RunState,
        perAddress: Int,
        firstAddress: Int,
        setupTimeout: TimeAmount = .seconds(30)
    )
        throws
    {
        self.group = group
        self.setupTimeout = setupTimeout
        self.endpoint = endpoint
        self.run = run
        self.perAddress = max(perAddress, 1)
        self.firstAddress = firstAddress
        self.remote = try SocketAddress.makeAddressResolvingHost(endpoint.host, port: endpoint.port)
        self.tls = endpoint.transport.isTLS ? try Self.makeTLSContext(trusting: endpoint.tlsCA) : nil
    }

    private static func makeTLSContext(trusting file: String?) throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let file {
            configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(file))
        } else {
            configuration.certificateVerification = .none
        }
        return try NIOSSLContext(configuration: configuration)
    }

    func sourceAddress(for index: Int) -> String? {
        guard perAddress > 0 else { return nil }
        let host = firstAddress + index / perAddress
        precondition(host < 255, "too many connections for the source address range")
        return "127.0.0.\(host)"
    }

    /// Connects connection `index` and completes once its protocol handshake (and
    /// subscription) is done.
    func connect(
        index: Int,
        mode: ConnectionMode,
        settings: ConnectionSettings,
        on loop: (any EventLoop)? = nil,
        receiveBufferBytes: Int? = nil,
        configure: (@Sendable (LineConnection) -> Void)? = nil
    ) -> EventLoopFuture<ConnectionHandle> {
        let loop = loop ?? group.next()
        let ready = loop.makePromise(of: Void.self)
        let box = NIOLoopBoundBox<LineConnection?>.makeEmptyBox(valueType: LineConnection.self, eventLoop: loop)
        let target = endpoint.target
        let transport = endpoint.transport
        let hostHeader = "\(endpoint.host):\(endpoint.port)"
        // `localhost` is sent (SNI) and checked; an IP address (the other loopback hosts) is
        // checked against the certificate's IP addresses instead, which NIOSSL does without a name.
        let serverHostname = endpoint.tlsCA != nil && endpoint.host == "localhost" ? endpoint.host : nil
        let tls = self.tls
        let run = self.run
        var bootstrap = ClientBootstrap(group: loop)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connectTimeout(setupTimeout)
            .channelInitializer { channel in
                if let receiveBufferBytes {
                    _ = channel.setOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(receiveBufferBytes))
                }
                if let provider = channel as? any SocketOptionProvider {
                    // Close with RST: no TIME_WAIT pile-up across many scenario runs.
                    _ = provider.setSoLinger(linger(l_onoff: 1, l_linger: 0))
                }
                let connection: LineConnection
                switch target {
                case .todostreamd:
                    connection = DaemonConnection(mode: mode, run: run, settings: settings, ready: ready)
                case .nats:
                    connection = NatsConnection(mode: mode, run: run, settings: settings, ready: ready)
                case .redis:
                    connection = RedisConnection(mode: mode, run: run, settings: settings, ready: ready)
                }
                configure?(connection)
                box.value = connection
                return channel.eventLoop.makeCompletedFuture {
                    var handlers: [any ChannelHandler] =
                        transport.isWebSocket
                        ? [WebSocketLines(host: hostHeader, connection: connection), connection] : [connection]
                    if let tls {
                        handlers.insert(try NIOSSLClientHandler(context: tls, serverHostname: serverHostname), at: 0)
                    }
                    try channel.pipeline.syncOperations.addHandlers(handlers)
                }
            }
        if let source = sourceAddress(for: index) {
            do {
                bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: source, port: 0))
                #if os(Linux)
                // IP_BIND_ADDRESS_NO_PORT: pick the port at connect time, by the whole 4-tuple.
                bootstrap = bootstrap.channelOption(
                    ChannelOptions.Types.SocketOption(level: .ip, name: NIOBSDSocket.Option(rawValue: 24)),
                    value: 1
                )
                #endif
            } catch {
                ready.fail(error)
                return loop.makeFailedFuture(error)
            }
        }
        let seconds = Double(setupTimeout.nanoseconds) / 1e9
        let timeout = loop.scheduleTask(in: setupTimeout) {
            ready.fail(LoadError("setup timed out after \(decimals(seconds, 1)) s (\(mode))"))
        }
        let connected = bootstrap.connect(to: remote)
        connected.whenFailure { ready.fail($0) }
        return connected.flatMap { channel in
            ready.futureResult.map {
                timeout.cancel()
                return ConnectionHandle(channel: channel, box: box)
            }.flatMapErrorThrowing { error in
                timeout.cancel()
                channel.close(promise: nil)
                throw error
            }
        }
    }

    /// Connects `count` connections, `batch` at a time; returns those that came up and the
    /// reasons of those that did not. Stops after a first batch of which none came up.
    func connectMany(
        count: Int,
        startIndex: Int = 0,
        batch: Int = 256,
        mode: @escaping @Sendable (Int) -> ConnectionMode,
        settings: @escaping @Sendable (Int) -> ConnectionSettings,
        receiveBufferBytes: @escaping @Sendable (Int) -> Int? = { _ in nil }
    ) async -> (handles: [ConnectionHandle], failures: [String: Int]) {
        var handles: [ConnectionHandle] = []
        var failures: [String: Int] = [:]
        handles.reserveCapacity(count)
        var next = 0
        while next < count {
            let end = min(next + batch, count)
            let futures = (next..<end).map { offset in
                connect(
                    index: startIndex + offset,
                    mode: mode(offset),
                    settings: settings(offset),
                    receiveBufferBytes: receiveBufferBytes(offset)
                )
            }
            for future in futures {
                do {
                    handles.append(try await future.get())
                } catch {
                    failures["\(error)", default: 0] += 1
                }
            }
            // Not one connection came up: the next ones would not either (each would cost
            // the setup timeout again).
            guard !handles.isEmpty else { break }
            next = end
        }
        return (handles, failures)
    }

    /// Closes every connection (counted as the tool's own closes, not the server's).
    func closeAll(_ handles: [ConnectionHandle]) async {
        run.tearingDown.store(true, ordering: .relaxed)
        var futures: [EventLoopFuture<Void>] = []
        futures.reserveCapacity(min(handles.count, 1_024))
        for handle in handles {
            futures.append(handle.channel.close())
            if futures.count >= 1_024 {
                for future in futures { try? await future.get() }
                futures.removeAll(keepingCapacity: true)
            }
        }
        for future in futures { try? await future.get() }
    }
}

/// Setup failures for people: "16× setup timed out after 30.0 s (requester)".
func describe(setupFailures failures: [String: Int]) -> String {
    failures.sorted { $0.key < $1.key }.map { "\($0.value)× \($0.key)" }.joined(separator: ", ")
}
