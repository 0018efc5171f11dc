/// Which server the store's pool uses, and when to look for another: the decisions of
/// `FailoverPool`, as values. The pool feeds it what happened (it started, a lease failed in a
/// way that suggests the server is gone or read-only, a selection found a server or none) and
/// executes the action it returns; the machine does no I/O and keeps no clock.
///
/// - The pool starts on the server the store opened on (generation 1).
/// - A failure of the client in use starts one selection; more failures while it runs, or of a
///   client already replaced, change nothing.
/// - A selection that finds the server in use keeps its client; one that finds another swaps in
///   a new client (the next generation) and retires the old one; one that finds none is tried
///   again after a growing, capped delay, while the old client goes on answering (unavailable,
///   most likely).
/// - Selections that keep finding the server in use (it answers, yet leases fail) are spaced
///   out the same way, until a lease succeeds again.
struct FailoverStateMachine: Sendable {
    /// One `PostgresClient`: its generation (each swap makes a new one) and its server's index
    /// in the settings' list.
    struct Client: Hashable, Sendable {
        var generation: Int
        var server: Int
    }

    enum Action: Hashable, Sendable {
        /// Nothing to do.
        case none
        /// Run this client (the first one).
        case run(Client)
        /// Look for a server (connect to each in order and check it), after this delay.
        case select(after: Duration)
        /// The selection found the server in use: go on with its client.
        case keep(Client)
        /// The selection found another server: make `to`'s client the one leases use and run
        /// it, then stop `retire`'s.
        case swap(to: Client, retire: Client)
        /// Stop this client: the pool is shutting down.
        case shutDown(retire: Client)
    }

    private enum State: Hashable {
        /// Not running yet.
        case idle(Client)
        case serving(Client)
        /// A selection is under way; `failed` of them found no server so far.
        case selecting(Client, failed: Int)
        case shutDown
    }

    /// The first retry's delay; each next one doubles, up to `maximumDelay`.
    static let initialDelay = Duration.milliseconds(100)
    static let maximumDelay = Duration.seconds(2)

    private var state: State
    /// Selections in a row that found the server in use although its leases were failing.
    private var kept = 0

    init(server: Int) {
        state = .idle(Client(generation: 1, server: server))
    }

    /// The client leases use; nil once shut down.
    var current: Client? {
        switch state {
        case .idle(let client), .serving(let client), .selecting(let client, _): return client
        case .shutDown: return nil
        }
    }

    /// Whether a selection is under way.
    var isSelecting: Bool {
        if case .selecting = state { return true }
        return false
    }

    static func delay(afterFailures failures: Int) -> Duration {
        guard failures > 0 else { return .zero }
        var delay = initialDelay
        for _ in 1..<failures where delay < maximumDelay { delay *= 2 }
        return min(delay, maximumDelay)
    }

    /// The pool's `run()` started.
    mutating func started() -> Action {
        guard case .idle(let client) = state else { return .none }
        state = .serving(client)
        return .run(client)
    }

    /// A lease on the client of `generation` (nil: the one in use) failed in a way that
    /// suggests its server is gone or no longer writable.
    mutating func failureReported(generation: Int?) -> Action {
        guard case .serving(let client) = state, generation == nil || generation == client.generation else {
            return .none
        }
        state = .selecting(client, failed: 0)
        return .select(after: Self.delay(afterFailures: kept))
    }

    /// A lease on the client of `generation` succeeded: its server works.
    mutating func leaseSucceeded(generation: Int) -> Action {
        if current?.generation == generation { kept = 0 }
        return .none
    }

    /// The selection settled on the server at `server`.
    mutating func selected(server: Int) -> Action {
        guard case .selecting(let client, _) = state else { return .none }
        if server == client.server {
            kept += 1
            state = .serving(client)
            return .keep(client)
        }
        kept = 0
        let next = Client(generation: client.generation + 1, server: server)
        state = .serving(next)
        return .swap(to: next, retire: client)
    }

    /// The selection found no usable server.
    mutating func selectionFailed() -> Action {
        guard case .selecting(let client, let failed) = state else { return .none }
        state = .selecting(client, failed: failed + 1)
        return .select(after: Self.delay(afterFailures: failed + 1))
    }

    /// The pool stops.
    mutating func shutDown() -> Action {
        switch state {
        case .idle, .shutDown:
            state = .shutDown
            return .none
        case .serving(let client), .selecting(let client, _):
            state = .shutDown
            return .shutDown(retire: client)
        }
    }
}
