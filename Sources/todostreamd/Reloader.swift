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
            logger.error("config not reloaded; keeping the old one", metadata: ["reason": "\(error)"])
            return false
        }
        if next.devTLS, next.tlsCertificatePath == nil {
            next.tlsCertificatePath = current.tlsCertificatePath
            next.tlsKeyPath = current.tlsKeyPath
        }
        if next.listeners != current.listeners || next.dataDirectory != current.dataDirectory
            || next.storage != current.storage || next.postgresURL != current.postgresURL
            || next.postgres != current.postgres
        {
            logger.warning(
                "listeners, data_dir, storage and postgres settings change only on restart; keeping the running ones"
            )
            next.listeners = current.listeners
            next.dataDirectory = current.dataDirectory
            next.storage = current.storage
            next.postgresURL = current.postgresURL
            next.postgres = current.postgres
        }
        if let cert = next.tlsCertificatePath, let key = next.tlsKeyPath {
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
                logger.error(
                    "not reloaded: the TLS certificate is unusable; keeping the old settings",
                    metadata: ["reason": "\(error)"]
                )
                return false
            }
        }
        relay.settings.update(configuration: next.relay, auth: next.auth)
        if next.logLevel != current.logLevel, let level = Logger.Level(rawValue: next.logLevel) {
            LogLevelControl.level = level
            logger.notice("log level changed", metadata: ["log_level": "\(level)"])
        }
        options.withLockedValue { $0 = next }
        logger.notice("reloaded")
        return true
    }
}
