import Logging
import NIOConcurrencyHelpers

/// The daemon's log level, changeable while it runs (a SIGHUP reload applies `log_level`).
///
/// Every logger the daemon bootstraps uses a `ReloadableLogHandler`, which asks this box for
/// the level on each message, so a reload takes effect for loggers already handed out.
enum LogLevelControl {
    private static let box = NIOLockedValueBox<Logger.Level>(.info)

    static var level: Logger.Level {
        get { box.withLockedValue { $0 } }
        set { box.withLockedValue { $0 = newValue } }
    }
}

/// Writes through another handler, at the level `LogLevelControl` holds unless this copy of
/// the logger was given a level of its own.
struct ReloadableLogHandler: LogHandler {
    private var base: any LogHandler
    private var override: Logger.Level?

    init(_ base: any LogHandler) { self.base = base }

    var logLevel: Logger.Level {
        get { override ?? LogLevelControl.level }
        set { override = newValue }
    }

    var metadata: Logger.Metadata {
        get { base.metadata }
        set { base.metadata = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { base.metadataProvider }
        set { base.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { base[metadataKey: key] }
        set { base[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        base.log(event: event)
    }
}
