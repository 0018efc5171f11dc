import NIOConcurrencyHelpers

/// What `/healthz` and `/metrics` ask the store, without waiting on it for longer than
/// `patience`. The store answers on its own thread, which a storage stall (a frozen file system,
/// a commit stuck in `fdatasync`) holds for as long as the stall lasts; monitoring must still get
/// an answer then, one that says storage is not well. A question still unanswered is not asked
/// again meanwhile: later lookouts get the stalled answer at once, so a stall leaves at most one
/// question waiting on the store.
final class StoreLookout<Value: Sendable>: Sendable {
    private struct State {
        var asking = false
        var last: Value
    }

    private let state: NIOLockedValueBox<State>
    private let patience: Duration

    init(initial: Value, patience: Duration) {
        state = NIOLockedValueBox(State(last: initial))
        self.patience = patience
    }

    /// `ask`'s answer, or `stalled(last answer)` when it takes longer than `patience` or a
    /// question is still waiting.
    func value(
        _ ask: @escaping @Sendable () async -> Value,
        stalled: @escaping @Sendable (Value) -> Value
    ) async -> Value {
        let waiting: Value? = state.withLockedValue { state in
            if state.asking { return stalled(state.last) }
            state.asking = true
            return nil
        }
        if let waiting { return waiting }
        let state = self.state
        let patience = self.patience
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
                let answer = state.withLockedValue { stalled($0.last) }
                resume(answer)
            }
            Task {
                let answer = await ask()
                timer.cancel()
                state.withLockedValue { state in
                    state.asking = false
                    state.last = answer
                }
                resume(answer)
            }
        }
    }
}
