import Synchronization

/// Lets one session run several requests at once while everything they cause still happens,
/// and is answered, in the order the requests were sent.
///
/// A session that pipelines gives each request a ticket (a task-local while the request is on
/// the bus) that names its previous request. Three rules keep the order:
/// - a write reaches the store only once the previous request has been *admitted*: queued by
///   the store for commit (`admitted()`), or finished. A store that never calls `admitted()`
///   thus gets one request at a time, as if nothing were pipelined;
/// - a read runs only once the previous request has finished, so it sees that request's write;
/// - the bus delivers a request's replies and broadcasts only once the previous request has
///   finished, so answers go out in request order.
public struct RequestTicket: Sendable {
    private let predecessor: Task<Void, Never>?
    private let predecessorAdmission: RequestGate?
    private let admission: RequestGate

    /// - Parameters:
    ///   - predecessor: the task running the session's previous request, if still running.
    ///   - predecessorAdmission: that request's `admission`.
    ///   - admission: opened by `admitted()`, and by the session once the request finished.
    public init(predecessor: Task<Void, Never>?, predecessorAdmission: RequestGate?, admission: RequestGate) {
        self.predecessor = predecessor
        self.predecessorAdmission = predecessorAdmission
        self.admission = admission
    }

    /// The ticket of the request running in this task, if its session pipelines.
    @TaskLocal public static var current: RequestTicket?

    /// The request has its place in the store's commit order: the next may be queued behind it.
    public func admitted() { admission.open() }

    /// Returns once the previous request is admitted (or finished).
    public func awaitPredecessorAdmitted() async {
        await predecessorAdmission?.wait()
    }

    /// Returns once the previous request has finished.
    public func awaitPredecessor() async {
        await predecessor?.value
    }
}

/// A one-way gate: `wait` returns once `open` was called (at once if it was already).
public final class RequestGate: Sendable {
    private let state = Mutex<(isOpen: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    public init() {}

    public func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            guard !state.isOpen else { return [] }
            state.isOpen = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    public func wait() async {
        if state.withLock({ $0.isOpen }) { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { state -> Bool in
                if state.isOpen { return true }
                state.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }
}
