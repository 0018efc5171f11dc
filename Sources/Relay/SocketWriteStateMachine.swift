import NIOCore

/// Tells a session that writes to its socket itself to leave it to the channel from now on.
/// Sent by the line decoder when the input ends (the channel may be torn down, its socket
/// closed already), and by the WebSocket transport handler before a frame of its own (a pong,
/// a close, after which no data frame may follow) or a frame read after the channel went
/// inactive.
struct LeaveSocket {}

/// Where a session's writes go, on plain TCP and uncompressed plain WebSocket: straight to
/// its socket, or through the channel.
///
/// A session whose channel holds nothing of its earlier writes gathers its frames here and, at
/// the flush, sends them with one system call of its own (`send` or `sendmsg`), past NIO's
/// pipeline and its pending-write bookkeeping. What the kernel does not take goes to the
/// channel, and from then on everything goes behind it through the channel, until the channel
/// has written all of it and nothing waits in the session's own queue: then writes go straight
/// to the socket again. Order is kept because the two never hold bytes at the same time.
/// (docs/DECISIONS.md, "Plain TCP and WebSocket sessions write to their socket".)
///
/// Sessions on TLS and compressed WebSocket, whose bytes the pipeline transforms, start
/// `channelOnly`.
/// No I/O here: the session carries out the actions.
struct SocketWriteStateMachine {
    private enum State {
        /// Everything goes through the channel (no socket of our own, or the session closes).
        case channelOnly
        /// The channel holds nothing unsent: writes gather here until the flush.
        case direct(gathered: [ByteBuffer])
        /// The channel holds `unfinished` writes that it has not completed yet.
        case throughChannel(unfinished: Int)
        /// Only while a gathered write is being appended (keeps the array unshared).
        case modifying
    }

    private var state: State

    init(direct: Bool) {
        state = direct ? .direct(gathered: []) : .channelOnly
    }

    /// Bytes gathered and not yet sent.
    private(set) var gatheredBytes = 0

    enum WriteAction: Equatable {
        /// Gathered; goes out at the next flush.
        case gathered
        /// Goes through the channel (its queue and water marks as usual).
        case channel
        /// Gathered with what is gathered already, it would make more than the limit: send
        /// those first (`flush`), then write it again.
        case sendGatheredFirst
    }

    /// A frame (or run of frames) to write. What is gathered stays at most `limit` bytes (the
    /// outbound bound) unless one buffer alone is larger: what the kernel does not take of a
    /// send goes to the channel whole, where a cut can no longer drop it, so gathering without
    /// a limit would let a connection hold any amount past its bound.
    mutating func write(_ buffer: ByteBuffer, gatheringAtMost limit: Int = .max) -> WriteAction {
        switch state {
        case .direct(var gathered):
            if !gathered.isEmpty, gatheredBytes + buffer.readableBytes > limit { return .sendGatheredFirst }
            state = .modifying
            gathered.append(buffer)
            gatheredBytes += buffer.readableBytes
            state = .direct(gathered: gathered)
            return .gathered
        case .channelOnly, .throughChannel:
            return .channel
        case .modifying:
            preconditionFailure("reentrant write")
        }
    }

    /// Whether writes made now go through the channel, so the session must count them
    /// (`handedToChannel`) to learn when the channel holds nothing again.
    var countsChannelWrites: Bool {
        if case .channelOnly = state { return false }
        return true
    }

    /// Whether a write made now would be gathered for the socket.
    var writesToSocket: Bool {
        if case .direct = state { return true }
        return false
    }

    /// Whether frames are gathered and not yet sent.
    var hasGathered: Bool {
        if case .direct(let gathered) = state { return !gathered.isEmpty }
        return false
    }

    enum FlushAction {
        /// Nothing gathered.
        case none
        /// Send these, in order, with one system call; then report with `sent(_:of:)`.
        case send([ByteBuffer])
    }

    mutating func flush() -> FlushAction {
        guard case .direct(let gathered) = state, !gathered.isEmpty else { return .none }
        state = .direct(gathered: [])
        gatheredBytes = 0
        return .send(gathered)
    }

    enum SentAction: Equatable {
        /// The kernel took everything.
        case done
        /// Hand these (what the kernel did not take, in order) to the channel and flush; each
        /// write counts as `handedToChannel` already.
        case handToChannel([ByteBuffer])
    }

    /// The result of a send: `written` bytes taken by the kernel (0 when the socket was full
    /// or the call failed: the channel then writes it all, and meets any error itself).
    mutating func sent(_ written: Int, of buffers: [ByteBuffer]) -> SentAction {
        var skip = max(0, written)
        var rest: [ByteBuffer] = []
        for buffer in buffers {
            if skip >= buffer.readableBytes {
                skip -= buffer.readableBytes
                continue
            }
            var remaining = buffer
            remaining.moveReaderIndex(forwardBy: skip)
            skip = 0
            rest.append(remaining)
        }
        guard !rest.isEmpty else { return .done }
        switch state {
        case .direct:
            // Nothing is gathered: `flush()` took it all, and nothing was written since.
            state = .throughChannel(unfinished: rest.count)
        case .throughChannel(let unfinished):
            state = .throughChannel(unfinished: unfinished + rest.count)
        case .channelOnly:
            break
        case .modifying:
            preconditionFailure("reentrant send")
        }
        return .handToChannel(rest)
    }

    /// A write went to the channel (while `countsChannelWrites`).
    mutating func handedToChannel() {
        switch state {
        case .direct(let gathered):
            // The gathered frames were flushed first (`hasGathered` is checked before); from now
            // on the channel holds bytes.
            precondition(gathered.isEmpty, "channel write with frames gathered")
            state = .throughChannel(unfinished: 1)
        case .throughChannel(let unfinished):
            state = .throughChannel(unfinished: unfinished + 1)
        case .channelOnly:
            break
        case .modifying:
            preconditionFailure("reentrant hand-over")
        }
    }

    /// A write handed to the channel completed (written, or failed because the channel
    /// closed). `queueEmpty`: nothing waits in the session's own queue either.
    mutating func channelWriteCompleted(queueEmpty: Bool) {
        guard case .throughChannel(let unfinished) = state else { return }
        if unfinished <= 1, queueEmpty {
            state = .direct(gathered: [])
        } else {
            state = .throughChannel(unfinished: max(0, unfinished - 1))
        }
    }

    /// The session closes (or its socket did): the channel does the rest; whatever is gathered
    /// is returned, to go to the channel ahead of the last frames.
    mutating func close() -> [ByteBuffer] {
        defer {
            state = .channelOnly
            gatheredBytes = 0
        }
        if case .direct(let gathered) = state { return gathered }
        return []
    }
}
