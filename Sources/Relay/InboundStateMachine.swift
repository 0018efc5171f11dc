import NIOCore

/// Guards the order in which a session works through what its client sends: frames read ahead
/// and waiting, requests with the sequencer, the read-ahead limit (reads stop while it is full),
/// and the client's half-close (the session closes once everything it sent is answered).
///
/// Consecutive requests overlap: while requests are in flight the next queued frame may join
/// them if it is a request too; anything else waits at the head of the queue until every one
/// is answered.
struct InboundStateMachine {
    enum State: Equatable {
        /// No request is in flight: the next queued frame is handled on its own.
        case idle
        /// `inFlight` requests are with the sequencer; the next queued frame may join them.
        case pipelining(inFlight: Int)
        /// `inFlight` requests are with the sequencer and the first queued frame cannot join
        /// them: it waits until they are all answered (and is not looked at again meanwhile).
        case headWaiting(inFlight: Int)
    }

    enum Reads: Equatable {
        case flowing
        /// A read was refused while the read-ahead was full; one is owed once it is not.
        case held
    }

    enum Input: Equatable {
        case open
        /// The client half-closed its side.
        case closed
    }

    enum ReadAction: Equatable {
        case read
        /// Do not read now.
        case none
    }

    enum NextAction {
        /// Handle this frame (taken off the queue); report a request it submits with
        /// `requestSubmitted`.
        case handle(FrameEvent)
        /// See whether this frame (still queued) is a request that can join those in flight,
        /// then report `headJoined` or `headMustWait`.
        case tryJoining(FrameEvent)
        /// Nothing to handle now.
        case wait
    }

    enum DrainedAction: Equatable {
        /// The client half-closed and everything it sent is answered: close.
        case close
        /// Read again: the read-ahead has room.
        case read
        case none
    }

    private(set) var state: State = .idle
    private(set) var reads: Reads = .flowing
    private(set) var input: Input = .open
    private var queue = CircularBuffer<FrameEvent>()

    var queuedFrames: Int { queue.count }

    /// Whether nothing is queued and no request is in flight.
    var isIdle: Bool { state == .idle && queue.isEmpty }

    /// A frame arrived from the client.
    mutating func frameReceived(_ frame: FrameEvent) {
        queue.append(frame)
    }

    /// The pipeline asks to read more. `maxQueued`: the read-ahead limit.
    mutating func readRequested(maxQueued: Int) -> ReadAction {
        guard queue.count < maxQueued else {
            reads = .held
            return .none
        }
        return .read
    }

    /// The client half-closed its side.
    mutating func inputClosed() {
        input = .closed
    }

    /// The next thing to do with the queue, while nothing else (a resume, closing) pauses it.
    mutating func nextFrame(maxInFlight: Int) -> NextAction {
        guard let head = queue.first else { return .wait }
        switch state {
        case .idle:
            queue.removeFirst()
            return .handle(head)
        case .pipelining(let inFlight) where inFlight < maxInFlight:
            return .tryJoining(head)
        case .pipelining, .headWaiting:
            return .wait
        }
    }

    /// The head of the queue joined the requests in flight.
    mutating func headJoined() {
        guard case .pipelining(let inFlight) = state, !queue.isEmpty else { return }
        queue.removeFirst()
        state = .pipelining(inFlight: inFlight + 1)
    }

    /// The head of the queue cannot join the requests in flight.
    mutating func headMustWait() {
        guard case .pipelining(let inFlight) = state else { return }
        state = .headWaiting(inFlight: inFlight)
    }

    /// A frame being handled submitted a request to the sequencer.
    mutating func requestSubmitted() {
        switch state {
        case .idle: state = .pipelining(inFlight: 1)
        case .pipelining(let inFlight): state = .pipelining(inFlight: inFlight + 1)
        case .headWaiting(let inFlight): state = .headWaiting(inFlight: inFlight + 1)
        }
    }

    /// The sequencer answered one request in flight.
    mutating func requestAnswered() {
        switch state {
        case .idle:
            break
        case .pipelining(let inFlight):
            state = inFlight > 1 ? .pipelining(inFlight: inFlight - 1) : .idle
        case .headWaiting(let inFlight):
            state = inFlight > 1 ? .headWaiting(inFlight: inFlight - 1) : .idle
        }
    }

    /// The session went through the queue as far as it could. `paused`: a resume is running or
    /// the session is closing.
    mutating func drained(paused: Bool, maxQueued: Int) -> DrainedAction {
        if input == .closed, !paused, isIdle { return .close }
        if reads == .held, queue.count < maxQueued {
            reads = .flowing
            return .read
        }
        return .none
    }

    /// The session is being cut: input is read (and dropped) again, so the close is orderly.
    mutating func readsResumedForClose() -> ReadAction {
        guard reads == .held else { return .none }
        reads = .flowing
        return .read
    }
}
