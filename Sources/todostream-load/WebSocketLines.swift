import NIOCore
import NIOHTTP1
import NIOWebSocket

/// Lets a `LineConnection` speak to todostreamd over WebSocket (`/events`): each text message
/// in becomes one line (a `\n` appended), each buffer out becomes one masked text message.
/// Fragmented messages are reassembled up to `maxMessageBytes`; pings are answered.
final class WebSocketLines: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = WebSocketFrame

    private let maxMessageBytes = 1 << 20
    private var fragments: ByteBuffer?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .continuation:
            var data = frame.unmaskedData
            if frame.opcode == .continuation || !frame.fin {
                if fragments == nil { fragments = context.channel.allocator.buffer(capacity: data.readableBytes) }
                fragments!.writeBuffer(&data)
                guard fragments!.readableBytes <= maxMessageBytes else {
                    context.close(promise: nil)
                    return
                }
                guard frame.fin else { return }
                data = fragments!
                fragments = nil
            }
            if data.getInteger(at: data.writerIndex - 1, as: UInt8.self) != 0x0A { data.writeInteger(UInt8(0x0A)) }
            context.fireChannelRead(wrapInboundOut(data))
        case .ping:
            let pong = WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .connectionClose:
            context.close(promise: nil)
        default:
            break
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let buffer = unwrapOutboundIn(data)
        let frame = WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: buffer)
        context.write(wrapOutboundOut(frame), promise: promise)
    }
}

/// Sends the upgrade request (`GET /events`) once connected, then leaves the pipeline.
final class UpgradeRequester: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private let host: String

    init(host: String) { self.host = host }

    func channelActive(context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: host)
        headers.add(name: "Content-Length", value: "0")
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: "/events", headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        context.fireChannelActive()
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
