import EventStream

/// The client mutation ids (`mid`) of the writes the journal still holds, each with the journal
/// entry its write produced: what `GroupCommitStore` answers a repeated `mid` with.
///
/// Bounded by the journal: an id is remembered exactly as long as its entry is retained. It is
/// loaded from the journal at open, grows with every commit, and is trimmed with the same
/// bounds as the journal's prune (`JournalPrune`). Entries are kept in seq order too, so a trim
/// drops from the front and never scans the whole map.
struct RememberedMutations: Sendable {
    /// A remembered write: its journal entry and when it was recorded (ms since 1970).
    struct Applied: Sendable {
        let entry: JournalEntry
        let recordedAt: Int64
    }

    private var byMid: [MutationKey: Applied] = [:]
    /// Mids in seq order; `order[start...]` are live.
    private var order: [MutationKey] = []
    private var start = 0

    init() {}

    /// The remembered entries, in seq order (as loaded from the journal).
    init(_ applied: [Applied]) {
        for item in applied.sorted(by: { $0.entry.seq < $1.entry.seq }) { remember(item) }
    }

    var count: Int { byMid.count }

    subscript(mid: String) -> Applied? { byMid[MutationKey(mid)] }

    /// Adds the committed writes' entries that carry a mid (call in seq order).
    mutating func remember(_ item: Applied) {
        guard let mid = item.entry.mid.map(MutationKey.init), byMid.updateValue(item, forKey: mid) == nil else {
            return
        }
        order.append(mid)
    }

    /// Forgets what the journal's prune drops: entries before `keepFrom`, and those recorded
    /// before `cutoff`. Entries are in seq order and recorded in that order, so the trim stops
    /// at the first one kept.
    mutating func trim(_ prune: JournalPrune) {
        while start < order.count {
            let mid = order[start]
            guard let item = byMid[mid] else {
                start += 1
                continue
            }
            let expired = item.entry.seq < prune.keepFrom || prune.cutoff.map { item.recordedAt < $0 } == true
            guard expired else { break }
            byMid[mid] = nil
            start += 1
        }
        if start > 1024, start * 2 > order.count {
            order.removeFirst(start)
            start = 0
        }
    }
}

/// What one prune of the journal drops: every entry with a seq before `keepFrom`, and (when
/// the journal has an age limit) every entry recorded before `cutoff` (ms since 1970).
struct JournalPrune: Sendable, Hashable {
    let keepFrom: UInt64
    let cutoff: Int64?

    /// The bounds for a journal whose newest entry is `head`, at wall-clock time `now` (ms).
    init(head: UInt64, retention: JournalRetention, now: Int64) {
        keepFrom = head > retention.maxEntries ? head - retention.maxEntries + 1 : 0
        cutoff = retention.maxAgeSeconds > 0 ? now - Int64(clamping: retention.maxAgeSeconds) * 1000 : nil
    }
}
