import NIOCore
import Synchronization

/// Whether other daemons have lately committed to the database this one uses: set by the
/// journal follower each time it publishes another daemon's entries, read by the sequencer
/// (`BatchGathering`), since commits that share the database's one ordering lock are worth
/// filling while other daemons wait for it.
public final class OtherCommitters: Sendable {
    /// `NIODeadline.uptimeNanoseconds` when another daemon's entry was last published; 0: never.
    private let lastSeen = Atomic<UInt64>(0)

    public init() {}

    /// Another daemon's entry was published.
    func saw(at now: NIODeadline = .now()) {
        lastSeen.store(max(1, now.uptimeNanoseconds), ordering: .relaxed)
    }

    /// Whether another daemon's entry was published within `window` before `now`.
    public func committed(within window: TimeAmount, now: NIODeadline = .now()) -> Bool {
        let last = lastSeen.load(ordering: .relaxed)
        guard last > 0, now.uptimeNanoseconds >= last else { return last > 0 }
        return now.uptimeNanoseconds - last <= UInt64(max(0, window.nanoseconds))
    }
}
