import Logging
import ServiceLifecycle
import UnixSignals

/// The one place the daemon handles signals: SIGTERM and SIGINT stop it gracefully, SIGHUP
/// reloads. Last in the service group: it returns on a stop signal, and the group (told so by
/// its `successTerminationBehavior`) then shuts the other services down in reverse order.
///
/// `signals` is created before the daemon starts (`UnixSignalsSequence` traps them at once),
/// so a signal that arrives while the daemon starts waits here and is handled as soon as the
/// group runs: a stop during start-up is a graceful stop, not the signal's default action
/// (`serve` traps them first thing; one sent within the process's first milliseconds, before
/// that, still kills it, with nothing open yet). Signals that arrive once this service has stopped (during the drain) stay trapped and are
/// ignored. Tests hand in a stream of their own.
struct SignalService<Signals: AsyncSequence & Sendable>: Service where Signals.Element == UnixSignal {
    let signals: Signals
    let reload: @Sendable () -> Void
    let logger: Logger

    func run() async throws {
        let stopped = await cancelWhenGracefulShutdown { () async -> Bool in
            do {
                for try await signal in signals {
                    if signal == .sighup {
                        reload()
                    } else {
                        logger.notice("shutting down", metadata: ["signal": "\(signal)"])
                        return true
                    }
                }
            } catch {
                logger.error("signals are no longer handled", metadata: ["reason": "\(error)"])
            }
            return false
        }
        // Without a stop signal (the group is shutting down anyway, or the sequence ended), this
        // service must not end the group: it waits for the shutdown.
        if !stopped {
            try? await gracefulShutdown()
        }
    }
}
