import EventStream
import NIOCore

/// Which broadcasts a connection has been sent, live or replayed, so that a resume sends every
/// one it missed that matches its subscriptions now, and none twice (PROTOCOL.md §5).
///
/// A broadcast reaches a connection live only when its type is among the connection's
/// subscriptions at that moment, or when the connection's own write caused it. So "everything
/// after the greeting arrived live" holds only while the subscriptions stayed as wide as the
/// resume's: a client that unsubscribed, missed broadcasts, subscribed again and resumed must
/// get the ones it missed.
///
/// The ledger is spans of seqs, each with the types sent in it: the live span from the last
/// change of subscriptions on, the earlier live spans, and the replays; plus the seqs of the
/// connection's own writes' broadcasts that came outside its subscriptions. Bounded: past
/// `maxSpans` spans or `maxOwn` own seqs the oldest are forgotten, and a later resume over
/// them may send one of those broadcasts again (the client sees its seq twice) rather than
/// miss one.
struct DeliveryLedger: Equatable, Sendable {
    /// Every broadcast with a seq in `after + 1 ... through` and a type in `types` was sent.
    struct Span: Equatable, Sendable {
        let after: UInt64
        let through: UInt64
        let types: TypeSet

        func covers(_ seq: UInt64, typeIndex: Int) -> Bool {
            seq > after && seq <= through && types.contains(typeIndex)
        }
    }

    static let maxSpans = 64
    static let maxOwn = 1024

    /// Closed spans, oldest first.
    private(set) var spans: [Span] = []
    /// From this seq on, broadcasts of `liveTypes` are sent as they come.
    private(set) var liveAfter: UInt64
    private(set) var liveTypes: TypeSet
    /// Seqs of the connection's own writes' broadcasts sent although not subscribed to, ascending.
    /// A ring, so forgetting the oldest costs nothing per broadcast; made at the first such
    /// seq (most connections never have one, and an idle connection keeps no buffer).
    private var ownRing: CircularBuffer<UInt64>?

    /// The seqs in `ownRing`, oldest first.
    var own: [UInt64] { ownRing.map(Array.init) ?? [] }

    /// A connection greeted at `helloSeq`, subscribed to `types`.
    init(helloSeq: UInt64, types: TypeSet) {
        liveAfter = helloSeq
        liveTypes = types
    }

    /// The subscriptions became `types` when `head` was the newest broadcast delivered on the
    /// connection's loop.
    mutating func subscriptionsChanged(to types: TypeSet, head: UInt64) {
        guard types != liveTypes else { return }
        if head > liveAfter { add(Span(after: liveAfter, through: head, types: liveTypes)) }
        liveAfter = max(liveAfter, head)
        liveTypes = types
    }

    /// The connection was sent its copy of the broadcast `seq` its own write caused.
    mutating func ownBroadcast(seq: UInt64, typeIndex: Int) {
        guard !liveTypes.contains(typeIndex) else { return }
        if let last = ownRing?.last, last >= seq { return }
        var ring = ownRing ?? CircularBuffer(initialCapacity: 16)
        ownRing = nil  // so that `ring` is the only reference and changes in place
        if ring.count == Self.maxOwn { ring.removeFirst() }
        ring.append(seq)
        ownRing = ring
    }

    /// A resume replayed every broadcast of `types` in `after + 1 ... through` not sent before.
    mutating func replayed(after: UInt64, through: UInt64, types: TypeSet) {
        guard through > after, !types.isEmpty else { return }
        add(Span(after: after, through: through, types: types))
    }

    /// Whether the broadcast `seq` of type `typeIndex` was sent (for a seq no newer than the
    /// newest delivered on the loop).
    func wasSent(_ seq: UInt64, typeIndex: Int) -> Bool {
        if seq > liveAfter, liveTypes.contains(typeIndex) { return true }
        if spans.contains(where: { $0.covers(seq, typeIndex: typeIndex) }) { return true }
        return ownContains(seq)
    }

    /// Where a replay of `types` from `after` needs to begin reading: past the seqs every one
    /// of whose broadcasts of those types was sent already (at most `through`).
    func firstUnsent(after: UInt64, types: TypeSet, through: UInt64) -> UInt64 {
        var cursor = after
        var moved = true
        while moved, cursor < through {
            moved = false
            if cursor >= liveAfter, liveTypes.covers(types) { return through }
            for span in spans where span.after <= cursor && span.through > cursor && span.types.covers(types) {
                cursor = span.through
                moved = true
            }
        }
        return min(cursor, through)
    }

    /// The newest seq up to which a replay of `types` may have to send anything, when `head`
    /// is the newest broadcast delivered on the loop: the live span sent everything after its
    /// start when it covers those types.
    func lastUnsent(types: TypeSet, head: UInt64) -> UInt64 {
        liveTypes.covers(types) ? min(liveAfter, head) : head
    }

    private mutating func add(_ span: Span) {
        spans.append(span)
        if spans.count > Self.maxSpans { spans.removeFirst(spans.count - Self.maxSpans) }
    }

    private func ownContains(_ seq: UInt64) -> Bool {
        guard let own = ownRing else { return false }
        var low = 0
        var high = own.count
        while low < high {
            let middle = (low + high) / 2
            let value = own[own.index(own.startIndex, offsetBy: middle)]
            if value == seq { return true }
            if value < seq { low = middle + 1 } else { high = middle }
        }
        return false
    }
}

extension TypeSet {
    /// Whether every type of `other` is in this set.
    fileprivate func covers(_ other: TypeSet) -> Bool { bits & other.bits == other.bits }
}
