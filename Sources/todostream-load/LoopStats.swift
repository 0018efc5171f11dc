import NIOCore

/// Counters and the latency histogram of one event loop. Every connection on that loop
/// records here (`stats.gaps += 1` reaches the counters through dynamic member lookup);
/// nothing else touches it.
@dynamicMemberLookup
final class LoopStats {
    private var counts = LoopSnapshot()
    /// Messages (or completed requests) not yet added to `RunState.progress`.
    var pendingProgress = 0

    subscript<Value>(dynamicMember keyPath: WritableKeyPath<LoopSnapshot, Value>) -> Value {
        get { counts[keyPath: keyPath] }
        // In place: recording into the histogram must not copy it.
        _modify { yield &counts[keyPath: keyPath] }
    }

    func countError(_ code: String) { counts.errors[code, default: 0] += 1 }

    func snapshot() -> LoopSnapshot { counts }
}

/// A copy of one loop's counters, or the sum of several.
struct LoopSnapshot: Sendable {
    var latency = LatencyHistogram()
    var receivedBytes = 0
    var deliveries = 0
    var gaps = 0
    var duplicates = 0
    var unmatched = 0
    var seqMismatches = 0
    var closedByPeer = 0
    var slowClosedByPeer = 0
    var errors: [String: Int] = [:]

    mutating func merge(_ other: LoopSnapshot) {
        latency.merge(other.latency)
        receivedBytes += other.receivedBytes
        deliveries += other.deliveries
        gaps += other.gaps
        duplicates += other.duplicates
        unmatched += other.unmatched
        seqMismatches += other.seqMismatches
        closedByPeer += other.closedByPeer
        slowClosedByPeer += other.slowClosedByPeer
        errors.merge(other.errors, uniquingKeysWith: +)
    }
}

/// One `LoopStats` per event loop of the group.
///
/// `@unchecked Sendable` invariant: the dictionary is immutable after init, and each
/// `LoopStats` is read and written only on the event loop it is keyed by (connections use
/// `stats(for: context.eventLoop)`; the collector reads through `loop.submit`).
final class StatsTable: @unchecked Sendable {
    private let byLoop: [ObjectIdentifier: LoopStats]
    let loops: [any EventLoop]

    init(group: any EventLoopGroup) {
        var loops: [any EventLoop] = []
        var byLoop: [ObjectIdentifier: LoopStats] = [:]
        for loop in group.makeIterator() {
            loops.append(loop)
            byLoop[ObjectIdentifier(loop)] = LoopStats()
        }
        self.loops = loops
        self.byLoop = byLoop
    }

    func stats(for loop: any EventLoop) -> LoopStats {
        loop.preconditionInEventLoop()
        return byLoop[ObjectIdentifier(loop)]!
    }

    func collect() async throws -> LoopSnapshot {
        var total = LoopSnapshot()
        for loop in loops {
            let snapshot = try await loop.submit { self.stats(for: loop).snapshot() }.get()
            total.merge(snapshot)
        }
        return total
    }
}
