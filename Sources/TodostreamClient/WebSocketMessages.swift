import NIOCore
import NIOWebSocket

/// Frames over WebSocket: each text message in is one buffer (fragments reassembled up to
/// `maxMessageBytes`), each buffer out one text message, **masked** as RFC 6455 requires of a
/// client. Pings are answered; a close is echoed and the connection closed.
final class WebSocketMessages: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = WebSocketFrame

    private let maxMessageBytes: Int
    private var fragments: ByteBuffer?
    private var closing = false

    init(maxMessageBytes: Int) {
        self.maxMessageBytes = maxMessageBytes
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .continuation:
            var data = frame.unmaskedData
            if frame.opcode == .continuation || !frame.fin || fragments != nil {
                var collected = fragments ?? context.channel.allocator.buffer(capacity: data.readableBytes)
                collected.writeBuffer(&data)
                guard collected.readableBytes <= maxMessageBytes else {
                    close(context: context, code: .messageTooLarge)
                    return
                }
                guard frame.fin else {
                    fragments = collected
                    return
                }
                fragments = nil
                data = collected
            }
            guard data.readableBytes <= maxMessageBytes else {
                close(context: context, code: .messageTooLarge)
                return
            }
            if data.readableBytesView.last == UInt8(ascii: "\n") { data.moveWriterIndex(to: data.writerIndex - 1) }
            context.fireChannelRead(wrapInboundOut(data))
        case .ping:
            let pong = WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .connectionClose:
            close(context: context, code: .normalClosure)
        case .binary:
            close(context: context, code: .unacceptableData)
        default:
            break
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: unwrapOutboundIn(data))
        context.write(wrapOutboundOut(frame), promise: promise)
    }

    private func close(context: ChannelHandlerContext, code: WebSocketErrorCode) {
        guard !closing else { return }
        closing = true
        var payload = context.channel.allocator.buffer(capacity: 2)
        payload.write(webSocketErrorCode: code)
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: payload)
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        context.close(promise: nil)
    }
}
