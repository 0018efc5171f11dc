/// How much of the journal to keep. Pruning runs inside the write batches, never on its own
/// hot path.
public struct JournalRetention: Sendable, Hashable {
    /// Keep at most this many newest entries.
    public var maxEntries: UInt64
    /// Drop entries older than this many seconds (0 keeps them regardless of age).
    public var maxAgeSeconds: UInt64

    public init(maxEntries: UInt64 = 100_000, maxAgeSeconds: UInt64 = 7 * 86_400) {
        self.maxEntries = maxEntries
        self.maxAgeSeconds = maxAgeSeconds
    }
}
