// Fuzzes the WebSocket transport (Relay's WebSocketTransportHandler) through an
// EmbeddedChannel: the input is a raw byte stream from the client, split into frames by
// NIOWebSocket's WebSocketFrameDecoder as in the daemon, so fragments, control frames, close
// codes, RSV bits, masking and UTF-8 are all reached. Byte 0: bit 0 turns permessage-deflate
// on, bits 1-2 pick the frame limit (16, 125, 1024, 4096 bytes); the rest is the stream, fed in
// one write per 256 bytes.
import NIOCore
import NIOEmbedded
import NIOWebSocket
@testable import Relay

final class Collector: ChannelInboundHandler {
    typealias InboundIn = FrameEvent
    var events: [FrameEvent] = []
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        events.append(unwrapInboundIn(data))
    }
}

private let limits = [16, 125, 1024, 4096]
private let codec = DeflateCodec()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 1 else { return 0 }
    let useDeflate = data[0] & 1 == 1
    let maxFrameBytes = limits[Int(data[0] >> 1) & 3]
    let stream = UnsafeBufferPointer(start: data + 1, count: size - 1)

    let channel = EmbeddedChannel()
    let collector = Collector()
    let handler = WebSocketTransportHandler(
        maxFrameBytes: maxFrameBytes,
        hardCap: maxFrameBytes * 4,
        deflate: useDeflate
            ? PerMessageDeflate(serverWindowBits: 15, responseHeader: "permessage-deflate") : nil,
        codec: useDeflate ? codec : nil,
        compressMinBytes: 64
    )
    try! channel.pipeline.syncOperations.addHandlers([
        ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 16)),
        handler,
        collector,
    ])
    try! channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()

    var offset = 0
    while offset < stream.count {
        let length = min(stream.count - offset, 256)
        var buffer = channel.allocator.buffer(capacity: length)
        buffer.writeBytes(UnsafeBufferPointer(rebasing: stream[offset..<(offset + length)]))
        offset += length
        do {
            try channel.writeInbound(buffer)
        } catch {
            // A frame the WebSocket decoder refuses (the daemon's protocol error handler then
            // closes), or a write after the handler closed the channel.
            break
        }
    }
    // Something the daemon sends, through the handler's outbound path (deflates when on).
    if channel.isActive {
        _ = channel.writeAndFlush(ByteBuffer(repeating: UInt8(ascii: "x"), count: 100))
    }
    _ = try? channel.finish(acceptAlreadyClosed: true)

    for event in collector.events {
        guard case .frame(let message) = event else { continue }
        precondition(message.readableBytes <= maxFrameBytes, "message of \(message.readableBytes) > \(maxFrameBytes) bytes")
        precondition(String(validating: message.readableBytesView, as: UTF8.self) != nil, "message is not UTF-8")
    }
    return 0
}
