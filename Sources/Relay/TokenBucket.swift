import NIOCore

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
struct TokenBucket {
    private var tokens: Double
    private var last: NIODeadline

    init(burst: Double, now: NIODeadline = .now()) {
        tokens = burst
        last = now
    }

    mutating func take(rate: Double, burst: Double, now: NIODeadline = .now()) -> Bool {
        let elapsed = Double((now - last).nanoseconds) / 1e9
        last = now
        tokens = min(burst, tokens + max(0, elapsed) * rate)
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
