import NIOCore

/// Splits a byte stream into lines. A `\r` before the `\n` is dropped, blank lines are
/// skipped, and a line longer than `maxFrameBytes` is discarded as it arrives (never buffered
/// whole) and reported once as `.tooLarge`.
struct LineFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = FrameEvent

    let maxFrameBytes: Int
    private var discarding = false
    /// How far the current (incomplete) line has been scanned already.
    private var scanned = 0

    init(maxFrameBytes: Int) { self.maxFrameBytes = maxFrameBytes }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        let view = buffer.readableBytesView
        let start = view.startIndex
        if let newline = view[(start + scanned)...].firstIndex(of: UInt8(ascii: "\n")) {
            let length = newline - start
            scanned = 0
            if discarding {
                discarding = false
                buffer.moveReaderIndex(forwardBy: length + 1)
                return .continue
            }
            guard var line = buffer.readSlice(length: length) else { return .needMoreData }
            buffer.moveReaderIndex(forwardBy: 1)
            if line.readableBytesView.last == UInt8(ascii: "\r") { line.moveWriterIndex(to: line.writerIndex - 1) }
            // Over the limit is refused whatever it holds (blank too), as a line that is still
            // incomplete when it passes the limit is, so the answer does not depend on how the
            // bytes arrived.
            if line.readableBytes > maxFrameBytes {
                context.fireChannelRead(NIOAny(FrameEvent.tooLarge))
                return .continue
            }
            if line.readableBytesView.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { return .continue }
            context.fireChannelRead(NIOAny(FrameEvent.frame(line)))
            return .continue
        }
        // No newline yet.
        if discarding {
            buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
            scanned = 0
            return .needMoreData
        }
        if buffer.readableBytes > maxFrameBytes + 1 {
            // Too long already: drop what we have and everything up to the next newline.
            discarding = true
            buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
            scanned = 0
            context.fireChannelRead(NIOAny(FrameEvent.tooLarge))
            return .needMoreData
        }
        scanned = buffer.readableBytes
        return .needMoreData
    }

    mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        // The input has ended: the client closed its side, or the channel is being torn down and
        // NIO has closed the socket already. A session that writes to its socket stops here.
        context.fireUserInboundEventTriggered(LeaveSocket())
        // A last line without its newline is still a frame.
        while try decode(context: context, buffer: &buffer) == .continue {}
        if !discarding, buffer.readableBytes > 0 {
            var line = buffer.readSlice(length: buffer.readableBytes) ?? ByteBuffer()
            if line.readableBytesView.last == UInt8(ascii: "\r") { line.moveWriterIndex(to: line.writerIndex - 1) }
            if line.readableBytes > maxFrameBytes {
                context.fireChannelRead(NIOAny(FrameEvent.tooLarge))
            } else if !line.readableBytesView.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) {
                context.fireChannelRead(NIOAny(FrameEvent.frame(line)))
            }
        }
        buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
        return .needMoreData
    }
}
