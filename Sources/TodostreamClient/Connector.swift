import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization

/// Opens one connection to the daemon and returns it as a channel of frames: one buffer per
/// JSON object each way, whatever the transport.
struct Connector: Sendable {
    typealias Connection = NIOAsyncChannel<InboundFrame, ByteBuffer>

    let configuration: ClientConfiguration
    let group: any EventLoopGroup
    private let sslContext: NIOSSLContext?

    init(configuration: ClientConfiguration, group: any EventLoopGroup) throws(ClientError) {
        self.configuration = configuration
        self.group = group
        guard configuration.endpoint.transport.isEncrypted else {
            sslContext = nil
            return
        }
        // Each file on its own, so that a failure names it in plain words (BoringSSL's own
        // errors hold build paths).
        func load<T>(_ what: String, _ path: String, _ read: () throws -> T) throws(ClientError) -> T {
            do {
                return try read()
            } catch {
                throw ClientError(.invalidTLSConfiguration, "\(what) \(path) holds no PEM data it can use.")
            }
        }
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile = configuration.tls.caFile {
            let roots = try load("The CA file", caFile) { try NIOSSLCertificate.fromPEMFile(caFile) }
            tls.trustRoots = .certificates(roots)
        }
        if let certificateFile = configuration.tls.certificateFile {
            tls.certificateChain = try load("The certificate file", certificateFile) {
                try NIOSSLCertificate.fromPEMFile(certificateFile).map { .certificate($0) }
            }
            guard let keyFile = configuration.tls.keyFile else {
                throw ClientError(.invalidTLSConfiguration, "A client certificate needs its key (--key).")
            }
            let key = try load("The key file", keyFile) { try NIOSSLPrivateKey(file: keyFile, format: .pem) }
            tls.privateKey = .privateKey(key)
        }
        do {
            sslContext = try NIOSSLContext(configuration: tls)
        } catch {
            throw ClientError(.invalidTLSConfiguration, "The client certificate and key do not go together.")
        }
    }

    enum UpgradeResult: Sendable {
        case upgraded(Connection)
        case refused
    }

    struct UpgradeRefused: Error, CustomStringConvertible {
        var description: String { "the daemon refused the WebSocket upgrade" }
    }

    /// Opens a connection; `attempt` can end it before it is done.
    func connect(_ attempt: ConnectAttempt) async throws -> Connection {
        let endpoint = configuration.endpoint
        let maxFrameBytes = configuration.maxFrameBytes
        let sslContext = self.sslContext
        let serverHostname = Self.isIPAddress(endpoint.host) ? nil : endpoint.host
        let connectTimeout = TimeAmount.milliseconds(configuration.connectTimeout.milliseconds)
        let bootstrap = ClientBootstrap(group: group)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connectTimeout(connectTimeout)
        if !endpoint.transport.isWebSocket {
            return try await bootstrap.connect(host: endpoint.host, port: endpoint.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try attempt.opened(channel)
                    let pipeline = channel.pipeline.syncOperations
                    if let sslContext {
                        try pipeline.addHandler(
                            NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname)
                        )
                    }
                    try pipeline.addHandler(ByteToMessageHandler(LineFrameDecoder(maxLineBytes: maxFrameBytes)))
                    try pipeline.addHandler(LineFrameEncoder())
                    return try Connection(wrappingChannelSynchronously: channel)
                }
            }
        }
        let head = Self.upgradeRequest(endpoint, token: configuration.token)
        let result: EventLoopFuture<UpgradeResult> = try await bootstrap.connect(
            host: endpoint.host,
            port: endpoint.port
        ) { channel in
            channel.eventLoop.makeCompletedFuture {
                try attempt.opened(channel)
                // The upgrade is part of connecting: a daemon that never answers it is given
                // up after the connect timeout too.
                let upgradeTimeout = channel.eventLoop.scheduleTask(in: connectTimeout) {
                    channel.close(promise: nil)
                }
                let pipeline = channel.pipeline.syncOperations
                if let sslContext {
                    try pipeline.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                }
                let upgrader = NIOTypedWebSocketClientUpgrader<UpgradeResult>(
                    maxFrameSize: maxFrameBytes,
                    // WebSocketMessages answers protocol errors, once the reader has been told
                    // why the connection ends (NIO's handler closes it before passing the error on).
                    enableAutomaticErrorHandling: false,
                    upgradePipelineHandler: { channel, _ in
                        upgradeTimeout.cancel()
                        return channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHandler(
                                WebSocketMessages(maxMessageBytes: maxFrameBytes)
                            )
                            return .upgraded(try Connection(wrappingChannelSynchronously: channel))
                        }
                    }
                )
                let upgrade = NIOTypedHTTPClientUpgradeConfiguration(
                    upgradeRequestHead: head,
                    upgraders: [upgrader],
                    notUpgradingCompletionHandler: { channel in
                        upgradeTimeout.cancel()
                        channel.close(promise: nil)
                        return channel.eventLoop.makeSucceededFuture(.refused)
                    }
                )
                var http = NIOUpgradableHTTPClientPipelineConfiguration(upgradeConfiguration: upgrade)
                // The greeting can arrive in the same read as the 101: keep those bytes.
                http.leftOverBytesStrategy = .forwardBytes
                return try pipeline.configureUpgradableHTTPClientPipeline(configuration: http)
            }
        }
        switch try await result.get() {
        case .upgraded(let connection): return connection
        case .refused: throw UpgradeRefused()
        }
    }

    /// The WebSocket upgrade's request head.
    static func upgradeRequest(_ endpoint: ClientEndpoint, token: String?) -> HTTPRequestHead {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: endpoint.authority)
        headers.add(name: "Content-Length", value: "0")
        if let token { headers.add(name: "Authorization", value: "Bearer \(token)") }
        return HTTPRequestHead(version: .http1_1, method: .GET, uri: endpoint.path, headers: headers)
    }

    private static func isIPAddress(_ host: String) -> Bool {
        (try? SocketAddress(ipAddress: host, port: 0)) != nil
    }
}

/// One connection attempt, which `cancel` ends at once: the channels it opened are closed (a
/// connect or an upgrade under way fails), and one it opens later is refused.
final class ConnectAttempt: Sendable {
    private enum State {
        case running([any Channel])
        case cancelled
    }

    private let state = Mutex(State.running([]))

    /// The attempt opened `channel` (throws once cancelled).
    func opened(_ channel: any Channel) throws {
        try state.withLock { state in
            guard case .running(var channels) = state else { throw CancellationError() }
            channels.append(channel)
            state = .running(channels)
        }
    }

    func cancel() {
        let channels = state.withLock { state -> [any Channel] in
            defer { state = .cancelled }
            guard case .running(let channels) = state else { return [] }
            return channels
        }
        for channel in channels { channel.close(promise: nil) }
    }
}

extension Duration {
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
