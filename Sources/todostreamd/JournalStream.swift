import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Standard error as systemd's journal reads it, when the journal is what standard error is
/// connected to (`JOURNAL_STREAM` names its device and inode): each line starts with its
/// syslog priority (`<3>` for errors … `<7>` for debug), which journald takes as the entry's
/// priority, so `journalctl -p err` finds the errors; and without the daemon's own timestamp,
/// which the journal adds to every entry.
struct JournalStream: TextOutputStream, Sendable {
    /// Whether standard error is the journal's stream, as `JOURNAL_STREAM` says.
    static func isStandardErrorTheJournal(environment: [String: String]) -> Bool {
        #if canImport(Glibc)
        guard let value = environment["JOURNAL_STREAM"] else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var status = stat()
        guard fstat(STDERR_FILENO, &status) == 0 else { return false }
        return UInt64(status.st_dev) == device && UInt64(status.st_ino) == inode
        #else
        return false
        #endif
    }

    /// `<N>` for a line of `level` written to standard error outside the logger, when standard
    /// error is the journal; nothing otherwise.
    static func prefix(_ level: Logger.Level, environment: [String: String]) -> String {
        isStandardErrorTheJournal(environment: environment) ? "<\(priority(level))>" : ""
    }

    /// The syslog priority of a level (sd-daemon(3)).
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// `StreamLogHandler`'s line, `TIMESTAMP LEVEL label: …`, as `<N>LEVEL label: …`.
    static func journalLine(_ line: String) -> String {
        guard let space = line.firstIndex(of: " ") else { return line }
        let rest = line[line.index(after: space)...]
        let word = rest.prefix { $0 != " " }
        guard let level = Logger.Level(rawValue: String(word)) else { return line }
        return "<\(priority(level))>" + rest
    }

    mutating func write(_ string: String) {
        var standardError = StandardErrorStream()
        standardError.write(Self.journalLine(string))
    }
}

/// Writes to standard error, a whole string at a time.
struct StandardErrorStream: TextOutputStream, Sendable {
    mutating func write(_ string: String) {
        var text = string
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(STDERR_FILENO, bytes.baseAddress.map { $0 + offset }, bytes.count - offset)
                if written <= 0 { return }
                offset += written
            }
        }
    }
}
