import NIOCore

/// Server-to-client WebSocket text frames written by the relay itself (RFC 6455 §5.2: FIN,
/// opcode text, no mask, the payload length in 7, 7+16 or 7+64 bits).
///
/// A run of broadcasts goes to every WebSocket subscriber without compression as the same
/// bytes, so the hub frames it once and every such session writes it as it is; the transport
/// handler recognises such a buffer by its first byte (`finalText`, which no JSON line starts
/// with) and passes it on past NIO's frame encoder.
enum WebSocketFraming {
    /// The first byte of an unfragmented, uncompressed text frame: FIN and opcode 1.
    static let finalText: UInt8 = 0x81

    /// The lines (each one JSON object, with or without its trailing newline) as consecutive
    /// text frames in one buffer.
    static func textFrames(_ lines: [ByteBuffer]) -> ByteBuffer {
        var frames = ByteBuffer()
        frames.reserveCapacity(lines.reduce(0) { $0 + $1.readableBytes + 10 })
        for var line in lines {
            if line.readableBytesView.last == UInt8(ascii: "\n") {
                line.moveWriterIndex(to: line.writerIndex - 1)
            }
            writeHeader(payloadLength: line.readableBytes, into: &frames)
            frames.writeImmutableBuffer(line)
        }
        return frames
    }

    static func writeHeader(payloadLength length: Int, into buffer: inout ByteBuffer) {
        buffer.writeInteger(finalText)
        switch length {
        case ..<126:
            buffer.writeInteger(UInt8(length))
        case ...Int(UInt16.max):
            buffer.writeInteger(UInt8(126))
            buffer.writeInteger(UInt16(length))
        default:
            buffer.writeInteger(UInt8(127))
            buffer.writeInteger(UInt64(length))
        }
    }
}
