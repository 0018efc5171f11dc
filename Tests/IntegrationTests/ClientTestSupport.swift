import Foundation
import NIOConcurrencyHelpers
import Testing
import TodoApp
import TodostreamClient

@testable import todostreamd

/// Everything a client's `events` yielded, and the list view they build (the caller's side
/// of the README's snippet): on a new connection or a reset it asks for the list again.
actor EventLog {
    private(set) var events: [ClientEvent] = []
    private(set) var list = TodoList()
    typealias Check = @Sendable (_ events: [ClientEvent], _ list: TodoList) -> Bool

    private var waiters: [(id: Int, check: Check, continuation: CheckedContinuation<Bool, Never>)] = []
    private var nextWaiter = 0

    struct TimedOut: Error, CustomStringConvertible {
        let what: String
        var description: String { "timed out waiting for \(what)" }
    }

    nonisolated func follow(_ client: TodostreamClient) -> Task<Void, Never> {
        Task {
            for await event in client.events {
                switch event {
                case .connected(resumed: false), .reset:
                    _ = try? await client.send(.requestTodoViewModels)
                default:
                    break
                }
                await self.append(event)
            }
        }
    }

    private func append(_ event: ClientEvent) {
        events.append(event)
        if case .event(let appEvent, _) = event { list.apply(appEvent) }
        let ready = waiters.filter { $0.check(events, list) }
        waiters.removeAll { waiter in ready.contains { $0.id == waiter.id } }
        for waiter in ready { waiter.continuation.resume(returning: true) }
    }

    /// Waits until `check` holds (checked after every event), at most `timeout`.
    func wait(
        for what: String,
        timeout: Duration = .seconds(20),
        _ check: @escaping Check
    ) async throws {
        if check(events, list) { return }
        nextWaiter += 1
        let id = nextWaiter
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            await self?.expire(id)
        }
        let met = await withCheckedContinuation { continuation in
            waiters.append((id, check, continuation))
        }
        timer.cancel()
        if !met { throw TimedOut(what: what) }
    }

    private func expire(_ id: Int) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        waiters.remove(at: index).continuation.resume(returning: false)
    }

    func number(of predicate: @Sendable (ClientEvent) -> Bool) -> Int { events.filter(predicate).count }
}

/// Runs a client for the duration of `body`, with its events followed by an `EventLog`.
func withTestClient(
    _ configuration: ClientConfiguration,
    _ body: (TodostreamClient, EventLog) async throws -> Void
) async throws {
    let client = try TodostreamClient(configuration)
    let log = EventLog()
    let following = log.follow(client)
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await client.run() }
        do {
            try await body(client, log)
        } catch {
            await client.close()
            following.cancel()
            throw error
        }
        await client.close()
        try await group.waitForAll()
    }
    await following.value
}

func testConfiguration(_ url: String, outboxCapacity: Int = 64) throws -> ClientConfiguration {
    ClientConfiguration(
        endpoint: try ClientEndpoint(url: url),
        backoff: Backoff(initial: .milliseconds(5), maximum: .milliseconds(50)),
        connectTimeout: .seconds(5),
        requestTimeout: .seconds(30),
        outboxCapacity: outboxCapacity
    )
}

enum TestTransport: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case tcp
    case ws

    var testDescription: String { rawValue }

    func port(of daemon: Daemon) -> Int { self == .tcp ? daemon.tcpPort : daemon.httpPort }

    func url(port: Int) -> String { self == .tcp ? "tcp://127.0.0.1:\(port)" : "ws://127.0.0.1:\(port)/events" }
}

/// What the daemon holds now, read by a client of its own.
func daemonList(_ daemon: Daemon) async throws -> [TodoViewModel] {
    var rows: [TodoViewModel] = []
    try await withTestClient(try testConfiguration("tcp://127.0.0.1:\(daemon.tcpPort)")) { client, _ in
        rows = try await client.list()
    }
    return rows
}

/// What `body` returns, or nil when it has not returned within `limit` (it is then cancelled):
/// a bound for a test of something that used to go on for ever.
func within<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T? {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        let first = try await group.next() ?? nil
        group.cancelAll()
        return first
    }
}
