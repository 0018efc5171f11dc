/// One lease of a pooled connection, raced against its timeouts and against its server's
/// retirement (`FailoverPool.withLease`): whichever comes first answers the caller.
///
/// The lease waits for a connection (`waiting`), then runs its body on it (`running`). A
/// timeout or a retirement while waiting answers the caller at once and the connection, should
/// one still come, is given back unused; while running, it answers the caller at once and the
/// connection is closed (a query on a lost server does not always fail by itself), and the body
/// is left to finish on its own: its result is then dropped. `Answer` is how the caller is
/// answered (a continuation; anything in tests).
struct LeaseRace<Answer: Sendable>: Sendable {
    private enum State: Sendable {
        case waiting(Answer)
        case running(Answer)
        /// The caller was answered; `entered` when the body had started.
        case over(entered: Bool)
    }

    /// What `connected` asks of the lease.
    enum Start {
        /// Run the body on the connection.
        case run
        /// The caller was answered already: give the connection back without running anything.
        case refuse
    }

    /// What giving up (`giveUp`) asks of the lease.
    enum GiveUp {
        /// Nothing: the caller was answered already.
        case none
        /// Answer the caller with the error; no connection was leased yet, so stop waiting
        /// for one.
        case answerAndStopWaiting(Answer)
        /// Answer the caller with the error and close the connection under the body.
        case answerAndClose(Answer)
    }

    private var state: State

    init(answer: Answer) {
        state = .waiting(answer)
    }

    /// Whether the body has started (a lease retried on another server must not have).
    var entered: Bool {
        switch state {
        case .waiting: false
        case .running: true
        case .over(let entered): entered
        }
    }

    /// Whether the caller was answered.
    var answered: Bool {
        if case .over = state { true } else { false }
    }

    /// A connection was leased.
    mutating func connected() -> Start {
        switch state {
        case .waiting(let answer):
            state = .running(answer)
            return .run
        case .running, .over:
            return .refuse
        }
    }

    /// The body finished, or waiting for a connection failed: the caller to answer with that
    /// result, nil when it was answered already.
    mutating func finished() -> Answer? {
        switch state {
        case .waiting(let answer):
            state = .over(entered: false)
            return answer
        case .running(let answer):
            state = .over(entered: true)
            return answer
        case .over:
            return nil
        }
    }

    /// The caller's task was cancelled: a lease still waiting for a connection gives up
    /// (`answerAndStopWaiting`); one whose body runs waits for it (the body is bounded by its
    /// own timeout, and a commit under way is not cut short by a cancellation).
    mutating func cancelled() -> GiveUp {
        guard case .waiting = state else { return .none }
        return giveUp()
    }

    /// The lease's time ran out (waiting for a connection, or running the body), or the server
    /// it went to was retired (the pool moved to another one).
    mutating func giveUp() -> GiveUp {
        switch state {
        case .waiting(let answer):
            state = .over(entered: false)
            return .answerAndStopWaiting(answer)
        case .running(let answer):
            state = .over(entered: true)
            return .answerAndClose(answer)
        case .over:
            return .none
        }
    }
}

extension LeaseRace.GiveUp: Equatable where Answer: Equatable {}
