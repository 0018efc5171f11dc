import NIOCore

/// Which refused connections are logged: the first, then at most one line per `interval` that
/// counts the ones left out since. A flood of connections over the limits (a client retrying in
/// a loop, a scan) would otherwise write a warning for each. A value: no clock, no I/O.
struct RefusalLog: Sendable {
    enum Action: Equatable {
        /// Log this refusal, saying how many were left out before it.
        case log(leftOut: Int)
        case leaveOut
    }

    let interval: TimeAmount
    private var lastLogged: NIODeadline?
    private var leftOut = 0

    init(interval: TimeAmount = .seconds(10)) {
        self.interval = interval
    }

    /// A connection was refused at `now`.
    mutating func refused(at now: NIODeadline) -> Action {
        if let lastLogged, now < lastLogged + interval {
            leftOut += 1
            return .leaveOut
        }
        lastLogged = now
        defer { leftOut = 0 }
        return .log(leftOut: leftOut)
    }
}
