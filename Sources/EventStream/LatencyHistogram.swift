/// A latency histogram with fixed buckets, as Prometheus exposes them: cumulative counts per
/// upper bound, a sum and a count. A value type: each owner (an event loop's shard, the store
/// actor) keeps its own without locks, and snapshots are merged when they are read.
public struct LatencyHistogram: Sendable, Equatable {
    /// Upper bounds in seconds, from 50 µs to 2.5 s.
    public static let bounds: [Double] = [
        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
    ]

    /// Observations per bucket (not cumulative); the last counts those over every bound.
    public private(set) var buckets: [UInt64]
    public private(set) var count: UInt64 = 0
    public private(set) var sumNanoseconds: UInt64 = 0

    public init() { buckets = Array(repeating: 0, count: Self.bounds.count + 1) }

    public mutating func record(nanoseconds: UInt64) {
        let seconds = Double(nanoseconds) / 1e9
        var index = 0
        while index < Self.bounds.count, seconds > Self.bounds[index] { index += 1 }
        buckets[index] += 1
        count += 1
        sumNanoseconds &+= nanoseconds
    }

    public mutating func record(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        record(nanoseconds: UInt64(max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000)))
    }

    public mutating func merge(_ other: LatencyHistogram) {
        for index in buckets.indices { buckets[index] += other.buckets[index] }
        count += other.count
        sumNanoseconds &+= other.sumNanoseconds
    }

    /// The Prometheus text lines of this histogram (`# HELP`/`# TYPE` included).
    public func prometheus(name: String, help: String) -> [String] {
        var lines = ["# HELP \(name) \(help)", "# TYPE \(name) histogram"]
        var cumulative: UInt64 = 0
        for (index, bound) in Self.bounds.enumerated() {
            cumulative += buckets[index]
            lines.append("\(name)_bucket{le=\"\(bound)\"} \(cumulative)")
        }
        lines.append("\(name)_bucket{le=\"+Inf\"} \(count)")
        lines.append("\(name)_sum \(Double(sumNanoseconds) / 1e9)")
        lines.append("\(name)_count \(count)")
        return lines
    }
}
