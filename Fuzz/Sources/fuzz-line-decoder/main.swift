// Fuzzes the NDJSON line decoder (Relay's LineFrameDecoder) through an EmbeddedChannel with a
// ByteToMessageHandler, as the TCP and TLS listeners use it. Input: byte 0 picks the frame
// limit (1...64, small so that oversized lines are common), byte 1 seeds the chunk sizes the
// rest is fed in, then the stream itself, then end of stream (decodeLast).
import NIOCore
import NIOEmbedded
@testable import Relay

final class Collector: ChannelInboundHandler {
    typealias InboundIn = FrameEvent
    var events: [FrameEvent] = []
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        events.append(unwrapInboundIn(data))
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let maxFrameBytes = 1 + Int(data[0]) % 64
    var seed = UInt32(data[1]) | 1
    let stream = UnsafeBufferPointer(start: data + 2, count: size - 2)

    let channel = EmbeddedChannel()
    let collector = Collector()
    try! channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(LineFrameDecoder(maxFrameBytes: maxFrameBytes)))
    try! channel.pipeline.syncOperations.addHandler(collector)

    var offset = 0
    while offset < stream.count {
        // xorshift: chunk sizes of 1...32 bytes.
        seed ^= seed << 13
        seed ^= seed >> 17
        seed ^= seed << 5
        let length = min(stream.count - offset, 1 + Int(seed % 32))
        var buffer = channel.allocator.buffer(capacity: length)
        buffer.writeBytes(UnsafeBufferPointer(rebasing: stream[offset..<(offset + length)]))
        try! channel.writeInbound(buffer)
        offset += length
    }
    _ = try! channel.finish()

    var frameBytes = 0
    for event in collector.events {
        guard case .frame(let line) = event else { continue }
        precondition(line.readableBytes <= maxFrameBytes, "frame of \(line.readableBytes) > \(maxFrameBytes) bytes")
        precondition(!line.readableBytesView.contains(UInt8(ascii: "\n")), "frame holds a newline")
        precondition(line.readableBytes > 0, "empty frame")
        frameBytes += line.readableBytes
    }
    precondition(frameBytes <= stream.count, "more frame bytes than input")
    return 0
}
