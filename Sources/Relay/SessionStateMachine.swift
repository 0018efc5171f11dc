import NIOCore

/// Guards a session's life: when it greets and registers with the hub, the hold on live output
/// right after the greeting, closing, and unregistering.
///
/// notStarted → holdingLiveOutput (for `initial_hold_ms`, or until the client's first frame) →
/// live → closing(reason) → closed. A session that must authenticate receives no live output
/// until it has, so its hold starts there instead: live → holdingLiveOutput on
/// `authenticated`. Once closing, nothing more is read or written but the last frame. A
/// session whose channel goes away before it closed itself is `disconnected`: frames already
/// read are still handled (a resume that ends later goes on with them), so it keeps its hold.
struct SessionStateMachine {
    enum CloseReason: Equatable {
        /// Its outbound queue went over the bound.
        case slowConsumer
        /// A last frame (too many bad tokens, no token in time) goes out behind everything queued.
        case afterLastFrame
        /// The client half-closed and every frame it sent has been answered.
        case inputClosed
    }

    enum State: Equatable {
        case notStarted
        /// Greeted and registered; live output waits.
        case holdingLiveOutput(HeldOutput)
        /// Greeted and registered; live output flows (unless a resume holds it).
        case live
        /// Registered, and closing the connection.
        case closing(CloseReason)
        /// Unregistered after it began closing.
        case closed(CloseReason)
        /// Unregistered while open: the channel went away on its own. `held` is the start hold
        /// that was still on.
        case disconnected(held: HeldOutput?)
    }

    enum StartAction: Equatable {
        /// Register with the hub and greet; if `holdMilliseconds` is set, release the hold on
        /// live output after that long.
        case greet(holdMilliseconds: Int64?)
        /// Already started: nothing to do.
        case none
    }

    enum StopAction: Equatable {
        case unregister
        case none
    }

    enum CloseAction: Equatable {
        /// Drop what waits in the outbound queue, send `slow_consumer` behind the last complete
        /// frame, close once it is out or after the grace period, and read (and drop) input.
        case cutSlowConsumer
        /// Hand the channel everything queued, then the last frame, then close.
        case sendLastFrameAndClose
        /// Close once everything written so far is flushed.
        case closeWhenFlushed
        /// Already closing: nothing to do.
        case none
    }

    enum ReleaseAction: Equatable {
        /// Write these frames (held since the greeting) and flush.
        case write([ByteBuffer])
        /// Nothing was held at start (or a resume took the hold over).
        case none
    }

    private(set) var state: State = .notStarted

    /// Whether the session has greeted its client.
    var isStarted: Bool {
        if case .notStarted = state { return false }
        return true
    }

    /// Whether the session is in the hub's tables.
    var isRegistered: Bool {
        switch state {
        case .holdingLiveOutput, .live, .closing: true
        case .notStarted, .closed, .disconnected: false
        }
    }

    /// Whether the session has begun closing: nothing more is read or written.
    var isClosing: Bool {
        switch state {
        case .closing, .closed: true
        case .notStarted, .holdingLiveOutput, .live, .disconnected: false
        }
    }

    /// Whether live output is held since the greeting.
    var isHoldingLiveOutput: Bool {
        switch state {
        case .holdingLiveOutput, .disconnected(held: .some): true
        case .notStarted, .live, .closing, .closed, .disconnected(held: .none): false
        }
    }

    /// The connection is ready for the greeting.
    mutating func start(initialHoldMilliseconds: Int) -> StartAction {
        guard case .notStarted = state else { return .none }
        guard initialHoldMilliseconds > 0 else {
            state = .live
            return .greet(holdMilliseconds: nil)
        }
        state = .holdingLiveOutput(HeldOutput())
        return .greet(holdMilliseconds: Int64(initialHoldMilliseconds))
    }

    /// The channel went inactive or the handler was removed.
    mutating func stop() -> StopAction {
        switch state {
        case .holdingLiveOutput(let held):
            state = .disconnected(held: held)
            return .unregister
        case .live:
            state = .disconnected(held: nil)
            return .unregister
        case .closing(let reason):
            state = .closed(reason)
            return .unregister
        case .notStarted, .closed, .disconnected:
            return .none
        }
    }

    /// The session decided to close the connection.
    mutating func close(_ reason: CloseReason) -> CloseAction {
        switch state {
        case .holdingLiveOutput, .live:
            state = .closing(reason)
        case .notStarted, .disconnected:
            // Not (or no longer) registered.
            state = .closed(reason)
        case .closing, .closed:
            return .none
        }
        switch reason {
        case .slowConsumer: return .cutSlowConsumer
        case .afterLastFrame: return .sendLastFrameAndClose
        case .inputClosed: return .closeWhenFlushed
        }
    }

    /// A session that had to authenticate has: its live output starts now, so the hold that
    /// lets an early resume come first starts now too (a session that had to authenticate could
    /// not send `resume` first thing). Returns how long to hold, or nil when there is no hold to
    /// start (the hold is off, or output already flows or is held).
    mutating func authenticated(initialHoldMilliseconds: Int) -> Int64? {
        guard initialHoldMilliseconds > 0, case .live = state else { return nil }
        state = .holdingLiveOutput(HeldOutput())
        return Int64(initialHoldMilliseconds)
    }

    /// The start hold is over (its time is up, or the client sent a frame other than
    /// `resume`): live output flows.
    mutating func releaseStartHold() -> ReleaseAction {
        switch state {
        case .holdingLiveOutput(let held):
            state = .live
            return .write(held.frames)
        case .disconnected(held: .some(let held)):
            state = .disconnected(held: nil)
            return .write(held.frames)
        case .notStarted, .live, .closing, .closed, .disconnected(held: .none):
            return .none
        }
    }

    /// A resume begins: it takes over what is held since the greeting (nil when nothing is),
    /// and live output flows again once the resume ends.
    mutating func resumeStarted() -> HeldOutput? {
        switch state {
        case .holdingLiveOutput(let held):
            state = .live
            return held
        case .disconnected(held: .some(let held)):
            state = .disconnected(held: nil)
            return held
        case .notStarted, .live, .closing, .closed, .disconnected(held: .none):
            return nil
        }
    }

    /// Live output to send: held if the start hold is on. What would take the hold over the
    /// outbound bound ends it instead: everything held goes out (the hold only keeps an early
    /// resume in order; the bound is for what a client does not read, and a client that has
    /// just connected has had no chance to read).
    mutating func hold(_ frame: ByteBuffer, seq: UInt64?, maxBytes: Int, maxFrames: Int) -> HoldResult {
        switch state {
        case .holdingLiveOutput(var held):
            state = .live  // so that `held` is the only reference and appending does not copy
            let over = held.append(frame, seq: seq, maxBytes: maxBytes, maxFrames: maxFrames)
            if over { return .released(held.frames) }
            state = .holdingLiveOutput(held)
            return .held
        case .disconnected(held: .some(var held)):
            state = .disconnected(held: nil)
            let over = held.append(frame, seq: seq, maxBytes: maxBytes, maxFrames: maxFrames)
            if over { return .released(held.frames) }
            state = .disconnected(held: held)
            return .held
        case .notStarted, .live, .closing, .closed, .disconnected(held: .none):
            return .notHeld
        }
    }
}
