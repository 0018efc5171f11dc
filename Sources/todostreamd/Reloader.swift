import Logging
import NIOConcurrencyHelpers
import NIOSSL
import Relay
import TodoApp

/// What SIGHUP does: re-resolves the options and applies what can change while serving. Shared
/// by the daemon (`Daemon.reload()`) and its `SignalService`.
struct Reloader: Sendable {
    /// The options in force.
    let options: NIOLockedValueBox<DaemonOptions>
    /// Produces fresh options (the config file, the environment, the flags).
    let resolver: (@Sendable () throws -> DaemonOptions)?
    let relay: RelayServer<TodoWireCodec>
    let notifier: SystemdNotifier
    let logger: Logger
    /// Why the last reload was refused, until one succeeds: shown in systemd's `STATUS=`, so
    /// that `systemctl status` tells a refused reload from an applied one.
    let refusal = NIOLockedValueBox<String?>(nil)

    /// The status line to show: `serving`'s, with the last refused reload's reason.
    func status(_ serving: String) -> String {
        guard let reason = refusal.withLockedValue({ $0 }) else { return serving }
        return "\(serving); config not reloaded: \(reason)"
    }

    /// A refused reload: logged, and shown in the status until a reload succeeds.
    private func refused(_ message: String, reason: String) -> Bool {
        logger.error("\(message)", metadata: ["reason": "\(reason)"])
        let line = reason.split(whereSeparator: \.isNewline).joined(separator: " ")
        refusal.withLockedValue { $0 = String(line.prefix(200)) }
        notifier.notify("STATUS=config not reloaded: \(line.prefix(200))")
        return false
    }

    /// Reloads what can change while running: the config file (through `resolver`, which
    /// re-reads the file and the environment and re-applies the flags), limits, tokens, and
    /// the TLS certificate and key. Everything is checked first; on any error the old settings
    /// stay in force, the reason is logged, and nobody is disconnected.
    @discardableResult
    func reload() -> Bool {
        logger.notice("reloading")
        notifier.notify("RELOADING=1\nMONOTONIC_USEC=\(SystemdNotifier.monotonicMicroseconds())")
        defer { notifier.notify("READY=1") }
        let current = options.withLockedValue { $0 }
        var next: DaemonOptions
        do {
            next = try resolver?() ?? current
        } catch {
            return refused("config not reloaded; keeping the old one", reason: "\(error)")
        }
        if next.devTLS, next.tlsCertificatePath == nil {
            next.tlsCertificatePath = current.tlsCertificatePath
            next.tlsKeyPath = current.tlsKeyPath
        }
        let changed = Self.restartOnlyChanges(from: current, to: next)
        if !changed.isEmpty {
            logger.warning(
                "these settings change only on restart; keeping the running ones",
                metadata: ["settings": "\(changed.joined(separator: ", "))"]
            )
            Self.keepRestartOnly(of: current, in: &next)
        }
        if let cert = next.tlsCertificatePath, let key = next.tlsKeyPath {
            // A certificate that clients would refuse (expired, or not valid yet) is a bad one:
            // the one in use stays.
            if let problem = Daemon.certificateDateProblem(cert) {
                return refused(
                    "not reloaded: the TLS certificate is not valid now; keeping the old settings",
                    reason: problem
                )
            }
            do {
                let context = try Daemon.makeTLSContext(
                    certificatePath: cert,
                    keyPath: key,
                    clientCAPath: next.tlsClientCAPath,
                    closeTimeout: next.tlsCloseTimeout
                )
                relay.replaceTLSContext(context)
                logger.notice("TLS certificate reloaded", metadata: ["path": "\(cert)"])
            } catch {
                return refused(
                    "not reloaded: the TLS certificate is unusable; keeping the old settings",
                    reason: "\(error)"
                )
            }
        }
        relay.settings.update(configuration: next.relay, auth: next.auth)
        if next.logLevel != current.logLevel, let level = Logger.Level(rawValue: next.logLevel) {
            LogLevelControl.level = level
            logger.notice("log level changed", metadata: ["log_level": "\(level)"])
        }
        options.withLockedValue { $0 = next }
        if refusal.withLockedValue({ $0 }) != nil {
            refusal.withLockedValue { $0 = nil }
            notifier.notify("STATUS=reloaded")
        }
        logger.notice("reloaded")
        return true
    }

    /// The groups of settings, by their config names, that differ between `current` and
    /// `next` and take effect only when the daemon starts: what the listeners bind, where and
    /// how the store keeps its data, the journal's bounds and the sequencer's batches.
    static func restartOnlyChanges(from current: DaemonOptions, to next: DaemonOptions) -> [String] {
        var changed: [String] = []
        if next.listeners != current.listeners { changed.append("listen") }
        if next.dataDirectory != current.dataDirectory { changed.append("data_dir") }
        if next.storage != current.storage { changed.append("storage") }
        if next.postgresURL != current.postgresURL || next.postgres != current.postgres { changed.append("postgres") }
        if next.retention != current.retention { changed.append("journal") }
        if storeSettings(next) != storeSettings(current) { changed.append("store") }
        return changed
    }

    /// Puts the running values of the restart-only settings back into `next`.
    static func keepRestartOnly(of current: DaemonOptions, in next: inout DaemonOptions) {
        next.listeners = current.listeners
        next.dataDirectory = current.dataDirectory
        next.storage = current.storage
        next.postgresURL = current.postgresURL
        next.postgres = current.postgres
        next.retention = current.retention
        next.maxBatch = current.maxBatch
        next.listRowCache = current.listRowCache
        next.sequencerSpinMicroseconds = current.sequencerSpinMicroseconds
        next.handOverThread = current.handOverThread
        next.sequencerGatherMicroseconds = current.sequencerGatherMicroseconds
        next.maxQueuedRequests = current.maxQueuedRequests
        next.synchronousFull = current.synchronousFull
        next.walWriteBufferBytes = current.walWriteBufferBytes
        next.sqliteCacheKiB = current.sqliteCacheKiB
        next.sqlitePageBytes = current.sqlitePageBytes
        next.sqliteDeferredTodos = current.sqliteDeferredTodos
    }

    /// The `store.*` settings, compared as one.
    private static func storeSettings(_ options: DaemonOptions) -> [Int?] {
        [
            options.maxBatch, options.listRowCache, options.sequencerSpinMicroseconds,
            options.handOverThread.map { $0 ? 1 : 0 }, options.sequencerGatherMicroseconds,
            options.maxQueuedRequests, options.synchronousFull ? 1 : 0, options.walWriteBufferBytes,
            options.sqliteCacheKiB, options.sqlitePageBytes, options.sqliteDeferredTodos,
        ]
    }
}
