import NIOCore

/// Live output a session holds back (right after the greeting, or while a resume replays the
/// journal), in the order it arrived, with its size in bytes.
struct HeldOutput: Equatable {
    struct Item: Equatable {
        /// The broadcast's seq; nil for a reply or a control frame.
        let seq: UInt64?
        let frame: ByteBuffer
    }

    private(set) var items: [Item] = []
    private(set) var bytes = 0

    var count: Int { items.count }

    /// Appends `frame`; returns whether what is held is now over the outbound bound (the
    /// client is then a slow consumer).
    mutating func append(_ frame: ByteBuffer, seq: UInt64?, maxBytes: Int, maxFrames: Int) -> Bool {
        items.append(Item(seq: seq, frame: frame))
        bytes += frame.readableBytes
        return bytes > maxBytes || items.count > maxFrames
    }

    /// Every frame held, in order.
    var frames: [ByteBuffer] { items.map(\.frame) }

    /// The frames to send once a resume has covered every seq up to `seq`: broadcasts the
    /// client already has are left out, replies and control frames never are.
    func frames(after seq: UInt64) -> [ByteBuffer] {
        items.filter { ($0.seq ?? .max) > seq }.map(\.frame)
    }
}

/// What became of a frame offered to a hold.
enum HoldResult: Equatable {
    /// Nothing is held: send it.
    case notHeld
    /// Held, to go out later (or never, if the session closes first).
    case held
    /// Held, and what is held is now over the outbound bound: cut the client.
    case heldOverBound
    /// The start hold would have gone over the outbound bound, so it is over: these frames
    /// (everything it held, the offered one last) go out now as live output. A client is never
    /// cut for what arrived before it could read anything.
    case released([ByteBuffer])
}
