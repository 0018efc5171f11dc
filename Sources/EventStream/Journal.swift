/// One broadcast as it was first sent: its place in the order, its type, its encoded payload
/// (JSON bytes), and the client's mutation id (`mid`) of the write that caused it, if any.
public struct JournalEntry: Sendable, Hashable {
    public let seq: UInt64
    public let type: String
    public let payload: [UInt8]
    public let mid: String?

    public init(seq: UInt64, type: String, payload: [UInt8], mid: String? = nil) {
        self.seq = seq
        self.type = type
        self.payload = payload
        self.mid = mid
    }
}

/// What a journal holds right now.
public struct JournalPosition: Sendable, Hashable {
    /// Identifies the journal; changes only when the journal is reset.
    public let epoch: String
    /// The newest seq written (0 when empty).
    public let head: UInt64
    /// The oldest seq still retained (head + 1 when nothing is retained).
    public let oldest: UInt64

    public init(epoch: String, head: UInt64, oldest: UInt64) {
        self.epoch = epoch
        self.head = head
        self.oldest = oldest
    }
}

/// The durable record of broadcasts, read to resume clients.
public protocol JournalReader: Sendable {
    func position() async throws -> JournalPosition
    /// Entries with `after < seq <= through`, in seq order.
    func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry]
}
