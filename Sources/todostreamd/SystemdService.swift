import Logging
import NIOCore
import ServiceLifecycle

/// Tells systemd the truth: `READY=1` once every listener accepts, `WATCHDOG=1` only while the
/// serving path answers (every event loop runs a task and the store answers), `STATUS=` with
/// the connection count, and `STOPPING=1` as soon as shutdown begins.
struct SystemdService: Service {
    let notifier: SystemdNotifier
    let watchdogInterval: Duration?
    let statusInterval: Duration
    /// Returns a status line when the serving path is healthy, nil when it is wedged.
    let probe: @Sendable () async -> String?
    let logger: Logger

    func run() async throws {
        guard notifier.isEnabled else {
            try? await gracefulShutdown()
            return
        }
        notifier.notify("READY=1\nSTATUS=serving")
        let interval = min(watchdogInterval ?? statusInterval, statusInterval)
        try? await cancelWhenGracefulShutdown {
            while true {
                try await Task.sleep(for: interval)
                guard let status = await probe() else {
                    logger.error("serving path did not answer; withholding the watchdog ping")
                    continue
                }
                notifier.notify(watchdogInterval == nil ? "STATUS=\(status)" : "WATCHDOG=1\nSTATUS=\(status)")
            }
        }
        notifier.notify("STOPPING=1\nSTATUS=draining")
    }
}
