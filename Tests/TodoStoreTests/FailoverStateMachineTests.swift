import Testing

@testable import TodoStore

@Suite struct FailoverStateMachineTests {
    typealias Client = FailoverStateMachine.Client

    @Test func startsOnTheServerTheStoreOpenedOn() {
        var machine = FailoverStateMachine(server: 1)
        #expect(machine.current == Client(generation: 1, server: 1))
        #expect(machine.failureReported(generation: nil) == .none, "nothing runs yet")
        #expect(machine.started() == .run(Client(generation: 1, server: 1)))
        #expect(machine.started() == .none, "runs once")
    }

    @Test func aFailureStartsOneSelectionThatSwapsToAnotherServer() {
        var machine = FailoverStateMachine(server: 0)
        _ = machine.started()
        #expect(machine.failureReported(generation: 1) == .select(after: .zero))
        #expect(machine.isSelecting)
        #expect(machine.failureReported(generation: 1) == .none, "one selection at a time")
        #expect(machine.failureReported(generation: nil) == .none)
        #expect(machine.current == Client(generation: 1, server: 0), "leases keep the old client meanwhile")
        #expect(
            machine.selected(server: 1)
                == .swap(to: Client(generation: 2, server: 1), retire: Client(generation: 1, server: 0))
        )
        #expect(machine.current == Client(generation: 2, server: 1))
        #expect(!machine.isSelecting)
        #expect(machine.failureReported(generation: 1) == .none, "a retired client's failure changes nothing")
        #expect(machine.selected(server: 0) == .none, "no selection under way")
        #expect(machine.failureReported(generation: 2) == .select(after: .zero))
    }

    @Test func aSelectionThatFindsNoServerIsRetriedWithCappedGrowingDelays() {
        var machine = FailoverStateMachine(server: 0)
        _ = machine.started()
        _ = machine.failureReported(generation: nil)
        var delays: [Duration] = []
        for _ in 0..<8 {
            guard case .select(let delay) = machine.selectionFailed() else {
                Issue.record("a failed selection must be retried")
                return
            }
            delays.append(delay)
        }
        #expect(
            delays == [
                .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800),
                .milliseconds(1600), .seconds(2), .seconds(2), .seconds(2),
            ]
        )
        #expect(machine.current == Client(generation: 1, server: 0))
        #expect(
            machine.selected(server: 1)
                == .swap(to: Client(generation: 2, server: 1), retire: Client(generation: 1, server: 0))
        )
        #expect(machine.selectionFailed() == .none, "serving again")
    }

    @Test func findingTheServerInUseKeepsItsClientAndSpacesOutTheNextSelections() {
        var machine = FailoverStateMachine(server: 0)
        _ = machine.started()
        #expect(machine.failureReported(generation: 1) == .select(after: .zero))
        #expect(machine.selected(server: 0) == .keep(Client(generation: 1, server: 0)))
        #expect(machine.current == Client(generation: 1, server: 0))
        #expect(machine.failureReported(generation: 1) == .select(after: .milliseconds(100)))
        #expect(machine.selected(server: 0) == .keep(Client(generation: 1, server: 0)))
        #expect(machine.failureReported(generation: 1) == .select(after: .milliseconds(200)))
        #expect(machine.selected(server: 0) == .keep(Client(generation: 1, server: 0)))
        // A lease that works again resets the spacing; one of another client does not.
        #expect(machine.leaseSucceeded(generation: 7) == .none)
        #expect(machine.failureReported(generation: 1) == .select(after: .milliseconds(400)))
        #expect(machine.selected(server: 0) == .keep(Client(generation: 1, server: 0)))
        #expect(machine.leaseSucceeded(generation: 1) == .none)
        #expect(machine.failureReported(generation: 1) == .select(after: .zero))
    }

    @Test func shuttingDownRetiresTheClientInUseOnce() {
        var machine = FailoverStateMachine(server: 0)
        _ = machine.started()
        _ = machine.failureReported(generation: 1)
        #expect(machine.shutDown() == .shutDown(retire: Client(generation: 1, server: 0)))
        #expect(machine.current == nil)
        #expect(machine.shutDown() == .none)
        #expect(machine.selected(server: 1) == .none)
        #expect(machine.failureReported(generation: nil) == .none)
        #expect(machine.started() == .none)
        var idle = FailoverStateMachine(server: 0)
        #expect(idle.shutDown() == .none, "nothing ran")
    }

    @Test func onlyFailuresThatSuggestALostOrReadOnlyServerStartASelection() {
        #expect(FailoverPool.suggestsServerLoss(sqlState: "25006"), "read-only: a standby or a demoted primary")
        #expect(FailoverPool.suggestsServerLoss(sqlState: "57P01"), "admin shutdown")
        #expect(FailoverPool.suggestsServerLoss(sqlState: "57P03"), "cannot connect now (starting up)")
        #expect(FailoverPool.suggestsServerLoss(sqlState: "08006"), "connection failure")
        #expect(!FailoverPool.suggestsServerLoss(sqlState: "23505"), "unique violation")
        #expect(!FailoverPool.suggestsServerLoss(sqlState: "40001"), "serialization failure")
        #expect(!FailoverPool.suggestsServerLoss(sqlState: "57014"), "query cancelled")
        #expect(!FailoverPool.suggestsServerLoss(sqlState: nil))
        #expect(FailoverPool.suggestsServerLoss(DatabaseUnavailable()), "no connection within the timeout")
        #expect(FailoverPool.suggestsServerLoss(NoFittingServer(reasons: [])))
        #expect(!FailoverPool.suggestsServerLoss(StoreError(message: "the database has no stream_state row")))
        #expect(!FailoverPool.suggestsServerLoss(CancellationError()))
        #expect(!FailoverPool.suggestsServerLoss(ServerChanged()), "the pool has moved already")
    }
}
