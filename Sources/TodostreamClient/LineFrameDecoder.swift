import NIOCore

/// A frame from the daemon, as the transport delimited it.
enum InboundFrame: Sendable {
    /// One JSON object.
    case frame(ByteBuffer)
    /// A frame over the limit, skipped unread: its first bytes (at most `headBytes`, enough
    /// for the envelope the daemon writes before the payload) and its length.
    case tooLarge(head: ByteBuffer, length: Int)

    /// How much of a frame too large is kept.
    static let headBytes = 1024
}

/// Splits NDJSON into lines: one frame per line, without its `\n` (and a `\r` before it);
/// blank lines are skipped. A line longer than `maxLineBytes` is not buffered whole: past the
/// limit the rest of it is dropped as it comes, up to its newline, and it is reported as
/// `.tooLarge` (the daemon's lines stay well delimited: the next one is read as usual). Pure,
/// over the buffer the owner accumulates; each byte is searched for the newline once.
struct LineSplitter: Sendable {
    let maxLineBytes: Int

    private enum State: Sendable {
        /// Reading a line: how many of its bytes have been searched for its newline already.
        case reading(searched: Int)
        /// Dropping a line over the limit up to its newline: its head and its length so far.
        case discarding(head: ByteBuffer, length: Int)
    }

    private var state = State.reading(searched: 0)

    init(maxLineBytes: Int) {
        self.maxLineBytes = max(1, maxLineBytes)
    }

    /// How many bytes of the line being read were searched for its newline: the next search
    /// starts there.
    var searched: Int {
        if case .reading(let searched) = state { return searched }
        return 0
    }

    /// The next frame in `buffer` (whose bytes up to it are consumed), or nil when it needs
    /// more bytes (those it read past are consumed when they are dropped).
    mutating func next(from buffer: inout ByteBuffer) -> InboundFrame? {
        while true {
            let view = buffer.readableBytesView
            switch state {
            case .reading(let searched):
                let start = view.index(view.startIndex, offsetBy: min(searched, view.count))
                guard let newline = view[start...].firstIndex(of: UInt8(ascii: "\n")) else {
                    guard view.count > maxLineBytes else {
                        state = .reading(searched: view.count)
                        return nil
                    }
                    // Over the limit with no end in sight: keep the head, drop the rest.
                    state = .discarding(
                        head: ByteBuffer(bytes: view.prefix(InboundFrame.headBytes)),
                        length: view.count
                    )
                    buffer.moveReaderIndex(forwardBy: view.count)
                    return nil
                }
                let length = newline - view.startIndex
                state = .reading(searched: 0)
                guard length <= maxLineBytes else {
                    let head = ByteBuffer(bytes: view.prefix(min(InboundFrame.headBytes, length)))
                    buffer.moveReaderIndex(forwardBy: length + 1)
                    return .tooLarge(head: head, length: length)
                }
                guard var line = buffer.readSlice(length: length) else { return nil }
                buffer.moveReaderIndex(forwardBy: 1)
                if line.readableBytesView.last == UInt8(ascii: "\r") { line.moveWriterIndex(to: line.writerIndex - 1) }
                if line.readableBytes > 0 { return .frame(line) }
            case .discarding(let head, let length):
                guard let newline = view.firstIndex(of: UInt8(ascii: "\n")) else {
                    state = .discarding(head: head, length: length + view.count)
                    buffer.moveReaderIndex(forwardBy: view.count)
                    return nil
                }
                let rest = newline - view.startIndex
                buffer.moveReaderIndex(forwardBy: rest + 1)
                state = .reading(searched: 0)
                return .tooLarge(head: head, length: length + rest)
            }
        }
    }
}

/// NDJSON in, as `LineSplitter` splits it.
struct LineFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = InboundFrame

    private var splitter: LineSplitter

    init(maxLineBytes: Int) {
        splitter = LineSplitter(maxLineBytes: maxLineBytes)
    }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let frame = splitter.next(from: &buffer) else { return .needMoreData }
        context.fireChannelRead(Self.wrapInboundOut(frame))
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
