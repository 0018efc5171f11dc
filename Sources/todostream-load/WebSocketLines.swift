import NIOCore

/// Lets a `LineConnection` speak to todostreamd over WebSocket (`/events`) at the cost of a
/// plain TCP reader: it sends the upgrade request itself, checks the `101`, then hands each
/// text message to the connection as a line, in place: a message that arrived in one frame is
/// read where it lies in the received bytes, never copied (a TCP read is split into lines the
/// same way). Fragmented messages are reassembled up to `maxMessageBytes`; pings are answered;
/// a close, a bad frame or a refused upgrade closes the connection. Each buffer written becomes
/// one masked text message; what is written before the upgrade completes waits for it.
///
/// NIO's frame decoder is not used on purpose: it makes an object and a pipeline hop per
/// message, which at a million messages a second costs the load tool more CPU than the daemon
/// spends, on the same two cores, and would make WebSocket look slower than it is. For the
/// same reason messages are not copied into a buffer of lines for the connection to split
/// again: that cost a third more CPU per message than a TCP line.
final class WebSocketLines: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        case awaitingUpgrade(pending: [(ByteBuffer, EventLoopPromise<Void>?)])
        case open
        case closed
    }

    private let host: String
    /// Where the messages go: the next handler, called directly.
    private let connection: LineConnection
    private let maxMessageBytes = 1 << 20
    private let maxResponseHeadBytes = 16 << 10
    private var state = State.awaitingUpgrade(pending: [])
    /// Bytes read and not yet a whole frame (or, before the upgrade, the response head).
    private var input: ByteBuffer?
    /// A text message whose final fragment has not arrived yet.
    private var fragments: ByteBuffer?

    init(host: String, connection: LineConnection) {
        self.host = host
        self.connection = connection
    }

    func channelActive(context: ChannelHandlerContext) {
        let request =
            "GET /events HTTP/1.1\r\nHost: \(host)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dG9kb3N0cmVhbS1sb2FkMQ==\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n"
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(string: request)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        if var held = input {
            input = nil
            held.writeBuffer(&buffer)
            buffer = held
        }
        if case .awaitingUpgrade(let pending) = state {
            guard let end = buffer.readableBytesView.firstRange(of: [0x0D, 0x0A, 0x0D, 0x0A]) else {
                guard buffer.readableBytes <= maxResponseHeadBytes else { return fail(context) }
                input = buffer
                return
            }
            let head = buffer.readString(length: end.upperBound - buffer.readerIndex) ?? ""
            guard head.hasPrefix("HTTP/1.1 101"), head.lowercased().contains("upgrade: websocket") else {
                return fail(context)
            }
            state = .open
            for (message, promise) in pending { writeMessage(context, message, promise: promise) }
            if !pending.isEmpty { context.flush() }
        }
        guard case .open = state else { return }
        let now = connection.beginRead(bytes: buffer.readableBytes)
        while true {
            handWholeTextMessages(&buffer, now: now)
            // Anything else (a fragment, a ping, a close, an incomplete frame) the slow way.
            guard let frame = nextFrame(&buffer) else { break }
            guard handle(frame, now: now, context: context) else { return fail(context) }
        }
        if buffer.readableBytes > 0 { input = buffer }
    }

    /// Hands the connection the complete, unmasked text messages of one frame each at the
    /// front of `buffer`, where they lie in the received bytes (the common case: every
    /// broadcast is one such frame). Stops at the first frame that is anything else or
    /// incomplete, or while a fragmented message is being put together.
    private func handWholeTextMessages(_ buffer: inout ByteBuffer, now: UInt64) {
        guard fragments == nil else { return }
        let consumed = buffer.withUnsafeReadableBytes { raw -> Int in
            var offset = 0
            // FIN and the text opcode, no mask (a server never masks), all of it here.
            while let header = Self.header(raw, at: offset), header.first == 0x81, !header.masked,
                header.length <= UInt64(min(maxMessageBytes, raw.count - offset - header.size))
            {
                let start = offset + header.size
                let end = start + Int(header.length)
                connection.handleLine(UnsafeRawBufferPointer(rebasing: raw[start..<end]), now: now)
                offset = end
            }
            return offset
        }
        buffer.moveReaderIndex(forwardBy: consumed)
    }

    /// Hands the connection one whole message.
    private func hand(_ message: ByteBuffer, now: UInt64) {
        message.withUnsafeReadableBytes { connection.handleLine($0, now: now) }
    }

    /// A frame's header: its first byte (FIN and opcode), whether a mask follows, the header's
    /// size with the mask, and the payload's length.
    private struct Header {
        var first: UInt8
        var masked: Bool
        var size: Int
        var length: UInt64
    }

    /// The header of the frame at `offset`, or nil when it has not all arrived.
    private static func header(_ raw: UnsafeRawBufferPointer, at offset: Int) -> Header? {
        let available = raw.count - offset
        guard available >= 2 else { return nil }
        let second = raw[offset + 1]
        var header = Header(first: raw[offset], masked: second & 0x80 != 0, size: 2, length: UInt64(second & 0x7F))
        if header.length >= 126 {
            header.size = header.length == 126 ? 4 : 10
            guard available >= header.size else { return nil }
            header.length = raw[offset + 2..<offset + header.size].reduce(0) { $0 << 8 | UInt64($1) }
        }
        if header.masked { header.size += 4 }
        return header
    }

    private struct Frame {
        var fin: Bool
        var opcode: UInt8
        var payload: ByteBuffer
    }

    /// The next whole frame of `buffer` (unmasked: a server masks nothing), or nil when it has
    /// not all arrived.
    private func nextFrame(_ buffer: inout ByteBuffer) -> Frame? {
        guard let header = buffer.withUnsafeReadableBytes({ Self.header($0, at: 0) }) else { return nil }
        guard header.length <= UInt64(maxMessageBytes) else {
            // Larger than anything kept: report it as a frame the caller refuses.
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return Frame(fin: true, opcode: 0xFF, payload: ByteBuffer())
        }
        let length = Int(header.length)
        guard buffer.readableBytes >= header.size + length,
            let payload = buffer.getSlice(at: buffer.readerIndex + header.size, length: length)
        else { return nil }
        buffer.moveReaderIndex(forwardBy: header.size + length)
        return Frame(fin: header.first & 0x80 != 0, opcode: header.first & 0x0F, payload: payload)
    }

    /// False when the connection must close.
    private func handle(_ frame: Frame, now: UInt64, context: ChannelHandlerContext) -> Bool {
        var payload = frame.payload
        switch frame.opcode {
        case 0x1, 0x0:
            if frame.opcode == 0x1, fragments != nil { return false }
            if frame.opcode == 0x0, fragments == nil { return false }
            if frame.fin, fragments == nil {
                hand(payload, now: now)
                return true
            }
            var message = fragments ?? context.channel.allocator.buffer(capacity: payload.readableBytes)
            message.writeBuffer(&payload)
            guard message.readableBytes <= maxMessageBytes else { return false }
            if frame.fin {
                fragments = nil
                hand(message, now: now)
            } else {
                fragments = message
            }
            return true
        case 0x9:
            var pong = context.channel.allocator.buffer(capacity: payload.readableBytes + 6)
            Self.frame(opcode: 0xA, payload: &payload, into: &pong)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
            return true
        case 0xA:
            return true
        default:
            // A close, a binary message or an opcode that no server may send.
            return false
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let message = unwrapOutboundIn(data)
        switch state {
        case .awaitingUpgrade(var pending):
            pending.append((message, promise))
            state = .awaitingUpgrade(pending: pending)
        case .open:
            writeMessage(context, message, promise: promise)
        case .closed:
            promise?.fail(ChannelError.ioOnClosedChannel)
        }
    }

    func flush(context: ChannelHandlerContext) {
        if case .open = state { context.flush() }
    }

    private func writeMessage(_ context: ChannelHandlerContext, _ message: ByteBuffer, promise: EventLoopPromise<Void>?)
    {
        var payload = message
        var framed = context.channel.allocator.buffer(capacity: payload.readableBytes + 14)
        Self.frame(opcode: 0x1, payload: &payload, into: &framed)
        context.write(wrapOutboundOut(framed), promise: promise)
    }

    /// Writes one final, masked client frame (RFC 6455 §5.2) of `payload` into `out`.
    private static func frame(opcode: UInt8, payload: inout ByteBuffer, into out: inout ByteBuffer) {
        let length = payload.readableBytes
        out.writeInteger(0x80 | opcode)
        if length < 126 {
            out.writeInteger(UInt8(0x80 | length))
        } else if length <= Int(UInt16.max) {
            out.writeInteger(UInt8(0x80 | 126))
            out.writeInteger(UInt16(length))
        } else {
            out.writeInteger(UInt8(0x80 | 127))
            out.writeInteger(UInt64(length))
        }
        let mask = UInt32.random(in: .min ... .max)
        out.writeInteger(mask)
        // The payload is copied once and masked where it lands.
        let start = out.writerIndex - out.readerIndex
        out.writeBuffer(&payload)
        out.withUnsafeMutableReadableBytes { raw in
            for index in 0..<length {
                raw[start + index] ^= UInt8(truncatingIfNeeded: mask >> (24 - 8 * (index & 3)))
            }
        }
    }

    private func fail(_ context: ChannelHandlerContext) {
        if case .awaitingUpgrade(let pending) = state {
            for (_, promise) in pending { promise?.fail(ChannelError.ioOnClosedChannel) }
        }
        state = .closed
        input = nil
        fragments = nil
        context.close(promise: nil)
    }
}
