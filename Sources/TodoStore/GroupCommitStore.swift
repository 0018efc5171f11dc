import EventStream
import Foundation
import TodoApp

/// The todo store: todos held in memory, every write committed durably through a backend, one
/// transaction per batch.
///
/// The sequencer hands it a whole batch of reads and writes (`execute`); each write is applied
/// to the stored todo as the writes before it in the batch left it, gets the next seq, and is
/// answered only after the batch commits. A failed commit changes nothing.
public actor GroupCommitStore: TodoStore, JournalReader {
    private let backend: any StorageBackend
    private let now: @Sendable () -> Timestamp
    /// The store runs here: for SQLite the store's thread, where the sequencer runs too and the
    /// commit is a synchronous call, so a batch's commit crosses no thread.
    private let executor: any SerialExecutor

    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    private var todos: [UUID: (rowID: Int64, todo: Todo)] = [:] {
        didSet { sortedTodos = nil }
    }
    /// Every committed todo in list order, with the row of each, kept from one list read to
    /// the next until `todos` changes (a list read would otherwise copy and sort them all each
    /// time).
    private var sortedTodos: (todos: [Todo], rowIDs: [Int64])?
    private var nextRowID: Int64 = 1
    private var epoch: String
    private var head: UInt64
    private var healthy = true
    /// A batch is being executed; `waiting` are the batches queued behind it.
    private var executing = false
    private var waiting: [CheckedContinuation<Void, Never>] = []
    public private(set) var commitLatency = LatencyHistogram()
    /// Commits since the journal was last pruned: the first commit after a start prunes, so
    /// that a retention lowered at a restart holds from the first write on.
    private var commitsSincePrune = GroupCommitStore.commitsPerPrune - 1
    /// The mids of the writes the journal holds, trimmed with it.
    private var mutations: RememberedMutations
    /// A journal prune rides along with every this-many commits.
    static let commitsPerPrune = 64

    init(
        backend: any StorageBackend,
        state: LoadedState,
        executor: any SerialExecutor,
        now: @escaping @Sendable () -> Timestamp
    ) {
        self.backend = backend
        self.executor = executor
        self.now = now
        self.epoch = state.position.epoch
        self.head = state.position.head
        self.mutations = RememberedMutations(state.mutations)
        for entry in state.todos {
            todos[entry.todo.id] = entry
            nextRowID = max(nextRowID, entry.rowID + 1)
        }
    }

    /// Whether storage takes writes: the last commit succeeded, and (while it did) the store's
    /// files are still there (`StorageBackend.checkFiles`, no write). After one failed, each look
    /// (at most one a second) makes a probe write, so that the store reports healthy again as
    /// soon as storage takes writes (a disk with room again), without waiting for a client's
    /// write: a load balancer that took the daemon out of rotation sends it none.
    public var lastSeenHealthy: Bool { healthy }

    public var isHealthy: Bool {
        get async {
            guard !executing else { return healthy }
            if healthy {
                // Files deleted or replaced under the daemon: down now, not at the next write.
                do { try await backend.checkFiles() } catch { healthy = false }
                return healthy
            }
            let now = ContinuousClock.now
            if let last = lastProbe, now - last < probeInterval { return healthy }
            lastProbe = now
            executing = true
            defer { handOn() }
            do {
                try await backend.probe()
                healthy = true
            } catch {
                healthy = false
            }
            return healthy
        }
    }

    /// The batch (or probe) that ran is done: the next waiting one runs, or none is running.
    private func handOn() {
        if waiting.isEmpty {
            executing = false
        } else {
            // Handed straight to the next batch: `executing` stays true.
            waiting.removeFirst().resume()
        }
    }

    /// When the last probe write was made.
    private var lastProbe: ContinuousClock.Instant?
    /// Probe writes are this far apart at least.
    private(set) var probeInterval: Duration = .seconds(1)

    func setProbeInterval(_ interval: Duration) { probeInterval = interval }

    /// The probe write itself (for tests).
    func probeForTests() async throws { try await backend.probe() }

    public var count: Int { todos.count }

    /// Applies the batch in order against the todos as the batch leaves them, commits every
    /// write in one transaction, and answers only then. A failed commit changes nothing: its
    /// writes answer `unavailable` and its reads answer from what is stored.
    public func execute(_ batch: [ModelRequest]) async -> [ModelAnswer] {
        // One batch at a time: the next one stages on what this one commits. (The sequencer
        // never overlaps batches; other callers, such as tests, may.)
        if executing {
            await withCheckedContinuation { waiting.append($0) }
        }
        executing = true
        defer { handOn() }
        let time = now()
        var staged: [UUID: (rowID: Int64, todo: Todo)] = [:]
        var rowID = nextRowID
        var seq = head
        var records: [CommitRecord] = []
        var answers: [ModelAnswer] = []
        answers.reserveCapacity(batch.count)
        // The batch's own writes with a mid, by mid: a second one in the batch is a duplicate.
        var stagedMids: [MutationKey: JournalEntry] = [:]
        for request in batch {
            switch request {
            case .read(let read):
                answers.append(.read(.success(todos(id: read.id, staged: staged))))
            case .write(let write):
                if let mid = write.mid, let applied = stagedMids[MutationKey(mid)] ?? mutations[mid]?.entry {
                    answers.append(.write(Self.duplicate(of: applied)))
                    continue
                }
                let stored = staged[write.id] ?? todos[write.id]
                switch write.apply(to: stored?.todo, now: time) {
                case .success(let todo):
                    let row: Int64
                    if let stored {
                        row = stored.rowID
                    } else {
                        row = rowID
                        rowID += 1
                    }
                    seq += 1
                    let record = TodoWireCodec.broadcastRecord(for: todo)
                    let entry = JournalEntry(seq: seq, type: record.type, payload: record.payload, mid: write.mid)
                    records.append(CommitRecord(rowID: row, todo: todo, entry: entry))
                    if let mid = write.mid { stagedMids[MutationKey(mid)] = entry }
                    // Sized once for the batch at its first write, not grown write by write.
                    if staged.isEmpty { staged.reserveCapacity(batch.count) }
                    staged[todo.id] = (row, todo)
                    answers.append(
                        .write(.success(SavedTodo(todo: todo, seq: seq, broadcastPayload: record.payload)))
                    )
                case .failure(let error):
                    answers.append(.write(.failure(error)))
                }
            }
        }
        guard !records.isEmpty else { return answers }
        let recordedAt = Timestamp.now().millisecondsSince1970
        let prune = pruneDue() ? JournalPrune(head: seq, retention: backend.retention, now: recordedAt) : nil
        let started = ContinuousClock.now
        do {
            try await backend.commit(records, recordedAt: recordedAt, prune: prune)
            commitLatency.record(ContinuousClock.now - started)
            healthy = true
            for (id, entry) in staged { todos[id] = entry }
            nextRowID = rowID
            head = seq
            if !stagedMids.isEmpty {
                for record in records where record.entry.mid != nil {
                    mutations.remember(RememberedMutations.Applied(entry: record.entry, recordedAt: recordedAt))
                }
            }
            if let prune { mutations.trim(prune) }
            return answers
        } catch {
            commitLatency.record(ContinuousClock.now - started)
            healthy = false
            return zip(batch, answers).map { request, answer in
                switch (request, answer) {
                case (.read(let read), _): return .read(.success(todos(id: read.id, staged: [:])))
                case (_, .write(.success)): return .write(.failure(.unavailable))
                default: return answer
                }
            }
        }
    }

    /// The answer to a write whose mid was already applied: that write's outcome, as its
    /// journal entry holds it; nothing is written.
    private static func duplicate(of applied: JournalEntry) -> Result<SavedTodo, AppError> {
        guard let todo = TodoWireCodec.todo(inBroadcastPayload: applied.payload) else { return .failure(.unavailable) }
        return .success(SavedTodo(todo: todo, seq: applied.seq, broadcastPayload: applied.payload, duplicate: true))
    }

    /// Mids remembered (those of the writes the journal still holds).
    public var rememberedMutations: Int { mutations.count }

    /// The todos a read sees: `staged` over what is committed.
    private func todos(id: UUID?, staged: [UUID: (rowID: Int64, todo: Todo)]) -> [Todo] {
        if let id { return (staged[id] ?? todos[id]).map { [$0.todo] } ?? [] }
        guard staged.isEmpty else {
            // Writes to stored todos keep each one's place (its creation time and row): the
            // committed order holds, with the staged versions put in at their places, found by
            // binary search on those two (rows are never reused, so the todo found there is
            // the staged one's). A staged new todo, with a row of its own, is found nowhere:
            // then the list is sorted anew.
            let (order, rowIDs) = committedOrder()
            var listed = order
            for entry in staged.values {
                guard let place = Self.place(of: entry.todo.createdAt, entry.rowID, in: order, rowIDs) else {
                    var all = todos
                    for (id, entry) in staged { all[id] = entry }
                    return Self.listOrder(all).map(\.todo)
                }
                listed[place] = entry.todo
            }
            return listed
        }
        return committedOrder().todos
    }

    /// The committed todos in list order, sorted once after each change, with their rows.
    private func committedOrder() -> (todos: [Todo], rowIDs: [Int64]) {
        if let sortedTodos { return sortedTodos }
        let sorted = Self.listOrder(todos)
        let order = (sorted.map(\.todo), sorted.map(\.rowID))
        sortedTodos = order
        return order
    }

    /// Where the todo created at `createdAt` and stored in row `rowID` is in `order` (list order,
    /// `rowIDs` beside it), by binary search; nil when it is not there.
    static func place(of createdAt: Timestamp, _ rowID: Int64, in order: [Todo], _ rowIDs: [Int64]) -> Int? {
        var low = 0
        var high = order.count
        while low < high {
            let middle = (low + high) / 2
            let (time, row) = (order[middle].createdAt, rowIDs[middle])
            if time == createdAt, row == rowID { return middle }
            // Does the entry at `middle` come before the one looked for?
            if time != createdAt ? time > createdAt : row > rowID {
                low = middle + 1
            } else {
                high = middle
            }
        }
        return nil
    }

    /// Newest first; todos created in the same millisecond, the one stored last first.
    static func listOrder(_ todos: [UUID: (rowID: Int64, todo: Todo)]) -> [(rowID: Int64, todo: Todo)] {
        todos.values.sorted { lhs, rhs in
            lhs.todo.createdAt != rhs.todo.createdAt
                ? lhs.todo.createdAt > rhs.todo.createdAt : lhs.rowID > rhs.rowID
        }
    }

    /// Counts a commit; true when this one should also prune the journal.
    private func pruneDue() -> Bool {
        commitsSincePrune += 1
        guard commitsSincePrune >= Self.commitsPerPrune else { return false }
        commitsSincePrune = 0
        return true
    }

    // MARK: JournalReader

    public func position() async throws -> JournalPosition {
        let head = self.head
        let oldest = try await backend.oldestRetained() ?? head + 1
        return JournalPosition(epoch: epoch, head: head, oldest: min(oldest, head + 1))
    }

    public func entries(after: UInt64, through: UInt64) async throws -> [JournalEntry] {
        try await backend.entries(after: after, through: min(through, head))
    }

    public func close() async {
        await backend.close()
    }
}
