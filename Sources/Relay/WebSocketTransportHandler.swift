import NIOCore
import NIOWebSocket

/// Carries session frames over RFC 6455: one JSON object per text message.
///
/// Reassembles fragmented messages up to the hard cap (close 1009 beyond it), reports
/// messages over `max_frame_bytes` as `.tooLarge` without keeping their fragments (their text
/// is still checked for UTF-8 as it passes), answers pings, runs the close handshake, and
/// closes with 1002 on protocol violations (unmasked client frames, reserved bits, bad
/// continuation, bad control frames) and 1007 on invalid UTF-8. With permessage-deflate
/// negotiated, RSV1 on a message's first frame marks it compressed: its compressed bytes are
/// kept up to the hard cap and inflated after reassembly; a message that inflates past the
/// hard cap closes 1009, one that does not inflate (or is not UTF-8) closes 1007, one past
/// `max_frame_bytes` is `.tooLarge`; outgoing messages of at least `compressMinBytes` go out
/// compressed.
final class WebSocketTransportHandler: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = FrameEvent
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = WebSocketFrame

    private let maxFrameBytes: Int
    /// What a message may hold while it arrives: `maxFrameBytes` and a trailing `\r\n`, which
    /// is tolerated and not counted, as on TCP where the line's end is not part of the frame.
    private var keptBytes: Int { maxFrameBytes + 2 }
    private let hardCap: Int
    private var message: ByteBuffer?
    private var messageOpcode: WebSocketOpcode = .text
    private var messageBytes = 0
    private var messageOversized = false
    private var messageCompressed = false
    /// The UTF-8 check of an uncompressed text message too large to keep.
    private var oversizedText = UTF8StreamValidator()
    private var closing = Closing.open
    /// How long the answers to what the client sent before its close frame may take before the
    /// close is echoed all the same (`drain_timeout_ms`).
    private let closeTimeout: TimeAmount

    /// The close handshake: frames are read while `open`; once the client's close frame has
    /// arrived (`received`, its code to echo) the session answers what came before it and closes,
    /// and the echo goes out behind those answers; once a close frame is `sent`, nothing is
    /// written after it.
    private enum Closing {
        case open
        case received(WebSocketErrorCode)
        case sent
        /// Closed by this handler for a violation: its close frame is out and the output shut,
        /// and what the client still sends is read and dropped until it closes (or
        /// `closeTimeout`), so that its unread bytes do not reset the connection before it has
        /// read the close frame.
        case lingering
    }

    /// Pongs: at most one written and not yet taken by the kernel, and the payload of the
    /// latest ping that came meanwhile, answered once it is.
    private enum Pongs {
        case idle
        case writing(next: ByteBuffer?)
    }
    private var pongs = Pongs.idle

    private func sendPong(_ context: ChannelHandlerContext, _ payload: ByteBuffer) {
        // The session writes through the channel from now on, and finishes a frame it began.
        context.fireUserInboundEventTriggered(LeaveSocket())
        pongs = .writing(next: nil)
        let promise = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(
            wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: payload)),
            promise: promise
        )
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        promise.futureResult.whenComplete { result in
            let (handler, context) = bound.value
            handler.pongWritten(context, failed: (try? result.get()) == nil)
        }
    }

    private func pongWritten(_ context: ChannelHandlerContext, failed: Bool) {
        guard case .writing(let next) = pongs else { return }
        pongs = .idle
        guard let next, !failed, !closeSent, context.channel.isActive else { return }
        sendPong(context, next)
    }

    private var closeSent: Bool {
        switch closing {
        case .sent, .lingering: return true
        case .open, .received: return false
        }
    }
    private let deflate: PerMessageDeflate?
    private let codec: DeflateCodec?
    private let compressMinBytes: Int
    /// NIO's frame encoder: buffers already framed (`WebSocketFraming`) are written from its
    /// place in the pipeline, so that they go to the socket as they are.
    private var encoderContext: ChannelHandlerContext?

    init(
        maxFrameBytes: Int,
        hardCap: Int,
        deflate: PerMessageDeflate? = nil,
        codec: DeflateCodec? = nil,
        compressMinBytes: Int = 1024,
        closeTimeout: TimeAmount = .seconds(5)
    ) {
        self.closeTimeout = closeTimeout
        self.maxFrameBytes = maxFrameBytes
        self.hardCap = hardCap
        self.deflate = codec == nil ? nil : deflate
        self.codec = codec
        self.compressMinBytes = compressMinBytes
    }

    func handlerAdded(context: ChannelHandlerContext) {
        encoderContext = try? context.pipeline.syncOperations.context(handlerType: WebSocketFrameEncoder.self)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        encoderContext = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        // A frame decoded after NIO closed the socket (the decoder's leftovers): the session
        // must not write to that socket any more (`SessionHandler`).
        if !context.channel.isActive { context.fireUserInboundEventTriggered(LeaveSocket()) }
        // After a close frame, either way, the client may send nothing more (RFC 6455 §5.5.1).
        guard case .open = closing else { return }
        guard frame.maskKey != nil else { return fail(context, .protocolError) }
        guard !frame.rsv2, !frame.rsv3 else { return fail(context, .protocolError) }
        if frame.rsv1 {
            // Only the first frame of a data message may carry RSV1, and only with deflate.
            guard deflate != nil, frame.opcode == .text || frame.opcode == .binary else {
                return fail(context, .protocolError)
            }
        }
        switch frame.opcode {
        case .ping:
            guard frame.fin, frame.length <= 125 else { return fail(context, .protocolError) }
            switch pongs {
            case .idle:
                sendPong(context, frame.unmaskedData)
            case .writing:
                // The last pong is not out yet: only the most recent ping waits to be answered
                // (RFC 6455 §5.5.3), so a client that sends pings and reads nothing costs one.
                pongs = .writing(next: frame.unmaskedData)
            }
        case .pong:
            guard frame.fin, frame.length <= 125 else { return fail(context, .protocolError) }
        case .connectionClose:
            receivedClose(context, frame)
        case .text, .binary:
            guard message == nil else { return fail(context, .protocolError) }
            messageOpcode = frame.opcode
            messageBytes = 0
            messageOversized = false
            messageCompressed = frame.rsv1
            if frame.fin {
                // A message in one frame, the usual case: its unmasked bytes are the message, not
                // copied again into a buffer of its own.
                messageBytes = frame.length
                if messageBytes > hardCap { return fail(context, .messageTooLarge) }
                // A compressed message is kept whole: only its inflated size says what it is.
                messageOversized = messageBytes > keptBytes && !messageCompressed
                if messageOversized, frame.opcode == .text, !isValidUTF8(frame.unmaskedData) {
                    return fail(context, .dataInconsistentWithMessage)
                }
                return finish(context, messageOversized ? ByteBuffer() : frame.unmaskedData)
            }
            message = context.channel.allocator.buffer(capacity: frame.length)
            append(context, frame)
        case .continuation:
            guard message != nil else { return fail(context, .protocolError) }
            append(context, frame)
        default:
            fail(context, .protocolError)
        }
    }

    private func append(_ context: ChannelHandlerContext, _ frame: WebSocketFrame) {
        messageBytes += frame.length
        if messageBytes > hardCap { return fail(context, .messageTooLarge) }
        if messageBytes > keptBytes, !messageCompressed {
            // Keep counting toward the hard cap, and checking the text, but keep none of it.
            if !messageOversized, let kept = message {
                messageOversized = true
                oversizedText = UTF8StreamValidator()
                if messageOpcode == .text { oversizedText.feed(kept) }
                message?.clear()
            }
            if messageOpcode == .text { oversizedText.feed(frame.unmaskedData) }
        } else {
            var data = frame.unmaskedData
            message?.writeBuffer(&data)
        }
        guard frame.fin, let complete = message else { return }
        message = nil
        if messageOversized, messageOpcode == .text, !oversizedText.isValid {
            return fail(context, .dataInconsistentWithMessage)
        }
        finish(context, complete)
    }

    /// A whole message has arrived (`complete`: its bytes, unless it was too large).
    private func finish(_ context: ChannelHandlerContext, _ complete: ByteBuffer) {
        var complete = complete
        if messageOpcode == .binary {
            return context.fireChannelRead(wrapInboundOut(.binary))
        }
        if messageOversized {
            return context.fireChannelRead(wrapInboundOut(.tooLarge))
        }
        if messageCompressed, let codec {
            switch codec.inflate(complete, maxBytes: keptBytes, allocator: context.channel.allocator) {
            case .success(let inflated): complete = inflated
            case .failure(.tooLarge):
                // The message is its inflated bytes: over the hard cap it closes 1009, as an
                // uncompressed one would, and not UTF-8 1007 (inflated again only as far as the
                // cap, then dropped).
                switch codec.inflate(complete, maxBytes: hardCap, allocator: context.channel.allocator) {
                case .failure(.tooLarge): return fail(context, .messageTooLarge)
                case .failure(.invalid): return fail(context, .dataInconsistentWithMessage)
                case .success(let inflated):
                    if messageOpcode == .text, !isValidUTF8(inflated) {
                        return fail(context, .dataInconsistentWithMessage)
                    }
                    return context.fireChannelRead(wrapInboundOut(.tooLarge))
                }
            case .failure(.invalid): return fail(context, .dataInconsistentWithMessage)
            }
        }
        if Self.lengthWithoutLineEnd(complete) > maxFrameBytes {
            context.fireChannelRead(wrapInboundOut(.tooLarge))
        } else if !isValidUTF8(complete) {
            fail(context, .dataInconsistentWithMessage)
        } else {
            context.fireChannelRead(wrapInboundOut(.frame(complete)))
        }
    }

    /// A message's length without a trailing `\n` or `\r\n`.
    static func lengthWithoutLineEnd(_ message: ByteBuffer) -> Int {
        let bytes = message.readableBytesView
        guard bytes.last == UInt8(ascii: "\n") else { return bytes.count }
        let rest = bytes.dropLast()
        return rest.last == UInt8(ascii: "\r") ? rest.count - 1 : rest.count
    }

    private func receivedClose(_ context: ChannelHandlerContext, _ frame: WebSocketFrame) {
        guard frame.fin, frame.length <= 125 else { return fail(context, .protocolError) }
        var data = frame.unmaskedData
        var code = WebSocketErrorCode.normalClosure
        if data.readableBytes == 1 { return fail(context, .protocolError) }
        if let raw = data.readInteger(as: UInt16.self) {
            guard Self.isValidCloseCode(raw) else { return fail(context, .protocolError) }
            // A reason that is not UTF-8 is data inconsistent with its type (RFC 6455 §7.4.1).
            guard String(validating: data.readableBytesView, as: UTF8.self) != nil else {
                return fail(context, .dataInconsistentWithMessage)
            }
            code = WebSocketErrorCode(codeNumber: Int(raw))
        }
        closeReceived(code, context)
    }

    /// The client asked for the close (`code`: what to echo). Like a TCP client's half-close:
    /// what it sent before is answered, then the close is echoed (RFC 6455 §5.5.1 lets the echo
    /// wait for the messages being sent). The session closes the channel once it has answered,
    /// or `closeTimeout` does; `close(context:mode:promise:)` echoes.
    private func closeReceived(_ code: WebSocketErrorCode, _ context: ChannelHandlerContext) {
        closing = .received(code)
        let channel = context.channel
        context.eventLoop.scheduleTask(in: closeTimeout) { channel.close(promise: nil) }
        context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is WebSocketProtocolViolation { return fail(context, .protocolError) }
        if let channelEvent = event as? ChannelEvent, channelEvent == .inputClosed {
            return tcpInputClosed(context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// The client shut its side of the TCP connection with no close frame first (a script
    /// that ends its input, as on the NDJSON listener): taken as a close frame with 1000, so
    /// that what it sent before is answered, then a close frame goes out and the connection
    /// closes. After its own close frame nothing more is coming; once the daemon's is out, the
    /// connection is done.
    private func tcpInputClosed(_ context: ChannelHandlerContext) {
        switch closing {
        case .open:
            closeReceived(.normalClosure, context)
        case .received:
            break
        case .sent, .lingering:
            context.close(promise: nil)
        }
    }

    /// A close frame with `code`, the one shape of all three ways this handler closes.
    private static func closeFrame(_ code: WebSocketErrorCode, _ context: ChannelHandlerContext) -> WebSocketFrame {
        var data = context.channel.allocator.buffer(capacity: 2)
        data.write(webSocketErrorCode: code)
        return WebSocketFrame(fin: true, opcode: .connectionClose, data: data)
    }

    static func isValidCloseCode(_ code: UInt16) -> Bool {
        switch code {
        // 1012–1014 are registered with IANA since RFC 6455 (restart, try again later, bad
        // gateway); clients such as Python's websockets send them.
        case 1000...1003, 1007...1014, 3000...4999: return true
        default: return false
        }
    }

    private func fail(_ context: ChannelHandlerContext, _ code: WebSocketErrorCode) {
        message = nil
        close(context, code)
    }

    /// Sends a close frame (once), then shuts the output and reads on until the client closes,
    /// for at most `closeTimeout` (`lingering`).
    private func close(_ context: ChannelHandlerContext, _ code: WebSocketErrorCode) {
        guard !closeSent else { return }
        closing = .lingering
        context.fireUserInboundEventTriggered(LeaveSocket())
        let frame = Self.closeFrame(code, context)
        let channel = context.channel
        let linger = closeTimeout
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { _ in
            channel.close(mode: .output, promise: nil)
            channel.eventLoop.scheduleTask(in: linger) { channel.close(promise: nil) }
        }
    }

    /// NIO's frame decoder's errors close as RFC 6455 says (a frame over the hard cap 1009, a
    /// bad control frame 1002); after this handler's close frame, errors are what the client
    /// still sends, and are dropped with it.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if case .lingering = closing { return }
        if let error = error as? NIOWebSocketError {
            return fail(context, error == .invalidFrameLength ? .messageTooLarge : .protocolError)
        }
        context.fireErrorCaught(error)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard !closeSent else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        var buffer = unwrapOutboundIn(data)
        if buffer.readableBytes == 0 {
            // Nothing to frame (a session's write that only waits for the ones before it).
            guard let encoderContext else {
                promise?.succeed(())
                return
            }
            return encoderContext.write(NIOAny(buffer), promise: promise)
        }
        if buffer.readableBytesView.first == WebSocketFraming.finalText {
            // A run the hub framed already: JSON lines start with `{`, frames with FIN+text.
            guard let encoderContext else { return context.write(NIOAny(buffer), promise: promise) }
            return encoderContext.write(NIOAny(buffer), promise: promise)
        }
        if buffer.readableBytesView.last == UInt8(ascii: "\n") {
            buffer.moveWriterIndex(to: buffer.writerIndex - 1)
        }
        if let deflate, let codec, buffer.readableBytes >= compressMinBytes,
            let compressed = codec.deflate(
                buffer,
                windowBits: deflate.serverWindowBits,
                allocator: context.channel.allocator
            )
        {
            let frame = WebSocketFrame(fin: true, rsv1: true, opcode: .text, data: compressed)
            return context.write(wrapOutboundOut(frame), promise: promise)
        }
        context.write(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: buffer)), promise: promise)
    }

    /// `SendWebSocketClose`: the close frame goes out behind everything written before it, and
    /// `promise` completes once it is written; nothing is written after it.
    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard let request = event as? SendWebSocketClose else {
            return context.triggerUserOutboundEvent(event, promise: promise)
        }
        guard !closeSent else {
            promise?.succeed(())
            return
        }
        closing = .sent
        context.fireUserInboundEventTriggered(LeaveSocket())
        context.writeAndFlush(wrapOutboundOut(Self.closeFrame(request.code, context)), promise: promise)
    }

    /// A close from the daemon goes out as a close frame first: the client's own code echoed
    /// when it asked for the close, else 1001 (shutdown, slow consumer).
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if mode == .all, !closeSent, context.channel.isActive {
            var code = WebSocketErrorCode.goingAway
            if case .received(let echoed) = closing { code = echoed }
            closing = .sent
            context.fireUserInboundEventTriggered(LeaveSocket())
            context.writeAndFlush(wrapOutboundOut(Self.closeFrame(code, context)), promise: nil)
        }
        context.close(mode: mode, promise: promise)
    }
}

/// Asks the WebSocket transport for its close frame (see `WebSocketTransportHandler`); the
/// channel stays open until its owner closes it.
struct SendWebSocketClose: Sendable {
    let code: WebSocketErrorCode
}
