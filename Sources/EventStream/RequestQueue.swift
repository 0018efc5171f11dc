/// The sequencer's inbox as a state machine: requests from every connection in arrival order,
/// bounded, taken off in batches by the one consumer. It returns actions; `Sequencer` runs
/// them (resuming the consumer outside the lock). Inlinable with `Sequencer`.
@usableFromInline
struct RequestQueue<Item> {
    @usableFromInline typealias Waiter = CheckedContinuation<[Item]?, Never>

    @usableFromInline
    enum SubmitAction {
        case queued
        /// Hand `batch` to the waiting consumer.
        case resume(Waiter, [Item])
        /// Full, or no longer accepting.
        case refused
    }

    @usableFromInline
    enum TakeAction {
        case batch([Item])
        /// Nothing queued: the consumer must wait.
        case wait
        case finished
    }

    @usableFromInline
    enum StopAction {
        case none
        /// Hand the waiting consumer what is queued (nil: nothing, and nothing will come).
        case resume(Waiter, [Item]?)
    }

    @usableFromInline
    enum ExpireAction {
        case none
        /// Hand the gathering consumer what came meanwhile (perhaps nothing).
        case resume(Waiter, [Item])
    }

    @usableFromInline var state: RequestQueueState = .running(parked: nil)
    /// The consumer's continuation while `state` says it is parked (and only then).
    @usableFromInline var waiter: Waiter?
    /// Counts the consumer's waits for more (`gather`), so that an old wait's timer cannot end
    /// a newer one (`expire`).
    @usableFromInline var gathering: UInt64 = 0
    @usableFromInline var items: [Item] = []
    @usableFromInline var head = 0
    @usableFromInline let capacity: Int
    @usableFromInline let maxBatch: Int

    @inlinable
    init(capacity: Int, maxBatch: Int) {
        self.capacity = max(1, capacity)
        self.maxBatch = max(1, maxBatch)
    }

    /// Requests queued and not yet taken.
    @inlinable
    var count: Int { items.count - head }

    @inlinable
    mutating func submit(_ item: Item) -> SubmitAction {
        guard case .running(let parked) = state, count < capacity else { return .refused }
        items.append(item)
        guard let parked, count >= parked.want, let waiter = unpark() else { return .queued }
        return .resume(waiter, takeBatch(limit: parked.limit))
    }

    /// Takes the parked consumer's continuation, leaving the queue running with nobody parked.
    @inlinable
    mutating func unpark() -> Waiter? {
        state = .running(parked: nil)
        return waiter.take()
    }

    @inlinable
    mutating func parkWaiter(_ waiter: Waiter, want: Int = 1, limit: Int = .max) {
        self.waiter = waiter
        state = .running(parked: RequestQueueParked(want: want, limit: limit))
    }

    @inlinable
    mutating func take() -> TakeAction {
        if count > 0 { return .batch(takeBatch()) }
        switch state {
        case .running: return .wait
        case .stopping, .stopped:
            state = .stopped
            return .finished
        }
    }

    /// The consumer found nothing and parks; returns what it should do instead when something
    /// arrived (or a stop came) in between.
    @inlinable
    mutating func park(_ waiter: Waiter) -> TakeAction {
        switch take() {
        case .wait:
            parkWaiter(waiter)
            return .wait
        case let other:
            return other
        }
    }

    /// The consumer, holding a batch, waits for `want` more requests (taking at most `limit`
    /// of them) or until `expire(gathering:)` with the number this returns; `.batch` and
    /// `.finished` as for `park`, when it need not wait.
    @inlinable
    mutating func gather(_ waiter: Waiter, want: Int, limit: Int) -> (TakeAction, UInt64) {
        gathering &+= 1
        let limit = max(1, limit)
        if count >= want { return (.batch(takeBatch(limit: limit)), gathering) }
        guard case .running = state else { return (take(), gathering) }
        parkWaiter(waiter, want: max(1, want), limit: limit)
        return (.wait, gathering)
    }

    /// The wait `gathering` is over: the consumer, if it still waits for it, takes what came.
    @inlinable
    mutating func expire(gathering: UInt64) -> ExpireAction {
        guard gathering == self.gathering, case .running(let parked?) = state, let waiter = unpark() else {
            return .none
        }
        return .resume(waiter, count > 0 ? takeBatch(limit: parked.limit) : [])
    }

    @inlinable
    mutating func stop() -> StopAction {
        switch state {
        case .running(let parked):
            guard let parked, let waiter = waiter.take() else {
                state = .stopping
                return .none
            }
            // A consumer gathering more gets what came so far; the next take finishes.
            if count > 0 {
                state = .stopping
                return .resume(waiter, takeBatch(limit: parked.limit))
            }
            state = .stopped
            return .resume(waiter, nil)
        case .stopping, .stopped:
            return .none
        }
    }

    @inlinable
    mutating func takeBatch(limit: Int = .max) -> [Item] {
        let available = count
        let most = min(maxBatch, limit)
        if head == 0, available <= most {
            defer { items = [] }
            return items
        }
        let take = min(most, available)
        let batch = Array(items[head..<head + take])
        head += take
        if head == items.count {
            items = []
            head = 0
        } else if head > 4096, head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
        return batch
    }
}

/// The queue's state. Not nested in the generic queue, so matching it (once per request, under
/// the sequencer's lock) needs no type metadata looked up at run time; the parked consumer's
/// continuation, which is generic, is kept beside it (`RequestQueue.waiter`).
@usableFromInline
enum RequestQueueState: Sendable {
    /// Accepting requests; the consumer waits for some when `parked` is set.
    case running(parked: RequestQueueParked?)
    /// No new requests; the consumer takes what is left, then hears nil.
    case stopping
    /// The consumer has heard nil.
    case stopped
}

/// What the parked consumer waits for: `want` requests queued, of which it takes at most
/// `limit`.
@usableFromInline
struct RequestQueueParked: Sendable {
    @usableFromInline let want: Int
    @usableFromInline let limit: Int

    @inlinable
    init(want: Int, limit: Int) {
        (self.want, self.limit) = (want, limit)
    }
}
