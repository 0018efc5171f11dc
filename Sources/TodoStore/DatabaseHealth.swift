import NIOConcurrencyHelpers

/// Whether the database answers, as `/healthz` reports it: the pooled connections (commits and
/// reads) and the journal feed (the follower's LISTEN connection) must both be up.
///
/// The follower's successful reads count for the pool too, so a daemon that gets no requests
/// still reports healthy again once the database is back (a load balancer that took it out of
/// rotation must be able to put it back).
final class DatabaseHealth: Sendable {
    private struct State {
        var pool = true
        var feed = true
        var isUp: Bool { pool && feed }
    }

    private let state = NIOLockedValueBox(State())

    var isUp: Bool { state.withLockedValue { $0.isUp } }

    /// Records how a pooled operation went; returns whether the overall state changed.
    @discardableResult
    func recordPool(up: Bool) -> Bool {
        state.withLockedValue { state in
            let before = state.isUp
            state.pool = up
            return before != state.isUp
        }
    }

    /// Records how the journal feed is doing; returns whether the overall state changed.
    @discardableResult
    func recordFeed(up: Bool) -> Bool {
        state.withLockedValue { state in
            let before = state.isUp
            state.feed = up
            if up { state.pool = true }
            return before != state.isUp
        }
    }
}
