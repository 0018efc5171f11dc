/// The requests the client has accepted and not yet seen answered: sent on the current
/// connection, or waiting for one. Bounded by `capacity`. Writes carry a `mid`, so sending one
/// again after a reconnect is safe (the daemon answers a repeat as a duplicate); reads are
/// simply asked again. Pure: the owner sends what it returns.
struct Outbox: Sendable {
    struct Entry: Sendable, Hashable {
        /// The frame's `id`; the answer carries it as `re`.
        let id: String
        let mid: String?
        /// The encoded frame, without framing.
        let frame: [UInt8]
        var sent: Bool
        /// Whether it went out on some connection, this one or an earlier one: one that never
        /// did cannot have been applied.
        var everSent: Bool
    }

    enum EnqueueResult: Sendable, Hashable {
        /// Put it on the wire now.
        case send([UInt8])
        /// Kept until the connection is ready.
        case queued
        case full
    }

    let capacity: Int
    private(set) var entries: [Entry] = []

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    var count: Int { entries.count }

    mutating func enqueue(id: String, mid: String?, frame: [UInt8], connectionReady: Bool) -> EnqueueResult {
        guard entries.count < capacity else { return .full }
        entries.append(Entry(id: id, mid: mid, frame: frame, sent: connectionReady, everSent: connectionReady))
        return connectionReady ? .send(frame) : .queued
    }

    /// The connection is ready (resumed): every entry not answered goes out, in the order
    /// accepted.
    mutating func connectionReady() -> [Entry] {
        for index in entries.indices {
            entries[index].sent = true
            entries[index].everSent = true
        }
        return entries
    }

    /// The connection is gone: what was sent on it may or may not have arrived, and is sent
    /// again on the next one.
    mutating func connectionLost() {
        for index in entries.indices { entries[index].sent = false }
    }

    func entry(id: String) -> Entry? {
        entries.first { $0.id == id }
    }

    /// The answer to `id` arrived (or its caller gave up): it is done.
    @discardableResult
    mutating func remove(id: String) -> Entry? {
        guard let index = entries.firstIndex(where: { $0.id == id }) else { return nil }
        return entries.remove(at: index)
    }

    /// Everything still waiting, for a client that closes.
    mutating func removeAll() -> [Entry] {
        defer { entries.removeAll() }
        return entries
    }
}
