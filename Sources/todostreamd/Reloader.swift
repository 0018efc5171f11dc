import Foundation
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
    /// The bytes of the certificate file last put in use (at start or by a reload).
    let certificateInUse = NIOLockedValueBox<[UInt8]?>(nil)

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
        let changed: [String]
        do {
            changed = try Self.keepingRestartOnly(of: current, in: &next)
        } catch {
            return refused("config not reloaded; keeping the old one", reason: "\(error)")
        }
        if !changed.isEmpty {
            logger.warning(
                "these settings change only on restart; keeping the running ones",
                metadata: ["settings": "\(changed.joined(separator: ", "))"]
            )
        }
        if let cert = next.tlsCertificatePath, let key = next.tlsKeyPath {
            // Read once: the dates are judged, and the one in use recognised, by the same bytes.
            let pem = Self.contents(of: cert)
            if let pem, let problem = Daemon.certificateDateProblem(pem: pem, path: cert) {
                // A new certificate that clients would refuse (expired, or not valid yet) does
                // not replace the one in use. The one in use itself is served on, as at start,
                // and said loudly: the rest of the reload (a token revoked) still applies.
                guard pem == certificateInUse.withLockedValue({ $0 }) else {
                    return refused(
                        "not reloaded: the TLS certificate is not valid now; keeping the old settings",
                        reason: problem
                    )
                }
                logger.error("\(problem): clients will refuse it; replace it and reload")
            } else {
                do {
                    try replaceTLSContext(certificate: cert, key: key, pem: pem, next: next)
                } catch {
                    return refused(
                        "not reloaded: the TLS certificate is unusable; keeping the old settings",
                        reason: "\(error)"
                    )
                }
            }
        }
        relay.settings.update(configuration: next.relay, auth: next.auth)
        if next.logLevel != current.logLevel, let level = Logger.Level(rawValue: next.logLevel) {
            LogLevelControl.level = level
            logger.notice("log level changed", metadata: ["log_level": "\(level)"])
        }
        options.withLockedValue { $0 = next }
        let wasRefused = refusal.withLockedValue { refusal in
            defer { refusal = nil }
            return refusal != nil
        }
        if wasRefused { notifier.notify("STATUS=reloaded") }
        logger.notice("reloaded")
        return true
    }

    /// Loads the certificate and key, puts them in use, and remembers the certificate's bytes.
    private func replaceTLSContext(certificate: String, key: String, pem: [UInt8]?, next: DaemonOptions) throws {
        let context = try Daemon.makeTLSContext(
            certificatePath: certificate,
            keyPath: key,
            clientCAPath: next.tlsClientCAPath,
            closeTimeout: next.tlsCloseTimeout
        )
        relay.replaceTLSContext(context)
        certificateInUse.withLockedValue { $0 = pem }
        logger.notice("TLS certificate reloaded", metadata: ["path": "\(certificate)"])
    }

    /// A file's bytes, or nil when it cannot be read.
    static func contents(of path: String) -> [UInt8]? {
        FileManager.default.contents(atPath: path).map { [UInt8]($0) }
    }

    /// A setting that takes effect only when the daemon starts: compared between the options in
    /// force and a reload's, and kept at its running value.
    struct RestartOnlySetting: Sendable {
        let same: @Sendable (DaemonOptions, DaemonOptions) -> Bool
        let keep: @Sendable (inout DaemonOptions, DaemonOptions) -> Void

        init<Value: Equatable & SendableMetatype>(_ path: any WritableKeyPath<DaemonOptions, Value> & Sendable) {
            same = { $0[keyPath: path] == $1[keyPath: path] }
            keep = { $0[keyPath: path] = $1[keyPath: path] }
        }
    }

    /// The restart-only settings, by their config groups: what the listeners bind, where and
    /// how the store keeps its data, the journal's bounds and the sequencer's batches.
    static let restartOnly: [(group: String, settings: [RestartOnlySetting])] = [
        ("listen", [.init(\.listeners)]),
        ("data_dir", [.init(\.dataDirectory)]),
        ("storage", [.init(\.storage)]),
        ("postgres", [.init(\.postgresURL), .init(\.postgres)]),
        ("journal", [.init(\.retention)]),
        (
            "store",
            [
                .init(\.maxBatch), .init(\.listRowCache), .init(\.sequencerSpinMicroseconds), .init(\.handOverThread),
                .init(\.sequencerGatherMicroseconds), .init(\.maxQueuedRequests), .init(\.synchronousFull),
                .init(\.walWriteBufferBytes), .init(\.sqliteCacheKiB), .init(\.sqlitePageBytes),
                .init(\.sqliteDeferredTodos),
            ]
        ),
    ]

    /// The groups of restart-only settings that differ between `current` and `next`.
    static func restartOnlyChanges(from current: DaemonOptions, to next: DaemonOptions) -> [String] {
        restartOnly.filter { !$0.settings.allSatisfy { $0.same(current, next) } }.map(\.group)
    }

    /// Puts the running values of the restart-only settings back into `next`, and returns the
    /// groups that differed. What the file asks is checked as it is read; what would be in
    /// force is the new settings with the running listeners and store, and that must hold
    /// together too: new tokens against the listeners in use (a public plain-text listener
    /// kept running must not be left without authentication).
    static func keepingRestartOnly(of current: DaemonOptions, in next: inout DaemonOptions) throws -> [String] {
        let changed = restartOnlyChanges(from: current, to: next)
        guard !changed.isEmpty else { return [] }
        keepRestartOnly(of: current, in: &next)
        do {
            try next.validate()
        } catch let error as ConfigError {
            throw ConfigError(
                message:
                    "\(error.message) (with the running \(changed.joined(separator: ", ")) settings, which change only on restart)"
            )
        }
        return changed
    }

    /// Puts the running values of the restart-only settings back into `next`.
    static func keepRestartOnly(of current: DaemonOptions, in next: inout DaemonOptions) {
        for (_, settings) in restartOnly {
            for setting in settings { setting.keep(&next, current) }
        }
    }
}
