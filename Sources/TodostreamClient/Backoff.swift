/// Jittered exponential backoff: attempt n waits between half and all of
/// `min(maximum, initial × 2ⁿ)` ("equal jitter"), so that clients cut off together do not
/// come back together.
public struct Backoff: Sendable, Hashable {
    /// The first wait's ceiling; one under `smallestInitial` (zero would make every wait zero,
    /// a reconnect loop with no pause) is taken as it.
    public var initial: Duration
    public var maximum: Duration

    /// The least `initial` that is used.
    public static let smallestInitial = Duration.milliseconds(1)

    public init(initial: Duration = .milliseconds(250), maximum: Duration = .seconds(30)) {
        self.initial = max(initial, Self.smallestInitial)
        self.maximum = max(maximum, self.initial)
    }

    /// The wait before reconnect attempt `attempt` (0 for the first retry); `random` is a
    /// number in 0..<1.
    public func delay(attempt: Int, random: Double) -> Duration {
        // The properties can be set after `init`: the same bounds apply.
        let initial = max(initial, Self.smallestInitial)
        let maximum = max(maximum, initial)
        // initial × 2^attempt, made only while under `maximum` (so it cannot overflow), in
        // one step whatever `attempt` is.
        let exponent = min(max(attempt, 0), 62)
        let factor = 1 << exponent
        let ceiling = Double(factor) < maximum / initial ? initial * factor : maximum
        let fraction = 0.5 + 0.5 * min(max(random, 0), 1)
        return ceiling * fraction
    }
}
