import Foundation
import NIOConcurrencyHelpers

/// Which journal entries are this process's own, for the journal follower.
///
/// Every batch this process commits writes its journal entries with an `origin` of its own:
/// `INSTANCE:N`, where `INSTANCE` is random per process. The broadcasts of a committed batch go
/// out through the local path (with the requester's `re` copy), so the follower skips every
/// entry whose origin carries this process's instance, and publishes everything else.
///
/// The one exception is a batch whose outcome could not be learned (its commit went
/// unanswered and the database could not be asked in time): it is *abandoned*, answered
/// `unavailable`, and if it did commit after all, the follower publishes its entries like
/// anyone else's, so every client still sees them. A follower that passes an entry of a batch
/// still in flight records its seq, so that a batch in doubt is known to have committed.
final class LocalClaims: Sendable {
    private enum Claim {
        /// Being committed; `firstSeen` is the first seq the follower passed of it.
        case inFlight(firstSeen: UInt64?)
        /// Its outcome is unknown and it was answered `unavailable`: publish whatever of it is found.
        case abandoned
    }

    /// At most this many abandoned batches are remembered (each is a database outage's worth).
    static let maxAbandoned = 1024
    /// At most this many committed ranges wait for the follower to pass them (`committed`).
    static let maxCommittedRanges = 1024

    /// This process's part of every origin.
    let instance: String
    private let prefix: String
    /// What every origin of this process starts with.
    var originPrefix: String { prefix }
    private let state = NIOLockedValueBox<(next: UInt64, claims: [String: Claim], abandoned: Int)>((1, [:], 0))
    /// Seqs this process committed and answered (so durable), oldest first, not yet passed by
    /// the follower.
    private let ranges = NIOLockedValueBox<[ClosedRange<UInt64>]>([])
    /// Called after a batch in flight is finished (the journal follower's wake-up).
    ///
    /// The closure is held in a class, never as the box's value itself: a generic container
    /// whose value is a function type re-wraps the function in a reabstraction thunk on every
    /// `inout` access, so each `finish` would add two thunks to the chain the next call walks
    /// (a cost that grows with every commit, and a stack overflow after enough of them).
    private let settled = NIOLockedValueBox<Hook?>(nil)

    private final class Hook: Sendable {
        let call: @Sendable () -> Void
        init(_ call: @escaping @Sendable () -> Void) { self.call = call }
    }

    init(instance: String = LocalClaims.randomInstance()) {
        self.instance = instance
        self.prefix = instance + ":"
    }

    static func randomInstance() -> String {
        String(UUID().uuidString.lowercased().filter { $0 != "-" }.prefix(16))
    }

    /// Which entries' payloads the journal follower need not read: this process's own (the
    /// local path publishes them), except the abandoned batches', which it publishes itself.
    /// A batch abandoned after the read is published from a second read (JournalFollower).
    struct Withheld: Sendable {
        /// Origins that start with this (none when empty).
        let prefix: String
        /// Origins among them whose payloads are read anyway.
        let except: [String]

        /// No payload withheld.
        static let nothing = Withheld(prefix: "", except: [])
    }

    /// What the follower's next read may withhold.
    func withheld() -> Withheld {
        let abandoned: [String] = state.withLockedValue { state in
            guard state.abandoned > 0 else { return [] }
            return state.claims.compactMap { origin, claim in
                if case .abandoned = claim { origin } else { nil }
            }
        }
        return Withheld(prefix: prefix, except: abandoned)
    }

    /// A fresh origin for a batch about to be committed, already claimed.
    func begin() -> String {
        state.withLockedValue { state in
            let origin = prefix + String(state.next)
            state.next += 1
            state.claims[origin] = .inFlight(firstSeen: nil)
            return origin
        }
    }

    /// The batch committed and its broadcasts went out locally, or it certainly did not commit.
    func finish(_ origin: String) {
        state.withLockedValue { state in
            if case .abandoned = state.claims[origin] { state.abandoned -= 1 }
            state.claims[origin] = nil
        }
        settled.withLockedValue { $0 }?.call()
    }

    /// Whether a batch of this process is being committed: a notification may be its own.
    var committing: Bool {
        state.withLockedValue { state in
            state.claims.values.contains { if case .inFlight = $0 { true } else { false } }
        }
    }

    /// `wake` is called each time a batch in flight is finished (nil: nothing is).
    func whenSettled(_ wake: (@Sendable () -> Void)?) {
        let hook = wake.map(Hook.init)
        settled.withLockedValue { $0 = hook }
    }

    /// Called by the follower for each entry it reads: true when the entry is this process's
    /// (the follower leaves it to the local path), false when it is to be published.
    func passedByFollower(origin: String?, seq: UInt64) -> Bool {
        guard let origin, origin.hasPrefix(prefix) else { return false }
        return state.withLockedValue { state in
            switch state.claims[origin] {
            case .abandoned:
                return false
            case .inFlight(let firstSeen):
                if firstSeen == nil { state.claims[origin] = .inFlight(firstSeen: seq) }
                return true
            case nil:
                return true
            }
        }
    }

    /// A batch of this process committed the seqs `first...last` and is durable: the follower
    /// may step over them without reading them (`ownThrough`).
    func committed(first: UInt64, last: UInt64) {
        guard first <= last else { return }
        ranges.withLockedValue { ranges in
            ranges.append(first...last)
            if ranges.count > Self.maxCommittedRanges { ranges.removeFirst(ranges.count - Self.maxCommittedRanges) }
        }
    }

    /// The last seq of the run of this process's committed seqs that starts right after `seq`
    /// (nil when the next seq is not one), forgetting every range at or before it.
    func ownThrough(after seq: UInt64) -> UInt64? {
        ranges.withLockedValue { ranges in
            var through = seq
            var passed = 0
            for range in ranges {
                if range.upperBound <= through {
                    passed += 1
                } else if range.lowerBound == through + 1 {
                    through = range.upperBound
                    passed += 1
                } else {
                    break
                }
            }
            ranges.removeFirst(passed)
            return through > seq ? through : nil
        }
    }

    /// Settles a batch whose commit went unanswered and whose outcome the database could not
    /// tell: when the follower has already passed one of its entries, the batch committed and
    /// this returns the first seq it saw. Otherwise the batch is abandoned (returns nil).
    func settleInDoubt(_ origin: String) -> UInt64? {
        state.withLockedValue { state in
            if case .inFlight(let firstSeen?) = state.claims[origin] {
                state.claims[origin] = nil
                return firstSeen
            }
            if state.abandoned >= Self.maxAbandoned,
                let oldest = state.claims.first(where: { if case .abandoned = $0.value { true } else { false } })
            {
                state.claims[oldest.key] = nil
                state.abandoned -= 1
            }
            state.claims[origin] = .abandoned
            state.abandoned += 1
            return nil
        }
    }
}
