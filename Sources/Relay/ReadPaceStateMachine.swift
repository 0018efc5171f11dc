import NIOCore

/// When a paced reader (`CutInputDrain`) reads, as values: at most one read per `pace`, and at
/// most one waiting however often reads are asked for. The handler tells it when a read is
/// asked for and when a waiting one's time has come, and does what it returns. It keeps no
/// clock: the handler passes the time.
struct ReadPaceStateMachine: Sendable {
    enum ReadAction: Equatable, Sendable {
        /// Read now.
        case read
        /// Read at this time (schedule it; `scheduledTimeCame` then says whether to).
        case readAt(NIODeadline)
        /// A read is already waiting, or the reader is gone: nothing to do.
        case none
    }

    private enum State: Equatable {
        /// No read waits; the last one was made then (nil: none yet).
        case idle(lastRead: NIODeadline?)
        /// A read waits for its time.
        case waiting
        /// The reader is gone.
        case stopped
    }

    let pace: TimeAmount
    private var state = State.idle(lastRead: nil)

    init(pace: TimeAmount) {
        self.pace = pace
    }

    /// A read was asked for at `now`.
    mutating func readRequested(now: NIODeadline) -> ReadAction {
        guard case .idle(let lastRead) = state else { return .none }
        if let lastRead, now < lastRead + pace {
            state = .waiting
            return .readAt(lastRead + pace)
        }
        state = .idle(lastRead: now)
        return .read
    }

    /// The time of a waiting read came at `now`: true when it is to be made.
    mutating func scheduledTimeCame(now: NIODeadline) -> Bool {
        guard case .waiting = state else { return false }
        state = .idle(lastRead: now)
        return true
    }

    /// The reader is gone: a waiting read is not made.
    mutating func stopped() {
        state = .stopped
    }
}
