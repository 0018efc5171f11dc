import EventStream
import NIOCore
import Testing

@testable import Relay

@Suite struct AuthenticationStateMachineTests {
    /// A manual clock: deadlines are plain values.
    private let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    private func awaitingToken() -> AuthenticationStateMachine {
        var machine = AuthenticationStateMachine()
        _ = machine.start(required: true, preauthenticated: nil, now: start, idleTimeout: .seconds(30))
        return machine
    }

    @Test func withoutRequiredTokensTheSessionIsAViewAtOnce() {
        var machine = AuthenticationStateMachine()
        #expect(!machine.isAuthenticated)
        let action = machine.start(required: false, preauthenticated: nil, now: start, idleTimeout: .seconds(30))
        #expect(action == .granted(.view))
        #expect(machine.isAuthenticated)
        #expect(machine.role == .view)
        #expect(machine.idleTimeoutElapsed(now: start + .seconds(31)) == .none)
    }

    @Test func aTokenWithTheUpgradeGrantsItsRole() {
        var machine = AuthenticationStateMachine()
        let action = machine.start(required: true, preauthenticated: .monitor, now: start, idleTimeout: .seconds(30))
        #expect(action == .granted(.monitor))
        #expect(machine.role == .monitor)
    }

    @Test func requiredTokensSetAnIdleDeadline() {
        var machine = AuthenticationStateMachine()
        let action = machine.start(required: true, preauthenticated: nil, now: start, idleTimeout: .seconds(30))
        #expect(action == .awaitToken(deadline: start + .seconds(30)))
        #expect(!machine.isAuthenticated)
        #expect(machine.role == .view)
    }

    @Test func theIdleDeadlineClosesOnlyOnceReached() {
        let machine = awaitingToken()
        #expect(machine.idleTimeoutElapsed(now: start + .seconds(29)) == .none)
        #expect(machine.idleTimeoutElapsed(now: start + .seconds(30)) == .close)
        #expect(machine.idleTimeoutElapsed(now: start + .seconds(45)) == .close)
    }

    @Test func aValidTokenCancelsTheIdleDeadline() {
        var machine = awaitingToken()
        #expect(machine.tokenPresented(grants: .view, required: true) == .granted(.view))
        #expect(machine.isAuthenticated)
        #expect(machine.idleTimeoutElapsed(now: start + .seconds(31)) == .none)
    }

    @Test func threeBadTokensClose() {
        var machine = awaitingToken()
        #expect(machine.tokenPresented(grants: nil, required: true) == .refuse)
        #expect(machine.tokenPresented(grants: nil, required: true) == .refuse)
        #expect(machine.tokenPresented(grants: nil, required: true) == .refuseAndClose)
        #expect(!machine.isAuthenticated)
        // Bad tokens do not move the deadline.
        #expect(machine.idleTimeoutElapsed(now: start + .seconds(30)) == .close)
    }

    @Test func badTokensCountAcrossAGoodOne() {
        var machine = awaitingToken()
        #expect(machine.tokenPresented(grants: nil, required: true) == .refuse)
        #expect(machine.tokenPresented(grants: .view, required: true) == .granted(.view))
        #expect(machine.tokenPresented(grants: nil, required: true) == .refuse)
        #expect(machine.tokenPresented(grants: nil, required: true) == .refuseAndClose)
        // A bad token leaves the granted role as it was.
        #expect(machine.role == .view)
        #expect(machine.isAuthenticated)
    }

    @Test func withoutRequiredTokensOnlyAMonitorTokenIsAnyUse() {
        var machine = AuthenticationStateMachine()
        _ = machine.start(required: false, preauthenticated: nil, now: start, idleTimeout: .seconds(30))
        #expect(machine.tokenPresented(grants: .view, required: false) == .refuse)
        #expect(machine.role == .view)
        #expect(machine.tokenPresented(grants: .monitor, required: false) == .granted(.monitor))
        #expect(machine.role == .monitor)
    }

    @Test func aLaterTokenChangesTheRole() {
        var machine = awaitingToken()
        #expect(machine.tokenPresented(grants: .monitor, required: true) == .granted(.monitor))
        #expect(machine.tokenPresented(grants: .view, required: true) == .granted(.view))
        #expect(machine.role == .view)
    }
}
