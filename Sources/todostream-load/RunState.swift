import NIOCore
import Synchronization

/// State shared by every connection of one scenario run, across loops: all of it atomics or
/// immutable.
final class RunState: Sendable {
    /// Deliveries to subscribers (fan-out) or completed requests (request path), summed from
    /// the loops after each read batch.
    let progress = Atomic<Int>(0)
    /// Latencies are recorded only for messages sent in [measureStart, measureEnd).
    let measureStart = Atomic<UInt64>(.max)
    let measureEnd = Atomic<UInt64>(.max)
    /// Whether requesters keep sending.
    let running = Atomic<Bool>(false)
    /// Set before the tool closes its own connections, so those closes are not counted.
    let tearingDown = Atomic<Bool>(false)
    /// The seq of the broadcast that created the fan-out todo; toggle n should carry
    /// seqBase + n.
    let seqBase = Atomic<UInt64>(0)
    /// Messages published so far (fan-out).
    let published = Atomic<Int>(0)
    /// Set by a publisher that stopped for its window; the first reader to clear it wakes it.
    let publisherWaiting = Atomic<Bool>(false)
    let sendTimes: SendTimeTable
    let stats: StatsTable
    /// Wakes the publisher on its own loop.
    let waker: PublisherWaker

    init(group: any EventLoopGroup, sendTimeCapacity: Int) {
        stats = StatsTable(group: group)
        sendTimes = SendTimeTable(capacity: sendTimeCapacity)
        waker = PublisherWaker()
    }

    func addProgress(_ count: Int) {
        progress.add(count, ordering: .relaxed)
        if publisherWaiting.load(ordering: .relaxed),
            publisherWaiting.exchange(false, ordering: .acquiringAndReleasing)
        {
            waker.wake()
        }
    }
}

/// Where the publisher's wake-up goes: set once the publisher exists, before publishing
/// starts.
final class PublisherWaker: Sendable {
    /// Held in a class, not as the mutex's value: a function-typed value is re-wrapped in a
    /// reabstraction thunk on every `inout` access, so each `wake` would lengthen the chain the
    /// next one walks.
    private final class Action: Sendable {
        let call: @Sendable () -> Void
        init(_ call: @escaping @Sendable () -> Void) { self.call = call }
    }

    private let action = Mutex<Action?>(nil)

    func set(_ wake: @escaping @Sendable () -> Void) {
        let wrapped = Action(wake)
        action.withLock { $0 = wrapped }
    }

    func wake() { action.withLock { $0 }?.call() }
}

/// Send time of each fan-out publish to todostreamd, indexed by request id (= seq - seqBase).
/// Written by the publisher before the request is written to its socket; read by
/// subscribers once the broadcast with that seq arrives.
///
/// `@unchecked Sendable` invariant: the pointer is allocated and initialized in `init`,
/// released in `deinit`, and every element is only accessed through its `Atomic`.
final class SendTimeTable: @unchecked Sendable {
    let capacity: Int
    private let slots: UnsafeMutablePointer<Atomic<UInt64>>

    init(capacity: Int) {
        self.capacity = max(capacity, 1)
        slots = .allocate(capacity: self.capacity)
        for index in 0..<self.capacity { (slots + index).initialize(to: Atomic(0)) }
    }

    deinit {
        slots.deinitialize(count: capacity)
        slots.deallocate()
    }

    func store(_ index: Int, _ time: UInt64) {
        guard index >= 0, index < capacity else { return }
        slots[index].store(time, ordering: .releasing)
    }

    /// 0 when unknown.
    func load(_ index: Int) -> UInt64 {
        guard index >= 0, index < capacity else { return 0 }
        return slots[index].load(ordering: .acquiring)
    }
}
