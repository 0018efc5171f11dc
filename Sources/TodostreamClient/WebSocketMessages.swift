import NIOCore
import NIOWebSocket

/// Frames over WebSocket: each text message in is one frame (fragments reassembled up to
/// `maxMessageBytes`; a fragmented message over it is dropped as its fragments come and
/// reported `.tooLarge`), each buffer out one text message, **masked** as RFC 6455 requires
/// of a client. Pings are answered; a close is echoed and the connection closed. A text frame
/// in the middle of a message, or a continuation outside one, closes it with 1002, a message
/// that is not UTF-8 with 1007, a binary one with 1003. (A single frame over the limit never
/// gets here: NIO's frame decoder, which holds a frame whole, closes the connection with 1009,
/// as told in `errorCaught`.)
final class WebSocketMessages: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = InboundFrame
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = WebSocketFrame

    private enum Message {
        case none
        /// The fragments of a message so far.
        case collecting(ByteBuffer)
        /// A fragmented message over the limit: its head and its length so far.
        case skipping(head: ByteBuffer, length: Int)
    }

    private let maxMessageBytes: Int
    private var message = Message.none
    private var closing = false

    init(maxMessageBytes: Int) {
        self.maxMessageBytes = maxMessageBytes
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .continuation:
            // A text frame starts a message, a continuation goes on with the one started (RFC
            // 6455 §5.4): anything else is a protocol error.
            let continuing: Bool
            if case .none = message { continuing = false } else { continuing = true }
            guard continuing == (frame.opcode == .continuation) else {
                close(context: context, code: .protocolError)
                return
            }
            var data = frame.unmaskedData
            switch message {
            case .none where frame.fin:
                break
            case .none:
                message = .collecting(data)
                return
            case .collecting(var collected):
                message = .none  // so that `collected` is the only reference and grows in place
                collected.writeBuffer(&data)
                guard collected.readableBytes <= maxMessageBytes else {
                    let head = ByteBuffer(bytes: collected.readableBytesView.prefix(InboundFrame.headBytes))
                    message = .skipping(head: head, length: collected.readableBytes)
                    return finishSkipping(context: context, fin: frame.fin)
                }
                guard frame.fin else {
                    message = .collecting(collected)
                    return
                }
                message = .none
                data = collected
            case .skipping(let head, let length):
                message = .skipping(head: head, length: length + data.readableBytes)
                return finishSkipping(context: context, fin: frame.fin)
            }
            guard data.readableBytes <= maxMessageBytes else {
                let head = ByteBuffer(bytes: data.readableBytesView.prefix(InboundFrame.headBytes))
                context.fireChannelRead(wrapInboundOut(.tooLarge(head: head, length: data.readableBytes)))
                return
            }
            guard Self.isUTF8(data.readableBytesView) else {
                close(context: context, code: .dataInconsistentWithMessage)
                return
            }
            if data.readableBytesView.last == UInt8(ascii: "\n") { data.moveWriterIndex(to: data.writerIndex - 1) }
            context.fireChannelRead(wrapInboundOut(.frame(data)))
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

    /// Whether `bytes` are UTF-8, as a text message must be (else it closes with 1007).
    static func isUTF8(_ bytes: ByteBufferView) -> Bool {
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid: continue
            case .emptyInput: return true
            case .error: return false
            }
        }
    }

    /// The message being skipped is reported once its last fragment has come.
    private func finishSkipping(context: ChannelHandlerContext, fin: Bool) {
        guard fin, case .skipping(let head, let length) = message else { return }
        message = .none
        context.fireChannelRead(wrapInboundOut(.tooLarge(head: head, length: length)))
    }

    /// A protocol error of the daemon's frames (one over the limit among them: NIO's decoder
    /// holds a frame whole, so it is not skipped): the reader learns why, then the connection
    /// is closed with the code RFC 6455 gives it.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.fireErrorCaught(error)
        guard let error = error as? NIOWebSocketError else { return }
        close(context: context, code: error == .invalidFrameLength ? .messageTooLarge : .protocolError)
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
