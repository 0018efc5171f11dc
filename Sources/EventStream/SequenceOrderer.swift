/// Releases items in exact seq order, holding back any that arrive early.
///
/// Writers commit in seq order, but the events they cause may reach the fan-out in another
/// order; this puts them back. Inlinable, so that the relay's use of it is specialised.
public struct SequenceOrderer<Item> {
    /// The next seq to release.
    @inlinable
    public var next: UInt64 { nextSeq }
    @usableFromInline var nextSeq: UInt64
    @usableFromInline var pending: [UInt64: Item] = [:]

    /// - Parameter after: the seq already delivered; the next released is `after + 1`.
    @inlinable
    public init(after: UInt64) { self.nextSeq = after + 1 }

    @inlinable
    public var heldBack: Int { pending.count }

    /// Accepts one item and returns every item now releasable, in order. A seq already
    /// released is dropped.
    @inlinable
    public mutating func accept(seq: UInt64, _ item: Item) -> [Item] {
        accept(seq: seq, item, replaces: { _ in true })
    }

    /// Like `accept(seq:_:)`, but when `seq` is already held back, `replaces` decides (given
    /// the held item) whether the new copy takes its place.
    @inlinable
    public mutating func accept(seq: UInt64, _ item: Item, replaces: (Item) -> Bool) -> [Item] {
        guard seq >= nextSeq else { return [] }
        if seq != nextSeq {
            if let held = pending[seq], !replaces(held) { return [] }
            pending[seq] = item
            return []
        }
        var released = [item]
        nextSeq += 1
        while let following = pending.removeValue(forKey: nextSeq) {
            released.append(following)
            nextSeq += 1
        }
        return released
    }

    /// Gives up on every seq through `seq` (they can no longer be had): drops what is held
    /// back up to it and returns what is releasable after it, in order. Nothing happens when
    /// `seq` was released already.
    public mutating func skip(through seq: UInt64) -> [Item] {
        guard seq >= nextSeq else { return [] }
        for held in pending.keys where held <= seq { pending[held] = nil }
        nextSeq = seq + 1
        var released: [Item] = []
        while let following = pending.removeValue(forKey: nextSeq) {
            released.append(following)
            nextSeq += 1
        }
        return released
    }
}
extension SequenceOrderer: Sendable where Item: Sendable {}
