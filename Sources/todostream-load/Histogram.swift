import Histogram

/// Latencies in nanoseconds, recorded in an HdrHistogram (hdrhistogram-swift): three
/// significant digits from 1 ns up to about 10 minutes. One per event loop; merged at the end
/// of a run.
struct LatencyHistogram: Sendable {
    private static let highest: UInt64 = 600_000_000_000

    private var histogram = Histogram<UInt64>(highestTrackableValue: highest, numberOfSignificantValueDigits: .three)

    var count: UInt64 { histogram.totalCount }
    var maximum: UInt64 { histogram.max }
    var mean: Double { histogram.mean }

    mutating func record(_ value: UInt64) {
        // Values past the trackable range count as the range's top.
        _ = histogram.record(min(value, Self.highest))
    }

    mutating func merge(_ other: LatencyHistogram) {
        histogram.add(other.histogram)
    }

    /// The value at quantile `q` (0...1), as HdrHistogram reports it (the highest value
    /// equivalent to the bucket reached, so never optimistic).
    func value(atQuantile q: Double) -> UInt64 {
        count == 0 ? 0 : histogram.valueAtPercentile(q * 100)
    }
}
