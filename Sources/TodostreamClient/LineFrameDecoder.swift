import NIOCore

/// NDJSON in: one buffer per line, without its `\n` (and a `\r` before it). A line longer
/// than `maxLineBytes` closes the connection: the daemon never sends one.
struct LineFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    struct LineTooLong: Error {}

    let maxLineBytes: Int

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let newline = buffer.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
            if buffer.readableBytes > maxLineBytes { throw LineTooLong() }
            return .needMoreData
        }
        let length = newline - buffer.readerIndex
        guard length <= maxLineBytes else { throw LineTooLong() }
        guard var line = buffer.readSlice(length: length) else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: 1)
        if line.readableBytesView.last == UInt8(ascii: "\r") { line.moveWriterIndex(to: line.writerIndex - 1) }
        if line.readableBytes > 0 { context.fireChannelRead(Self.wrapInboundOut(line)) }
        return .continue
    }

    mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }
}

/// NDJSON out: a `\n` after every frame.
final class LineFrameEncoder: ChannelOutboundHandler, Sendable {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var buffer = unwrapOutboundIn(data)
        buffer.writeInteger(UInt8(ascii: "\n"))
        context.write(wrapOutboundOut(buffer), promise: promise)
    }
}
