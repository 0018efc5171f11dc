/// Releases items in exact seq order, holding back any that arrive early.
///
/// Writers commit in seq order, but the events they cause may reach the fan-out in another
/// order; this puts them back.
public struct SequenceOrderer<Item> {
    public private(set) var next: UInt64
    private var pending: [UInt64: Item] = [:]

    /// - Parameter after: the seq already delivered; the next released is `after + 1`.
    public init(after: UInt64) { self.next = after + 1 }

    public var heldBack: Int { pending.count }

    /// Accepts one item and returns every item now releasable, in order. A seq already
    /// released is dropped.
    public mutating func accept(seq: UInt64, _ item: Item) -> [Item] {
        accept(seq: seq, item, replaces: { _ in true })
    }

    /// Like `accept(seq:_:)`, but when `seq` is already held back, `replaces` decides (given
    /// the held item) whether the new copy takes its place.
    public mutating func accept(seq: UInt64, _ item: Item, replaces: (Item) -> Bool) -> [Item] {
        guard seq >= next else { return [] }
        if seq != next {
            if let held = pending[seq], !replaces(held) { return [] }
            pending[seq] = item
            return []
        }
        var released = [item]
        next += 1
        while let following = pending.removeValue(forKey: next) {
            released.append(following)
            next += 1
        }
        return released
    }

    /// Gives up on every seq through `seq` (they can no longer be had): drops what is held
    /// back up to it and returns what is releasable after it, in order. Nothing happens when
    /// `seq` was released already.
    public mutating func skip(through seq: UInt64) -> [Item] {
        guard seq >= next else { return [] }
        for held in pending.keys where held <= seq { pending[held] = nil }
        next = seq + 1
        var released: [Item] = []
        while let following = pending.removeValue(forKey: next) {
            released.append(following)
            next += 1
        }
        return released
    }
}
extension SequenceOrderer: Sendable where Item: Sendable {}
