import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP relay between clients and the daemon that a test breaks on purpose: it cuts a
/// connection after a given number of bytes in one direction (so inside a frame, between a
/// write and its answer, or anywhere else), cuts everything at once, or refuses connections
/// while closed.
final class CutProxy: Sendable {
    enum Direction: Sendable {
        /// Client to daemon.
        case up
        /// Daemon to client.
        case down
    }

    private struct State {
        var connections: [ObjectIdentifier: (any Channel, any Channel)] = [:]
        var armed: (direction: Direction, bytes: Int)?
        var refusing = false
        var target: Int
        var accepted = 0
        var cuts = 0
    }

    private let server: any Channel
    private let state: NIOLockedValueBox<State>
    var port: Int { server.localAddress?.port ?? 0 }

    private init(server: any Channel, state: NIOLockedValueBox<State>) {
        self.server = server
        self.state = state
    }

    static func start(to targetPort: Int) async throws -> CutProxy {
        let state = NIOLockedValueBox(State(target: targetPort))
        let group = MultiThreadedEventLoopGroup.singleton
        let server = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                let (refusing, targetPort) = state.withLockedValue { state in
                    state.accepted += 1
                    return (state.refusing, state.target)
                }
                guard !refusing else {
                    return inbound.eventLoop.makeFailedFuture(Refused())
                }
                return ClientBootstrap(group: inbound.eventLoop)
                    .channelInitializer { upstream in
                        upstream.eventLoop.makeCompletedFuture {
                            try upstream.pipeline.syncOperations.addHandler(
                                Relay(peer: inbound, direction: .down, state: state)
                            )
                        }
                    }
                    .connect(host: "127.0.0.1", port: targetPort)
                    .flatMapThrowing { upstream in
                        state.withLockedValue { $0.connections[ObjectIdentifier(inbound)] = (inbound, upstream) }
                        try inbound.pipeline.syncOperations.addHandler(
                            Relay(peer: upstream, direction: .up, state: state)
                        )
                    }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return CutProxy(server: server, state: state)
    }

    struct Refused: Error {}

    /// The next `bytes` bytes in `direction` (over all connections) pass; the connection that
    /// carries the one after them is cut right there.
    func arm(_ direction: Direction, afterBytes bytes: Int) {
        state.withLockedValue { $0.armed = (direction, bytes) }
    }

    /// New connections go to `port` from now on (a daemon restarted on another port).
    func retarget(to port: Int) {
        state.withLockedValue { $0.target = port }
    }

    func cutAll() {
        let pairs = state.withLockedValue { state in
            state.cuts += 1
            return Array(state.connections.values)
        }
        for (inbound, upstream) in pairs {
            inbound.close(promise: nil)
            upstream.close(promise: nil)
        }
    }

    /// While refusing, new connections are closed at once (and open ones are cut).
    func refuse(_ refusing: Bool) {
        state.withLockedValue { $0.refusing = refusing }
        if refusing { cutAll() }
    }

    var cuts: Int { state.withLockedValue { $0.cuts } }
    var accepted: Int { state.withLockedValue { $0.accepted } }
    var isArmed: Bool { state.withLockedValue { $0.armed != nil } }

    func stop() async {
        cutAll()
        try? await server.close()
    }

    private final class Relay: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer

        let peer: any Channel
        let direction: Direction
        let state: NIOLockedValueBox<State>

        init(peer: any Channel, direction: Direction, state: NIOLockedValueBox<State>) {
            self.peer = peer
            self.direction = direction
            self.state = state
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var buffer = unwrapInboundIn(data)
            let direction = self.direction
            let passing: Int? = state.withLockedValue { state in
                guard let armed = state.armed, armed.direction == direction else { return nil }
                if armed.bytes >= buffer.readableBytes {
                    state.armed = (direction, armed.bytes - buffer.readableBytes)
                    return nil
                }
                state.armed = nil
                state.cuts += 1
                return armed.bytes
            }
            guard let passing else {
                peer.writeAndFlush(buffer, promise: nil)
                return
            }
            if passing > 0, let head = buffer.readSlice(length: passing) {
                peer.writeAndFlush(head, promise: nil)
            }
            let peer = self.peer
            let channel = context.channel
            peer.eventLoop.execute {
                // After the head is written.
                peer.close(promise: nil)
                channel.close(promise: nil)
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            peer.close(promise: nil)
            let key = direction == .up ? ObjectIdentifier(context.channel) : ObjectIdentifier(peer)
            state.withLockedValue { _ = $0.connections.removeValue(forKey: key) }
            context.fireChannelInactive()
        }
    }
}
