import EventStream
import NIOConcurrencyHelpers

/// The journal entries this process is committing or has committed but the journal follower
/// has not passed yet. Their broadcasts go out through the local path (with the requester's
/// `re` copy), so the follower must not publish them; everything else it reads is another
/// daemon's and it publishes that.
///
/// A claim is taken before `COMMIT` (the notification of our own commit can reach the follower
/// before `COMMIT` returns) and holds the exact payload, so a seq that a rolled-back batch of
/// ours had taken and another daemon then committed is recognised as foreign. Bounded: the
/// follower removes each claim as it passes it, and a failed batch removes its own.
final class LocalClaims: Sendable {
    private struct Claim {
        let payload: [UInt8]
        let type: String
        /// The follower found another daemon's entry at this seq: our batch did not commit.
        var foreign = false
    }

    private let claims = NIOLockedValueBox<[UInt64: Claim]>([:])

    func claim(_ entries: [JournalEntry]) {
        claims.withLockedValue { claims in
            for entry in entries { claims[entry.seq] = Claim(payload: entry.payload, type: entry.type) }
        }
    }

    /// Called by the follower for each entry it reads, in seq order: true when the entry is
    /// ours (the follower then leaves it to the local path, and the claim is dropped), false
    /// when another daemon wrote it.
    func passedByFollower(_ entry: JournalEntry) -> Bool {
        claims.withLockedValue { claims in
            guard let claim = claims[entry.seq], !claim.foreign else { return false }
            guard claim.payload == entry.payload, claim.type == entry.type else {
                // Our batch that had taken this seq never committed; someone else's did. The
                // failed batch drops the mark when it settles.
                claims[entry.seq]?.foreign = true
                return false
            }
            claims[entry.seq] = nil
            return true
        }
    }

    /// Settles a batch whose COMMIT failed or whose outcome is unknown. When the follower has
    /// already passed one of its entries as ours, the batch committed: returns true. Otherwise
    /// drops its claims (so the follower publishes whatever it later finds at those seqs) and
    /// returns false.
    func settleFailed(_ entries: [JournalEntry]) -> Bool {
        claims.withLockedValue { claims in
            let committed = entries.contains { claims[$0.seq] == nil }
            // A committed batch keeps its other claims: its broadcasts still go out locally.
            if !committed { for entry in entries { claims[entry.seq] = nil } }
            return committed
        }
    }
}
