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

    /// An answer to a request of `kind` (sent within the window); nil latency: it failed.
    func recordKind(_ kind: RequestKind, latency: UInt64?) { counts.recordKind(kind, latency: latency) }

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
    /// Requests answered with an error, sent within the measured window.
    var failedRequests = 0
    /// Per `RequestKind` (indexed by its raw value; empty until a kind is recorded): answers
    /// to requests sent within the measured window.
    var kinds: [KindStats] = []
    var errors: [String: Int] = [:]

    mutating func recordKind(_ kind: RequestKind, latency: UInt64?) {
        if kinds.isEmpty { kinds = RequestKind.allCases.map { _ in KindStats() } }
        if let latency {
            kinds[kind.rawValue].answered += 1
            kinds[kind.rawValue].latency.record(latency)
        } else {
            kinds[kind.rawValue].failed += 1
        }
    }

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
        failedRequests += other.failedRequests
        if kinds.isEmpty {
            kinds = other.kinds
        } else if !other.kinds.isEmpty {
            for index in kinds.indices { kinds[index].merge(other.kinds[index]) }
        }
        errors.merge(other.errors, uniquingKeysWith: +)
    }
}

/// Answers to one kind of request.
struct KindStats: Sendable {
    /// Answered without an error (their latencies are in `latency`).
    var answered = 0
    /// Answered with an error.
    var failed = 0
    var latency = LatencyHistogram()

    mutating func merge(_ other: KindStats) {
        answered += other.answered
        failed += other.failed
        latency.merge(other.latency)
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
