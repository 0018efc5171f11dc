import Testing

@testable import TodoStore

/// When the store's thread spins before sleeping: while spins find work, not after one that
/// did not, and again once work came within a spin of a sleep.
@Suite struct SpinStateMachineTests {
    @Test func spinsWhileSpinsFindWork() {
        var machine = SpinStateMachine(spin: .microseconds(400))
        for _ in 0..<3 {
            #expect(machine.idle() == .spin(.microseconds(400)))
            machine.spinEnded(foundWork: true)
        }
        #expect(machine.spins)
    }

    @Test func aSpinThatFindsNothingMakesTheThreadSleepAtOnceUntilWorkComesWithinASpin() {
        var machine = SpinStateMachine(spin: .microseconds(400))
        #expect(machine.idle() == .spin(.microseconds(400)))
        machine.spinEnded(foundWork: false)
        #expect(machine.idle() == .sleep)
        // Work later than a spin: still asleep at once.
        machine.woke(after: .milliseconds(5))
        #expect(machine.idle() == .sleep)
        machine.woke(after: .microseconds(401))
        #expect(machine.idle() == .sleep)
        // Work within a spin of the sleep: a spin would have caught it.
        machine.woke(after: .microseconds(400))
        #expect(machine.idle() == .spin(.microseconds(400)))
        machine.spinEnded(foundWork: true)
        #expect(machine.idle() == .spin(.microseconds(400)))
    }

    @Test func sleepsWhileSpinningChangeNothing() {
        var machine = SpinStateMachine(spin: .microseconds(400))
        machine.woke(after: .seconds(1))
        #expect(machine.idle() == .spin(.microseconds(400)))
    }

    @Test func noSpinNeverSpins() {
        var machine = SpinStateMachine(spin: .zero)
        #expect(machine.idle() == .sleep)
        machine.woke(after: .zero)
        machine.spinEnded(foundWork: true)
        #expect(machine.idle() == .sleep)
        #expect(!machine.spins)
    }
}
