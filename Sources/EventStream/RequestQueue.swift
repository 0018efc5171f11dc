/// The sequencer's inbox as a state machine: requests from every connection in arrival order,
/// bounded, taken off in batches by the one consumer. It returns actions; `Sequencer` runs
/// them (resuming the consumer outside the lock). Inlinable with `Sequencer`.
@usableFromInline
struct RequestQueue<Item> {
    @usableFromInline typealias Waiter = CheckedContinuation<[Item]?, Never>

    @usableFromInline
    enum State {
        /// Accepting requests; the consumer waits for some when `waiter` is set.
        case running(waiter: Waiter?)
        /// No new requests; the consumer takes what is left, then hears nil.
        case stopping
        /// The consumer has heard nil.
        case stopped
    }

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
        case resume(Waiter)
    }

    @usableFromInline var state: State = .running(waiter: nil)
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
        guard case .running(let waiter) = state, count < capacity else { return .refused }
        if let waiter {
            state = .running(waiter: nil)
            return .resume(waiter, [item])
        }
        items.append(item)
        return .queued
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
            state = .running(waiter: waiter)
            return .wait
        case let other:
            return other
        }
    }

    @inlinable
    mutating func stop() -> StopAction {
        switch state {
        case .running(let waiter):
            guard let waiter else {
                state = .stopping
                return .none
            }
            // Nothing is queued while the consumer waits.
            state = .stopped
            return .resume(waiter)
        case .stopping, .stopped:
            return .none
        }
    }

    @inlinable
    mutating func takeBatch() -> [Item] {
        let available = count
        if head == 0, available <= maxBatch {
            defer { items = [] }
            return items
        }
        let take = min(maxBatch, available)
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
