/// Which of a run of like events are logged: the first, then at most one line per `interval`
/// that counts the ones left out since. A flood (connections refused in a loop, every commit
/// failing on a full disk) would otherwise write a line for each. A value: it reads no clock
/// and does no I/O; the caller passes the time.
public struct LogThrottle: Sendable {
    public enum Action: Equatable, Sendable {
        /// Log this event, saying how many were left out before it.
        case log(leftOut: Int)
        case leaveOut
    }

    public let interval: Duration
    private var lastLogged: ContinuousClock.Instant?
    private var leftOut = 0

    public init(interval: Duration = .seconds(10)) {
        self.interval = interval
    }

    /// The event happened at `now`.
    public mutating func happened(at now: ContinuousClock.Instant) -> Action {
        if let lastLogged, now < lastLogged + interval {
            leftOut += 1
            return .leaveOut
        }
        lastLogged = now
        defer { leftOut = 0 }
        return .log(leftOut: leftOut)
    }
}
