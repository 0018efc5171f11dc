import NIOCore

/// RFC 6455 §5.2: a 64-bit payload length must have its most significant bit clear. NIO's frame
/// decoder reads such a length as too large and closes 1009 (message too big); it is a protocol
/// violation (1002). This handler sits before the decoder, follows the frames' headers in the
/// bytes as they pass (it keeps at most one header, never a payload), and on such a length
/// drops the rest of the input and tells the transport handler (`WebSocketProtocolViolation`),
/// which closes 1002.
final class WebSocketLengthCheck: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private var scanner = WebSocketHeaderScanner()

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        switch scanner.scan(buffer.readableBytesView) {
        case .valid:
            context.fireChannelRead(data)
        case .violation:
            context.fireUserInboundEventTriggered(WebSocketProtocolViolation())
        case .failed:
            break
        }
    }
}

/// Sent by `WebSocketLengthCheck` to the transport handler: close 1002.
struct WebSocketProtocolViolation: Sendable {}

/// Where the frames' headers are in a WebSocket byte stream, as values (no I/O, no buffer).
struct WebSocketHeaderScanner {
    enum Verdict: Equatable {
        case valid
        /// A header with a 64-bit length whose top bit is set: the stream is broken from here.
        case violation
        /// Broken before: nothing more is read.
        case failed
    }

    private enum State {
        /// Reading a header: `read` bytes of it so far, its second byte, its length so far.
        case header(read: Int, second: UInt8, length: UInt64)
        /// Inside a payload: the bytes of it still to pass.
        case payload(UInt64)
        case failed
    }

    private var state = State.header(read: 0, second: 0, length: 0)

    mutating func scan(_ bytes: ByteBufferView) -> Verdict {
        var index = bytes.startIndex
        while index < bytes.endIndex {
            switch state {
            case .failed:
                return .failed
            case .payload(let remaining):
                let available = UInt64(bytes.endIndex - index)
                if remaining > available {
                    state = .payload(remaining - available)
                    return .valid
                }
                index += Int(remaining)
                state = .header(read: 0, second: 0, length: 0)
            case .header(var read, var second, var length):
                let byte = bytes[index]
                index += 1
                if read == 1 {
                    second = byte
                } else if read >= 2, read < 2 + Self.extendedBytes(second) {
                    if read == 2, Self.extendedBytes(second) == 8, byte & 0x80 != 0 {
                        state = .failed
                        return .violation
                    }
                    length = length << 8 | UInt64(byte)
                }
                read += 1
                guard read >= 2 else {
                    state = .header(read: read, second: second, length: length)
                    continue
                }
                let extended = Self.extendedBytes(second)
                if extended == 0 { length = UInt64(second & 0x7F) }
                guard read == 2 + extended + (second & 0x80 != 0 ? 4 : 0) else {
                    state = .header(read: read, second: second, length: length)
                    continue
                }
                state = length == 0 ? .header(read: 0, second: 0, length: 0) : .payload(length)
            }
        }
        if case .failed = state { return .failed }
        return .valid
    }

    /// The bytes of the extended length that a header's second byte announces.
    private static func extendedBytes(_ second: UInt8) -> Int {
        switch second & 0x7F {
        case 126: return 2
        case 127: return 8
        default: return 0
        }
    }
}
