import NIOCore

/// The fan-out message sent through the peers: `@`, the send time (19 digits of monotonic
/// nanoseconds), `:`, the message number (10 digits), a space, then filler up to the payload
/// size. It has no CR or LF, so every receiver sees it as one line of its own.
enum PeerPayload {
    static let headerBytes = 32

    static func write(into buffer: inout ByteBuffer, time: UInt64, seq: Int, size: Int) {
        buffer.writeInteger(UInt8(ascii: "@"))
        buffer.writeDigits(time, count: 19)
        buffer.writeInteger(UInt8(ascii: ":"))
        buffer.writeDigits(UInt64(seq), count: 10)
        buffer.writeInteger(UInt8(ascii: " "))
        let filler = max(size - headerBytes, 0)
        buffer.writeRepeatingByte(UInt8(ascii: "x"), count: filler)
    }

    /// Reads (time, seq) from a line starting with `@`.
    static func parse(_ line: UnsafeRawBufferPointer) -> (time: UInt64, seq: UInt64)? {
        guard line.count >= headerBytes - 1, let (time, timeEnd) = line.decimal(at: 1), timeEnd == 20,
            let (seq, _) = line.decimal(at: 21)
        else { return nil }
        return (time, seq)
    }
}
