import EventStream
import TodoApp

/// The writes a store has accepted and not yet committed, in arrival order, taken off in
/// group-commit batches. Both engines' store actors keep one; the actor runs a single commit
/// loop at a time (`committing`) that takes `nextBatch()` until it returns nil.
struct WriteQueue {
    typealias Answer = CheckedContinuation<Result<SavedTodo, AppError>, Never>

    /// A journal prune rides along with every this-many commits.
    static let commitsPerPrune = 64

    private(set) var pending: [(write: TodoWrite, answer: Answer)] = []
    /// Whether the actor's commit loop is running.
    private(set) var committing = false
    private let maxBatch: Int
    private let maxPending: Int
    private var commitsSincePrune = 0
    /// Commit latency, one observation per group commit.
    private(set) var commitLatency = LatencyHistogram()

    /// - Parameter maxPending: writes that may wait at once; past it `hasRoom` is false.
    init(maxBatch: Int, maxPending: Int = .max) {
        self.maxBatch = max(1, maxBatch)
        self.maxPending = maxPending
    }

    var hasRoom: Bool { pending.count < maxPending }

    /// Queues a write (in commit order, which admits the session's next write; see
    /// `RequestTicket`). Returns true when the caller must start the commit loop.
    mutating func enqueue(_ write: TodoWrite, _ answer: Answer, ticket: RequestTicket?) -> Bool {
        pending.append((write, answer))
        ticket?.admitted()
        guard !committing else { return false }
        committing = true
        return true
    }

    /// The next batch; nil (and the loop ends) once nothing is waiting.
    mutating func nextBatch() -> [(write: TodoWrite, answer: Answer)]? {
        guard !pending.isEmpty else {
            committing = false
            return nil
        }
        let take = min(maxBatch, pending.count)
        let batch = Array(pending.prefix(take))
        pending.removeFirst(take)
        return batch
    }

    /// Counts a commit; true when this one should also prune the journal.
    mutating func pruneDue() -> Bool {
        commitsSincePrune += 1
        guard commitsSincePrune >= Self.commitsPerPrune else { return false }
        commitsSincePrune = 0
        return true
    }

    mutating func recordCommit(since started: ContinuousClock.Instant) {
        commitLatency.record(ContinuousClock.now - started)
    }

    /// What `/metrics` shows of the queue.
    var metrics: (commitLatency: LatencyHistogram, pendingWrites: Int) { (commitLatency, pending.count) }
}
