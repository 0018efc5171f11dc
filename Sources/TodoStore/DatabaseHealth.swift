import NIOConcurrencyHelpers

/// Whether the database answered the last time anyone asked: a commit, a read, or the journal
/// follower. Shared by the store and its follower; read by `/healthz`.
final class DatabaseHealth: Sendable {
    private let state = NIOLockedValueBox(true)

    var isUp: Bool { state.withLockedValue { $0 } }

    /// Records an answer; returns whether that changed the state.
    @discardableResult
    func record(up: Bool) -> Bool {
        state.withLockedValue { current in
            defer { current = up }
            return current != up
        }
    }
}
