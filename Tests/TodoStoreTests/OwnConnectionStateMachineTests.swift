import Testing

@testable import TodoStore

/// The failover pool's connection of its own (`OwnConnectionStateMachine`): one lease at a time,
/// only for its own generation, closed when stale or broken, connected again no sooner than a
/// second after a failed connect.
@Suite struct OwnConnectionStateMachineTests {
    typealias Machine = OwnConnectionStateMachine<String>
    let start = ContinuousClock.now

    @Test func theFirstLeaseConnectsAndGoesToThePoolThenLeasesUseTheConnectionOneAtATime() {
        var machine = Machine()
        #expect(machine.take(generation: 1, now: start) == .pool(close: nil, connect: 1))
        #expect(machine.take(generation: 1, now: start) == .pool(close: nil, connect: nil), "one connect at a time")
        #expect(machine.connected("c1", generation: 1) == nil)
        #expect(machine.take(generation: 1, now: start) == .use("c1"))
        #expect(machine.take(generation: 1, now: start) == .pool(close: nil, connect: nil), "busy: the pool serves")
        #expect(machine.returned(healthy: true) == nil)
        #expect(machine.take(generation: 1, now: start) == .use("c1"), "kept after a success")
    }

    @Test func aConnectionWhoseWorkFailedIsClosedAndConnectedAgain() {
        var machine = Machine()
        _ = machine.take(generation: 1, now: start)
        _ = machine.connected("c1", generation: 1)
        #expect(machine.take(generation: 1, now: start) == .use("c1"))
        #expect(machine.returned(healthy: false) == "c1")
        #expect(machine.take(generation: 1, now: start) == .pool(close: nil, connect: 1))
    }

    @Test func aConnectionOfAnotherGenerationIsNeverUsedAndIsClosedWhenFoundIdle() {
        var machine = Machine()
        _ = machine.take(generation: 1, now: start)
        _ = machine.connected("old", generation: 1)
        #expect(machine.take(generation: 2, now: start) == .pool(close: "old", connect: 2))
        #expect(machine.connected("late", generation: 1) == "late", "a connect for a retired generation is closed")
        #expect(machine.connected("new", generation: 2) == nil)
        #expect(
            machine.take(generation: 1, now: start) == .pool(close: "new", connect: 1),
            "a lease of the old generation never gets it"
        )
    }

    @Test func aConnectionFoundClosedWhileIdleIsClosedAndConnectedAgain() {
        var machine = Machine()
        _ = machine.take(generation: 1, now: start)
        _ = machine.connected("c1", generation: 1)
        #expect(machine.take(generation: 1, now: start, isOpen: { _ in false }) == .pool(close: "c1", connect: 1))
    }

    @Test func aFailedConnectIsTriedAgainOnlyAfterTheRetryDelay() {
        var machine = Machine()
        _ = machine.take(generation: 1, now: start)
        machine.connectFailed(generation: 1, now: start)
        #expect(machine.take(generation: 1, now: start + .milliseconds(500)) == .pool(close: nil, connect: nil))
        #expect(machine.take(generation: 1, now: start + Machine.retryDelay) == .pool(close: nil, connect: 1))
    }

    @Test func afterShutDownTheConnectionIsClosedAndNothingConnects() {
        var machine = Machine()
        _ = machine.take(generation: 1, now: start)
        _ = machine.connected("c1", generation: 1)
        #expect(machine.shutDown() == "c1")
        #expect(machine.take(generation: 1, now: start) == .pool(close: nil, connect: nil))
        #expect(machine.connected("c2", generation: 1) == "c2")
        #expect(machine.returned(healthy: true) == nil)
    }
}
