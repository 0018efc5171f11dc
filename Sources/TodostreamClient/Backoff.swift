/// Jittered exponential backoff: attempt n waits between half and all of
/// `min(maximum, initial × 2ⁿ)` ("equal jitter"), so that clients cut off together do not
/// come back together.
public struct Backoff: Sendable, Hashable {
    public var initial: Duration
    public var maximum: Duration

    public init(initial: Duration = .milliseconds(250), maximum: Duration = .seconds(30)) {
        self.initial = initial
        self.maximum = max(maximum, initial)
    }

    /// The wait before reconnect attempt `attempt` (0 for the first retry); `random` is a
    /// number in 0..<1.
    public func delay(attempt: Int, random: Double) -> Duration {
        var ceiling = initial
        var step = 0
        while step < attempt, ceiling < maximum {
            ceiling = ceiling * 2
            step += 1
        }
        ceiling = min(ceiling, maximum)
        let fraction = 0.5 + 0.5 * min(max(random, 0), 1)
        return ceiling * fraction
    }
}
