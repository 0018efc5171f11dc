import NIOCore

/// A connection's frames not yet handed to its channel, bounded.
///
/// The session hands the channel frames only while the channel is writable (its own buffer
/// below the high-water mark); the rest wait here. So what sits in the channel is at most about
/// one high-water mark of complete frames, and a cut can drop everything still here and put the
/// `slow_consumer` notice right behind the last complete frame the client will receive.
///
/// A frame may come in parts (a large list answer: its head, the rows it shares with other
/// answers, its end), each a buffer of its own here, the parts after the first marked
/// `continuation`. A cut drops whole frames only: the parts of a frame whose first part was
/// handed on already are taken first, to go out ahead of the notice.
struct OutboundQueue {
    private var buffers = CircularBuffer<(buffer: ByteBuffer, frames: Int, continuation: Bool)>()
    /// Bytes and frames waiting here.
    private(set) var bytes = 0
    private(set) var frames = 0

    var isEmpty: Bool { buffers.isEmpty }

    /// What the session must do with a frame it is about to send.
    enum WriteAction: Equatable {
        /// Hand it to the channel now.
        case write
        /// It waits here behind earlier frames or until the channel is writable again.
        case queued
        /// Queued frames plus the channel's own backlog are over the bound: cut the client.
        case overflow
    }

    /// Decides where `buffer` (holding `frames` frames) goes.
    /// - Parameters:
    ///   - channelWritable: the channel is below its high-water mark.
    ///   - channelBacklog: bytes the channel holds that the kernel has not taken.
    ///   - asked: an answer to the client's own request, which waits here even over the bound:
    ///     how many it can have asked for is bounded by the read-ahead
    ///     (`max_pipelined_frames`), and a client that stops reading is cut by the stall
    ///     watch, not for asking.
    mutating func write(
        _ buffer: ByteBuffer,
        frames count: Int,
        channelWritable: Bool,
        channelBacklog: Int,
        maxBytes: Int,
        maxFrames: Int,
        asked: Bool = false,
        continuation: Bool = false
    ) -> WriteAction {
        if buffers.isEmpty, channelWritable { return .write }
        buffers.append((buffer, count, continuation))
        bytes += buffer.readableBytes
        frames += count
        if !asked, bytes + channelBacklog > maxBytes || frames > maxFrames { return .overflow }
        return .queued
    }

    /// The next frame (or part of one: `continuation`) to hand the channel, once it is
    /// writable again.
    mutating func next() -> (buffer: ByteBuffer, continuation: Bool)? {
        guard let first = buffers.popFirst() else { return nil }
        bytes -= first.buffer.readableBytes
        frames -= first.frames
        return (first.buffer, first.continuation)
    }

    /// Takes the parts that finish a frame already begun (the queue's first buffers, when they
    /// are continuations), to hand on at once: before a cut's notice, or a frame of the
    /// transport's own (a WebSocket pong or close), which must not land inside another frame.
    mutating func takeUnfinished() -> [ByteBuffer] {
        var unfinished: [ByteBuffer] = []
        while let first = buffers.first, first.continuation {
            unfinished.append(first.buffer)
            bytes -= first.buffer.readableBytes
            frames -= first.frames
            buffers.removeFirst()
        }
        return unfinished
    }

    /// Drops every frame still waiting (the client is being cut); returns how many. The rest
    /// of a frame begun is taken first (`takeUnfinished`).
    mutating func dropAll() -> Int {
        defer {
            buffers.removeAll()
            bytes = 0
            frames = 0
        }
        return frames
    }
}
