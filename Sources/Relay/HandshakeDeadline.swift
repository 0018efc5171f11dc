import NIOCore
import NIOTLS

/// A TLS connection on the NDJSON listener that has not finished its handshake within
/// `limits.handshake_timeout_ms` is closed: until then it holds a connection slot and
/// BoringSSL's state, and says nothing (a client that connects and stalls, or sends half a
/// ClientHello). The session itself starts only once the handshake is done.
final class HandshakeDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let timeout: TimeAmount
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        timer = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls {
            timer?.cancel()
            timer = nil
        }
        context.fireUserInboundEventTriggered(event)
    }
}
