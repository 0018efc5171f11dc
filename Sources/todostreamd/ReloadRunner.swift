import Dispatch
import Foundation
import NIOConcurrencyHelpers

/// Runs the reloads that SIGHUP asks for on a thread of their own, one at a time
/// (`ReloadStateMachine`): a reload reads files and may block, so it runs neither on the signal
/// loop nor on the concurrency pool.
final class ReloadRunner: Sendable {
    /// How long a stop waits for a reload that is running, so that `kill -HUP` then
    /// `kill -TERM` stops with the reloaded settings; a reload that takes longer (a config
    /// path that blocks) is left behind and the stop goes on.
    static let stopWaitsForAReload = DispatchTimeInterval.seconds(2)

    private let machine = NIOLockedValueBox(ReloadStateMachine())
    private let reloadEnded = DispatchSemaphore(value: 0)
    private let reload: @Sendable () -> Void

    init(reload: @escaping @Sendable () -> Void) {
        self.reload = reload
    }

    /// SIGHUP: start a reload, or fold this one into the one after the running one.
    func request() {
        guard case .start = machine.withLockedValue({ $0.requested() }) else { return }
        Thread.detachNewThread { [self] in
            while true {
                reload()
                switch machine.withLockedValue({ $0.finished() }) {
                case .runAgain: continue
                case .none: return
                case .wakeStop:
                    reloadEnded.signal()
                    return
                }
            }
        }
    }

    /// A stop: no reload starts from now on; one that runs is waited for, at most
    /// `stopWaitsForAReload`.
    func stop() async {
        guard beginStop() else { return }
        await waitForTheRunningReload()
    }

    /// No reload starts from now on. Returns whether one runs.
    func beginStop() -> Bool {
        machine.withLockedValue { $0.stop() } == .waitForRunning
    }

    /// Waits until the reload that ran when the stop began ends, at most `stopWaitsForAReload`.
    func waitForTheRunningReload() async {
        let reloadEnded = self.reloadEnded
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                _ = reloadEnded.wait(timeout: .now() + Self.stopWaitsForAReload)
                continuation.resume()
            }
        }
    }
}
