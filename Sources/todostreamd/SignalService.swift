import Logging
import ServiceLifecycle
import UnixSignals

/// The one place the daemon handles signals: SIGTERM and SIGINT stop it gracefully, SIGHUP
/// reloads, SIGUSR1 and SIGUSR2 are logged and ignored (their default action is to kill).
/// Last in the service group: it returns on a stop signal, and the group (told so by
/// its `successTerminationBehavior`) then shuts the other services down in reverse order.
///
/// `signals` is created before the daemon starts (`UnixSignalsSequence` traps them at once),
/// so a signal that arrives while the daemon starts waits here and is handled as soon as the
/// group runs: a stop during start-up is a graceful stop, not the signal's default action
/// (`serve` traps them first thing; one sent within the process's first milliseconds, before
/// that, still kills it, with nothing open yet). Signals that arrive once this service has stopped (during the drain) stay trapped and are
/// ignored. Tests hand in a stream of their own.
///
/// A reload runs on a thread of its own (`ReloadRunner`): this loop never waits for one, so a
/// stop signal is handled however slow a reload is, and SIGHUPs that come while one runs make
/// one more reload after it.
struct SignalService<Signals: AsyncSequence & Sendable>: Service where Signals.Element == UnixSignal {
    let signals: Signals
    let reloads: ReloadRunner
    let logger: Logger

    init(signals: Signals, reload: @escaping @Sendable () -> Void, logger: Logger) {
        self.signals = signals
        self.reloads = ReloadRunner(reload: reload)
        self.logger = logger
    }

    func run() async throws {
        let stopped = await cancelWhenGracefulShutdown { () async -> Bool in
            do {
                for try await signal in signals {
                    if signal.stopsTheDaemon {
                        logger.notice("shutting down", metadata: ["signal": "\(signal)"])
                        await reloads.stop()
                        return true
                    } else if signal == .sighup {
                        reloads.request()
                    } else {
                        // SIGUSR1, SIGUSR2: trapped so that a stray one does not kill the daemon
                        // without a drain.
                        logger.notice(
                            "signal ignored: SIGHUP reloads, SIGTERM and SIGINT stop",
                            metadata: ["signal": "\(signal)"]
                        )
                    }
                }
            } catch {
                logger.error("signals are no longer handled", metadata: ["reason": "\(error)"])
            }
            return false
        }
        // No reload starts once the daemon stops, whatever stopped it.
        await reloads.stop()
        // Without a stop signal (the group is shutting down anyway, or the sequence ended), this
        // service must not end the group: it waits for the shutdown.
        if !stopped {
            try? await gracefulShutdown()
        }
    }
}

extension UnixSignal {
    /// Every signal the daemon traps (`serve` traps them first thing).
    static let trappedByTheDaemon: [UnixSignal] = [.sigterm, .sigint, .sighup, .sigusr1, .sigusr2]

    /// SIGTERM and SIGINT: a graceful stop (or, while the daemon starts, the start cancelled).
    var stopsTheDaemon: Bool { self == .sigterm || self == .sigint }
}
