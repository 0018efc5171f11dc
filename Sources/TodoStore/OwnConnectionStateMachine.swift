/// The failover pool's connection of its own (`FailoverPool.withLease`): one connection to the
/// server in use, outside postgres-nio's pool, that serves one lease at a time. The store's
/// commits come one after another, so they mostly find it idle, and a commit then pays for no
/// pool request, timer or hop; a lease that finds it busy, connecting or broken goes to the
/// pool as before.
///
/// A connection belongs to the generation of the pool's client it was made for: a lease of
/// another generation never gets it, and one found idle after the pool moved on is closed.
/// A connection a lease gave back unhealthy (its work failed), or found closed while idle (the
/// server restarted), is closed and connected again, and a failed connect
/// is tried again no sooner than `retryDelay` later. No I/O and no clock: the pool executes the
/// actions, with `now` from its own clock.
struct OwnConnectionStateMachine<Connection: Sendable>: Sendable {
    private enum State: Sendable {
        case none(retryAfter: ContinuousClock.Instant?)
        case connecting(generation: Int)
        case idle(Connection, generation: Int)
        case busy(Connection, generation: Int)
        case shutDown
    }

    /// What `take` asks of the pool.
    enum Take: Sendable {
        /// Run the lease on this connection, and give it back (`returned`).
        case use(Connection)
        /// Lease from the pool; and, when set, close this stale connection and/or start a
        /// connect for `connect`'s generation (then report `connected` or `connectFailed`).
        case pool(close: Connection?, connect: Int?)
    }

    static var retryDelay: Duration { .seconds(1) }

    private var state = State.none(retryAfter: nil)

    /// A lease of `generation` starts; `isOpen` tells whether an idle connection is still open.
    mutating func take(
        generation: Int,
        now: ContinuousClock.Instant,
        isOpen: (Connection) -> Bool = { _ in true }
    ) -> Take {
        switch state {
        case .idle(let connection, let owner) where owner == generation && isOpen(connection):
            state = .busy(connection, generation: generation)
            return .use(connection)
        case .idle(let connection, _):
            state = .connecting(generation: generation)
            return .pool(close: connection, connect: generation)
        case .none(let retryAfter):
            if let retryAfter, now < retryAfter { return .pool(close: nil, connect: nil) }
            state = .connecting(generation: generation)
            return .pool(close: nil, connect: generation)
        case .connecting, .busy, .shutDown:
            return .pool(close: nil, connect: nil)
        }
    }

    /// A connect for `generation` succeeded: the connection to close when it is not wanted.
    mutating func connected(_ connection: Connection, generation: Int) -> Connection? {
        guard case .connecting(let wanted) = state, wanted == generation else { return connection }
        state = .idle(connection, generation: generation)
        return nil
    }

    /// A connect for `generation` failed.
    mutating func connectFailed(generation: Int, now: ContinuousClock.Instant) {
        guard case .connecting(let wanted) = state, wanted == generation else { return }
        state = .none(retryAfter: now + Self.retryDelay)
    }

    /// The lease that took the connection is over; `healthy` when its work succeeded. Returns
    /// the connection to close, if any.
    mutating func returned(healthy: Bool) -> Connection? {
        guard case .busy(let connection, let generation) = state else { return nil }
        if healthy {
            state = .idle(connection, generation: generation)
            return nil
        }
        state = .none(retryAfter: nil)
        return connection
    }

    /// The pool shuts down: the connection to close, if any; nothing is connected again.
    mutating func shutDown() -> Connection? {
        defer { state = .shutDown }
        switch state {
        case .idle(let connection, _), .busy(let connection, _): return connection
        case .none, .connecting, .shutDown: return nil
        }
    }
}
extension OwnConnectionStateMachine.Take: Equatable where Connection: Equatable {}
