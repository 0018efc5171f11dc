/// Reloads one at a time, off the signal loop: a SIGHUP while one runs makes one more after it
/// (however many came), and a stop ends it all. The signal loop never waits for a reload, so a
/// slow one (a large token list, a client CA bundle, a config path that blocks) cannot hold a
/// stop signal back, and a burst of SIGHUPs cannot crowd one out.
///
/// idle → running → (runningThenAgain →) running → idle; stop: idle → stopped, running →
/// stopping → stopped once the reload ends.
struct ReloadStateMachine {
    enum State: Equatable {
        case idle
        case running
        /// Running, and another SIGHUP came: one more reload after this one.
        case runningThenAgain
        /// A stop came while a reload ran: nothing more starts.
        case stopping
        case stopped
    }

    enum RequestAction: Equatable {
        /// Start a reload.
        case start
        /// One runs (the request is folded into the one after it) or the daemon stops.
        case none
    }

    enum FinishAction: Equatable {
        /// Reload again: SIGHUP came while this one ran.
        case runAgain
        /// Done: nothing waits.
        case none
        /// Done, and a stop waits for it.
        case wakeStop
    }

    enum StopAction: Equatable {
        /// A reload runs: wait for it (a bounded time) before stopping.
        case waitForRunning
        case none
    }

    private(set) var state: State = .idle

    mutating func requested() -> RequestAction {
        switch state {
        case .idle:
            state = .running
            return .start
        case .running, .runningThenAgain:
            state = .runningThenAgain
            return .none
        case .stopping, .stopped:
            return .none
        }
    }

    mutating func finished() -> FinishAction {
        switch state {
        case .running:
            state = .idle
            return .none
        case .runningThenAgain:
            state = .running
            return .runAgain
        case .stopping:
            state = .stopped
            return .wakeStop
        case .idle, .stopped:
            return .none
        }
    }

    mutating func stop() -> StopAction {
        switch state {
        case .idle:
            state = .stopped
            return .none
        case .running, .runningThenAgain:
            state = .stopping
            return .waitForRunning
        case .stopping, .stopped:
            return .none
        }
    }
}
