import NIOConcurrencyHelpers

/// What `/healthz` and `/metrics` ask the store, without waiting on it for longer than
/// `patience`. The store answers on its own thread, which a storage stall (a frozen file system,
/// a commit stuck in `fdatasync`) holds for as long as the stall lasts; monitoring must still get
/// an answer then, one that says storage is not well.
///
/// One question at a time reaches the store: callers that come while it waits share its answer
/// (each waiting at most `patience` from its own arrival), so a stall leaves one question
/// waiting on the store, however many scrapes come. Once the question has waited `patience`
/// already, later callers get the stalled answer at once. (A caller that came while a question
/// was on its way used to get the stalled answer at once too: two load-balancer checks a moment
/// apart made a healthy store look down.)
final class StoreLookout<Value: Sendable>: Sendable {
    private struct State {
        /// The question on its way to the store, and when it was asked.
        var asking: (answer: Task<Value, Never>, since: ContinuousClock.Instant)?
        var last: Value
    }

    private let state: NIOLockedValueBox<State>
    private let patience: Duration

    init(initial: Value, patience: Duration) {
        state = NIOLockedValueBox(State(last: initial))
        self.patience = patience
    }

    private enum Step {
        case answer(Value)
        case wait(Task<Value, Never>)
    }

    /// `ask`'s answer, or `stalled(last answer)` when it takes longer than `patience`.
    func value(
        _ ask: @escaping @Sendable () async -> Value,
        stalled: @escaping @Sendable (Value) -> Value
    ) async -> Value {
        let state = self.state
        let patience = self.patience
        let step: Step = state.withLockedValue { current in
            let now = ContinuousClock.now
            if let asking = current.asking {
                if now - asking.since >= patience { return .answer(stalled(current.last)) }
                return .wait(asking.answer)
            }
            let question = Task {
                let answer = await ask()
                state.withLockedValue { current in
                    current.asking = nil
                    current.last = answer
                }
                return answer
            }
            current.asking = (question, now)
            return .wait(question)
        }
        let question: Task<Value, Never>
        switch step {
        case .answer(let answer): return answer
        case .wait(let asked): question = asked
        }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Value, Never>) in
            let pending = NIOLockedValueBox<CheckedContinuation<Value, Never>?>(continuation)
            // Whichever comes first resumes the caller; the other finds nothing to resume.
            @Sendable func resume(_ answer: Value) {
                let taken = pending.withLockedValue { taken in
                    defer { taken = nil }
                    return taken
                }
                taken?.resume(returning: answer)
            }
            let timer = Task {
                try? await Task.sleep(for: patience)
                guard !Task.isCancelled else { return }
                resume(state.withLockedValue { stalled($0.last) })
            }
            Task {
                let answer = await question.value
                timer.cancel()
                resume(answer)
            }
        }
    }
}
