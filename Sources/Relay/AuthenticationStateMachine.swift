import EventStream
import NIOCore

/// Guards who a session speaks for: whether it still needs a token, how many bad tokens it has
/// presented (the third closes it), when an unauthenticated session is cut, and the role granted.
///
/// notStarted → awaitingToken(deadline) → authenticated(role), or notStarted →
/// authenticated(role) when no token is needed. A later `auth` may change the role; bad tokens
/// are counted in every state.
struct AuthenticationStateMachine {
    static let maxBadTokens = 3

    enum State: Equatable {
        case notStarted
        /// Nothing but `ping` and `auth` is served; without a valid token by `deadline` the
        /// session is closed.
        case awaitingToken(deadline: NIODeadline, badTokens: Int)
        case authenticated(Role, badTokens: Int)
    }

    enum StartAction: Equatable {
        /// No token is needed (or one came with the connection): serve the session as `role`.
        case granted(Role)
        /// Close the session at `deadline` unless a valid token comes first.
        case awaitToken(deadline: NIODeadline)
    }

    enum TokenAction: Equatable {
        /// Serve the session as `role` from now on (and forget the idle deadline).
        case granted(Role)
        /// Answer `unauthorized`; the session stays open.
        case refuse
        /// Answer `unauthorized` and close: too many bad tokens.
        case refuseAndClose
    }

    enum IdleAction: Equatable {
        /// No valid token came in time: close.
        case close
        case none
    }

    private(set) var state: State = .notStarted

    var isAuthenticated: Bool {
        if case .authenticated = state { return true }
        return false
    }

    /// The role the session is served as (`view` until it is authenticated).
    var role: Role {
        if case .authenticated(let role, _) = state { return role }
        return .view
    }

    /// The session starts. `preauthenticated` is a role granted with the connection (a
    /// WebSocket upgrade that carried a token).
    mutating func start(
        required: Bool,
        preauthenticated: Role?,
        now: NIODeadline,
        idleTimeout: TimeAmount
    ) -> StartAction {
        if !required || preauthenticated != nil {
            let role = preauthenticated ?? .view
            state = .authenticated(role, badTokens: 0)
            return .granted(role)
        }
        let deadline = now + idleTimeout
        state = .awaitingToken(deadline: deadline, badTokens: 0)
        return .awaitToken(deadline: deadline)
    }

    /// The client sent `auth` with a token, which the configuration maps to `grants` (nil: an
    /// unknown token). When tokens are not required, only a monitor token is any use.
    mutating func tokenPresented(grants: Role?, required: Bool) -> TokenAction {
        if let role = grants, required || role == .monitor {
            state = .authenticated(role, badTokens: badTokens)
            return .granted(role)
        }
        let count = badTokens + 1
        switch state {
        case .notStarted, .awaitingToken:
            state = .awaitingToken(deadline: deadline ?? .distantFuture, badTokens: count)
        case .authenticated(let role, _):
            state = .authenticated(role, badTokens: count)
        }
        return count >= Self.maxBadTokens ? .refuseAndClose : .refuse
    }

    /// The idle timer fired at `now`.
    func idleTimeoutElapsed(now: NIODeadline) -> IdleAction {
        guard case .awaitingToken(let deadline, _) = state, now >= deadline else { return .none }
        return .close
    }

    private var badTokens: Int {
        switch state {
        case .notStarted: 0
        case .awaitingToken(_, let count), .authenticated(_, let count): count
        }
    }

    private var deadline: NIODeadline? {
        if case .awaitingToken(let deadline, _) = state { return deadline }
        return nil
    }
}
