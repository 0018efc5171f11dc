import Foundation
import Synchronization

/// A thread of its own that runs Swift jobs one at a time, in the order they arrive: the serial
/// executor of the sequencer and of the SQLite store; and (`execute`) the sequencer's hand-over
/// thread, where plain work runs in the order given.
///
/// Code isolated to it may block: the SQLite store commits synchronously here, and while a
/// commit waits for the disk the next batch's requests queue up for it. No event loop runs here,
/// so no connection waits for a commit.
///
/// The thread ends once the executor is gone: an actor keeps its executor alive, and a job
/// queued here belongs to such an actor, so nothing can be queued after that.
///
/// The thread also runs tasks that prefer it (`withTaskExecutorPreference(thread.tasks)`): such
/// a task is resumed here, not on the global pool, when another thread wakes it (the
/// sequencer's wait for requests), and enters an actor on this thread without waking another.
public final class StoreThread: SerialExecutor, @unchecked Sendable {
    // Invariant: the only state is `inbox`, which synchronises itself.
    fileprivate let inbox: Inbox

    /// Starts the thread, named `name` (as `top` and `perf` show it; at most 15 bytes).
    ///
    /// - Parameter spin: how long the thread stays awake for more work once it has run what
    ///   was queued, before it sleeps. Work that arrives within it starts at once, with no
    ///   wake-up through the kernel (which costs tens of microseconds on a virtual machine,
    ///   on both sides); the price is up to this much CPU after each piece of work. The thread
    ///   stops spinning after a spin that found nothing, and spins again once work has come
    ///   within a spin of its going to sleep (`SpinStateMachine`). Zero: sleep at once.
    public init(name: String = "store", spin: Duration = .zero) {
        inbox = Inbox(spin: spin)
        let inbox = self.inbox
        let executor = UnownedSerialExecutor(ordinary: self)
        let thread = Thread {
            // Foundation gives the kernel the name only when the thread names itself.
            Thread.current.name = name
            inbox.run(on: executor)
        }
        thread.start()
    }

    deinit {
        inbox.close()
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        inbox.append(.job(UnownedJob(job)))
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// A task executor running tasks on this thread; it keeps the thread alive.
    public var tasks: Tasks { Tasks(thread: self) }

    /// Runs the jobs of tasks that prefer it on the thread, as the global pool would run them.
    public final class Tasks: TaskExecutor, @unchecked Sendable {
        // Invariant: the only state is `thread`, which never changes.
        private let thread: StoreThread

        fileprivate init(thread: StoreThread) { self.thread = thread }

        public func enqueue(_ job: consuming ExecutorJob) {
            thread.inbox.append(.task(UnownedJob(job), UnownedTaskExecutor(ordinary: self)))
        }
    }

    public func checkIsolated() {
        precondition(inbox.isCurrent, "not on the store's thread")
    }

    /// Whether the caller runs on this thread.
    public var isCurrent: Bool { inbox.isCurrent }

    /// How often the thread has gone to sleep for want of work.
    var sleeps: Int { inbox.sleeps }

    /// How often the thread has begun to spin for want of work.
    var spins: Int { inbox.spinCount.load(ordering: .relaxed) }

    /// Runs `work` on the thread, after what is queued before it; returns at once.
    public func execute(_ work: @escaping @Sendable () -> Void) {
        inbox.append(.work(work))
    }

    /// Runs `body` on the thread, after what is queued before it, and returns its result.
    /// For work that is not isolated to an actor on this thread (opening the database).
    public func perform<Value: Sendable>(
        _ body: @escaping @Sendable () throws -> Value
    ) async throws -> Value {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
            inbox.append(.work({ continuation.resume(with: Result { try body() }) }))
        }
    }
}

extension StoreThread {
    fileprivate enum Item {
        case job(UnownedJob)
        /// A job of a task that prefers `Tasks` (which its task keeps alive while it waits).
        case task(UnownedJob, UnownedTaskExecutor)
        case work(@Sendable () -> Void)
    }

    /// The thread's queue: appended to from any thread, drained by the thread alone.
    fileprivate final class Inbox: @unchecked Sendable {
        // Invariant: `items`, `state` and `thread` are read and written only with `condition`
        // locked; `spinning` only by the thread itself.
        private let condition = NSCondition()
        private var items: [Item] = []
        private var state = State.running(idle: false)
        private var thread: pthread_t?
        /// Items appended since the thread last took them, readable without the lock (the
        /// thread's spin before it sleeps looks at it).
        private let pending = Atomic<Int>(0)
        /// Read and written by the thread alone.
        private var spinning: SpinStateMachine
        private var sleepCount = 0
        /// Spins begun, readable from any thread.
        let spinCount = Atomic<Int>(0)

        init(spin: Duration) {
            spinning = SpinStateMachine(spin: spin)
        }

        private enum State {
            /// The thread runs; `idle` while it waits for items (then an append signals it).
            case running(idle: Bool)
            /// No executor is left: the thread drains what is queued and ends.
            case closed
        }

        var sleeps: Int {
            condition.lock()
            defer { condition.unlock() }
            return sleepCount
        }

        var isCurrent: Bool {
            condition.lock()
            defer { condition.unlock() }
            guard let thread else { return false }
            return pthread_equal(thread, pthread_self()) != 0
        }

        func append(_ item: Item) {
            condition.lock()
            items.append(item)
            pending.add(1, ordering: .releasing)
            let wake: Bool
            if case .running(idle: true) = state {
                state = .running(idle: false)
                wake = true
            } else {
                wake = false
            }
            condition.unlock()
            if wake { condition.signal() }
        }

        /// Stays awake up to the spin while nothing is queued, when `spinning` says so. An append
        /// meanwhile finds the thread not idle and signals nothing; the thread sees `pending` and
        /// takes the item under the lock, so nothing is missed either way.
        ///
        /// - Returns: whether the thread is to time its sleep, should it sleep now: it did not
        ///   spin, and `spinning` wants to know how soon work comes.
        private func awaitWorkAwake() -> Bool {
            guard pending.load(ordering: .acquiring) == 0 else { return false }
            guard case .spin(let spin) = spinning.idle() else { return spinning.timesSleeps }
            spinCount.add(1, ordering: .relaxed)
            let deadline = ContinuousClock.now + spin
            var rounds = 0
            while pending.load(ordering: .acquiring) == 0 {
                rounds &+= 1
                // The clock is read, and the CPU offered to anything else runnable here, once
                // every few looks.
                guard rounds % 16 == 0 else { continue }
                if ContinuousClock.now >= deadline {
                    spinning.spinEnded(foundWork: false)
                    return false
                }
                sched_yield()
            }
            spinning.spinEnded(foundWork: true)
            return false
        }

        func close() {
            condition.lock()
            state = .closed
            // Ends a spin too.
            pending.add(1, ordering: .releasing)
            condition.unlock()
            condition.signal()
        }

        func run(on executor: UnownedSerialExecutor) {
            condition.lock()
            thread = pthread_self()
            condition.unlock()
            var batch: [Item] = []
            while true {
                let timed = awaitWorkAwake()
                condition.lock()
                var asleepSince: ContinuousClock.Instant?
                while items.isEmpty {
                    if case .closed = state {
                        condition.unlock()
                        return
                    }
                    state = .running(idle: true)
                    sleepCount += 1
                    if timed, asleepSince == nil { asleepSince = .now }
                    condition.wait()
                }
                swap(&batch, &items)
                pending.store(0, ordering: .relaxed)
                condition.unlock()
                if let asleepSince { spinning.woke(after: .now - asleepSince) }
                for item in batch {
                    switch item {
                    case .job(let job): job.runSynchronously(on: executor)
                    case .task(let job, let taskExecutor): job.runSynchronously(on: taskExecutor)
                    case .work(let work): work()
                    }
                }
                batch.removeAll(keepingCapacity: true)
            }
        }
    }
}
