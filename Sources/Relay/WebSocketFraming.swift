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

    /// A line that comes in parts, as one text frame still in parts: the frame's header with
    /// the first part, then the others, the last without its newline. The first part starts with
    /// `finalText`, so the transport handler passes it on as framed; the others must be written
    /// past it.
    static func textFrame(parts: [ByteBuffer]) -> [ByteBuffer] {
        guard let first = parts.first else { return [] }
        var parts = parts
        if let end = parts.indices.last, parts[end].readableBytesView.last == UInt8(ascii: "\n") {
            parts[end].moveWriterIndex(to: parts[end].writerIndex - 1)
        }
        var head = ByteBuffer()
        head.reserveCapacity(first.readableBytes + 10)
        writeHeader(payloadLength: parts.reduce(0) { $0 + $1.readableBytes }, into: &head)
        head.writeImmutableBuffer(parts[0])
        parts[0] = head
        return parts
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
