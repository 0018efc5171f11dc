/// A log-linear histogram of nanosecond values in the manner of HdrHistogram: exact below
/// 1,024 ns, then 512 sub-buckets per power of two (relative error under 0.2 %), up to 2^41 ns.
/// One per event loop; merged at the end of a run.
struct Histogram: Sendable {
    private static let linearLimit: UInt64 = 1_024
    private static let subBuckets = 512
    private static let bucketCount = 1_024 + 31 * 512

    private(set) var counts: [UInt64]
    private(set) var count: UInt64 = 0
    private(set) var sum: UInt64 = 0
    private(set) var maximum: UInt64 = 0
    private(set) var minimum: UInt64 = .max

    init() { counts = Array(repeating: 0, count: Self.bucketCount) }

    mutating func record(_ value: UInt64) {
        counts[Self.index(of: value)] &+= 1
        count &+= 1
        sum &+= value
        if value > maximum { maximum = value }
        if value < minimum { minimum = value }
    }

    mutating func merge(_ other: Histogram) {
        guard other.count > 0 else { return }
        for index in counts.indices { counts[index] &+= other.counts[index] }
        count &+= other.count
        sum &+= other.sum
        maximum = max(maximum, other.maximum)
        minimum = min(minimum, other.minimum)
    }

    /// The value at quantile `q` (0...1): the smallest recorded bucket whose cumulative count
    /// reaches `q` of all, reported as the bucket's upper bound (so never optimistic).
    func value(atQuantile q: Double) -> UInt64 {
        guard count > 0 else { return 0 }
        let rank = max(1, UInt64((q * Double(count)).rounded(.up)))
        var cumulative: UInt64 = 0
        for index in counts.indices where counts[index] > 0 {
            cumulative += counts[index]
            if cumulative >= rank { return min(Self.upperBound(of: index), maximum) }
        }
        return maximum
    }

    var mean: Double { count == 0 ? 0 : Double(sum) / Double(count) }

    static func index(of value: UInt64) -> Int {
        if value < linearLimit { return Int(value) }
        let top = 63 - value.leadingZeroBitCount
        let shift = min(top - 9, 31)
        let sub = min(Int(value >> UInt64(shift)), 1_023) - subBuckets
        return 1_024 + (shift - 1) * subBuckets + sub
    }

    static func upperBound(of index: Int) -> UInt64 {
        if index < 1_024 { return UInt64(index) }
        let shift = (index - 1_024) / subBuckets + 1
        let sub = UInt64((index - 1_024) % subBuckets + subBuckets)
        return ((sub + 1) << UInt64(shift)) - 1
    }
}
