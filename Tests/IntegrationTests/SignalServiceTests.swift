import Dispatch
import Logging
import NIOConcurrencyHelpers
import Testing
import UnixSignals

@testable import todostreamd

@Suite struct ReloadStateMachineTests {
    @Test func hangupsWhileOneRunsMakeOneMoreReload() {
        var machine = ReloadStateMachine()
        #expect(machine.requested() == .start)
        #expect(machine.requested() == .none)
        #expect(machine.requested() == .none)
        #expect(machine.state == .runningThenAgain)
        #expect(machine.finished() == .runAgain)
        #expect(machine.finished() == .none)
        #expect(machine.state == .idle)
        #expect(machine.requested() == .start)
    }

    @Test func aStopWaitsForTheRunningReloadAndNothingStartsAfterIt() {
        var machine = ReloadStateMachine()
        _ = machine.requested()
        _ = machine.requested()
        #expect(machine.stop() == .waitForRunning)
        #expect(machine.requested() == .none)
        // The one folded in before the stop does not run either.
        #expect(machine.finished() == .wakeStop)
        #expect(machine.state == .stopped)
        #expect(machine.requested() == .none)
        #expect(machine.stop() == .none)

        var idle = ReloadStateMachine()
        #expect(idle.stop() == .none)
        #expect(idle.requested() == .none)
    }
}

/// A reload that the test lets go when it wants, telling it each time one starts.
private final class HeldReload: Sendable {
    let started: AsyncStream<Int>
    private let announce: AsyncStream<Int>.Continuation
    private let count = NIOLockedValueBox(0)
    private let gate = DispatchSemaphore(value: 0)

    init() {
        (started, announce) = AsyncStream.makeStream(of: Int.self)
    }

    var reloads: Int { count.withLockedValue { $0 } }

    func run() {
        let number = count.withLockedValue { count in
            count += 1
            return count
        }
        announce.yield(number)
        gate.wait()
    }

    func release() { gate.signal() }
}

@Suite(.timeLimit(.minutes(1))) struct SignalServiceTests {
    private static let logger = Logger(label: "signals", factory: { _ in SwiftLogNoOpLogHandler() })

    /// A reload that never ends (a config path that blocks) does not hold a stop back, however
    /// many SIGHUPs came before it: the stop waits a bounded time, then goes on.
    @Test func aStopIsHandledWhileAReloadHangs() async throws {
        let reload = HeldReload()
        defer { reload.release() }
        let (signals, raise) = AsyncStream.makeStream(of: UnixSignal.self)
        let service = SignalService(signals: signals, reload: { reload.run() }, logger: Self.logger)
        let running = Task { try await service.run() }
        raise.yield(.sighup)
        var started = reload.started.makeAsyncIterator()
        #expect(await started.next() == 1)
        for _ in 0..<40 { raise.yield(.sighup) }
        raise.yield(.sigterm)
        try await running.value
        #expect(reload.reloads == 1)
    }

    /// SIGUSR1 and SIGUSR2 neither stop nor reload: a SIGHUP after them still reloads.
    @Test func userSignalsAreIgnored() async throws {
        let reload = HeldReload()
        let (signals, raise) = AsyncStream.makeStream(of: UnixSignal.self)
        let service = SignalService(signals: signals, reload: { reload.run() }, logger: Self.logger)
        let running = Task { try await service.run() }
        var started = reload.started.makeAsyncIterator()
        raise.yield(.sigusr1)
        raise.yield(.sigusr2)
        raise.yield(.sighup)
        #expect(await started.next() == 1)
        reload.release()
        raise.yield(.sigterm)
        try await running.value
        #expect(reload.reloads == 1)
    }

    /// SIGHUPs that come while a reload runs make exactly one more after it; a stop while one
    /// runs waits for it and starts none after it.
    @Test func hangupsDuringAReloadAreFoldedIntoOneMore() async throws {
        let reload = HeldReload()
        let runner = ReloadRunner(reload: { reload.run() })
        var started = reload.started.makeAsyncIterator()
        runner.request()
        #expect(await started.next() == 1)
        for _ in 0..<5 { runner.request() }
        reload.release()
        #expect(await started.next() == 2)
        runner.request()
        #expect(runner.beginStop())
        reload.release()
        await runner.waitForTheRunningReload()
        // The request folded in before the stop did not start a third.
        #expect(reload.reloads == 2)
    }
}
