/// How long a connection cut as a slow consumer stays open: until its last frames (what was
/// already handed to the channel, then the `slow_consumer` notice, on WebSocket then the close
/// frame) are out, or until the client has taken nothing for a whole grace period.
///
/// A client that reads, however slowly, gets every frame it was sent and the notice, whole:
/// closing while bytes still wait would cut the frame being written (a line with no end, a
/// TLS record or WebSocket frame broken off) and lose the notice. Its backlog is bounded
/// (nothing is added after the cut), so a reader finishes. One that reads nothing holds the
/// connection for one grace period.
///
/// Once the last frames are written, the output is shut rather than the connection closed:
/// the client may still have requests in flight that the daemon has not read, and closing a
/// socket with unread input makes the kernel reset the connection, throwing away what the
/// client had not received yet, the notice among it. With the output shut, the kernel sends
/// everything and then the end; the daemon reads on (dropping what comes) and closes when the
/// client does, or when it takes nothing more for a grace period.
///
/// idle → draining(since a progress mark) → lingering(since a progress mark) → closed. The
/// handler looks at the connection's progress each grace period (`check`), shuts the output
/// when the last frames are written (`lastFramesWritten`), and closes when told to or when the
/// client's input ends while lingering (`inputEnded`).
struct CloseGraceStateMachine {
    /// How far the client has got: what the daemon still holds for it, and what the client's
    /// kernel has acknowledged (the socket's `tcpi_bytes_acked`; 0 where unknown).
    struct Progress: Equatable {
        var unsentBytes: Int
        var acknowledgedBytes: UInt64
    }

    enum State: Equatable {
        case idle
        case draining(since: Progress)
        /// The last frames are written and the output shut; waiting for the client to close.
        case lingering(since: Progress)
        case closed
    }

    enum CheckAction: Equatable {
        /// The client took something since the last look: look again after another period.
        case checkAgain
        /// Nothing was taken for a whole period (or the connection is gone): close now.
        case close
        /// Closed already: nothing to do.
        case none
    }

    private(set) var state = State.idle

    /// The cut: the last frames were handed to the channel. The handler looks at the
    /// connection again after a grace period.
    mutating func started(_ progress: Progress) {
        guard case .idle = state else { return }
        state = .draining(since: progress)
    }

    /// A grace period has passed: go on while the client makes progress.
    mutating func check(_ progress: Progress) -> CheckAction {
        let since: Progress
        switch state {
        case .draining(let mark), .lingering(let mark): since = mark
        case .idle, .closed: return .none
        }
        let moved = progress.unsentBytes < since.unsentBytes || progress.acknowledgedBytes > since.acknowledgedBytes
        guard moved else {
            state = .closed
            return .close
        }
        if case .lingering = state { state = .lingering(since: progress) } else { state = .draining(since: progress) }
        return .checkAgain
    }

    /// The last frames are written (or failed): true when the handler shuts the output now and
    /// lingers; the grace period's looks go on.
    mutating func lastFramesWritten(_ progress: Progress) -> Bool {
        guard case .draining = state else { return false }
        state = .lingering(since: progress)
        return true
    }

    /// The client closed its side: true when the handler closes now (the output is shut
    /// already, so nothing of it is lost).
    mutating func inputEnded() -> Bool {
        guard case .lingering = state else { return false }
        state = .closed
        return true
    }

    /// The connection went away: stop looking.
    mutating func connectionClosed() {
        state = .closed
    }
}

#if os(Linux)
import Glibc

/// The head of Linux's `struct tcp_info` as raw words, up to `tcpi_bytes_acked` (Glibc's own
/// `tcp_info` ends before it). A kernel older than 4.2 leaves it 0.
struct KernelTCPInfo: Sendable {
    private var words:
        (
            UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
            UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64
        ) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

    /// `tcpi_bytes_acked`, at byte 120.
    var bytesAcknowledged: UInt64 { words.15 }
}
#endif
