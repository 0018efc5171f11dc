import NIOCore
import NIOPosix
import Testing

@testable import TodostreamClient

/// `close()` ends `run()` at once, whatever it is doing: waiting before the next attempt, or
/// in the middle of one.
@Suite struct ClientCloseTests {
    /// Runs a client of `configuration`; `ended` finishes when its `run()` has returned.
    func start(_ configuration: ClientConfiguration) throws -> (TodostreamClient, ended: AsyncStream<Void>) {
        let client = try TodostreamClient(configuration)
        let (ended, finished) = AsyncStream.makeStream(of: Void.self)
        Task {
            await client.run()
            finished.finish()
        }
        return (client, ended)
    }

    @Test(.timeLimit(.minutes(1)))
    func closeEndsTheWaitBeforeTheNextAttempt() async throws {
        // A port nothing listens on: every attempt is refused at once.
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(listener.localAddress?.port)
        try await listener.close()
        var configuration = try fakeConfiguration(port: port)
        configuration.backoff = Backoff(initial: .seconds(50), maximum: .seconds(50))
        let (client, ended) = try start(configuration)
        var events = client.events.makeAsyncIterator()
        guard case .unreachable = await events.next() else {
            Issue.record("the refused attempt was not told")
            return
        }
        // The client now waits 25 to 50 s before its next attempt.
        await client.close()
        #expect(await finishes(ended, within: .seconds(10)))
    }

    @Test(.timeLimit(.minutes(1)))
    func closeEndsAnAttemptUnderWay() async throws {
        try await FakeDaemon.with { daemon in
            var configuration = try fakeConfiguration(port: daemon.port)
            configuration.endpoint = ClientEndpoint(transport: .ws, host: "127.0.0.1", port: daemon.port)
            configuration.connectTimeout = .seconds(50)
            let (client, ended) = try start(configuration)
            try await daemon.accept { peer in
                // The upgrade request comes, and is never answered.
                _ = await peer.lines.next()
                await client.close()
                #expect(await finishes(ended, within: .seconds(10)))
            }
        }
    }

    /// The WebSocket upgrade is part of connecting: one never answered fails the attempt
    /// after the connect timeout, and the client tries again.
    @Test(.timeLimit(.minutes(1)))
    func anUpgradeNeverAnsweredFailsAfterTheConnectTimeout() async throws {
        try await FakeDaemon.with { daemon in
            var configuration = try fakeConfiguration(port: daemon.port)
            configuration.endpoint = ClientEndpoint(transport: .ws, host: "127.0.0.1", port: daemon.port)
            configuration.connectTimeout = .milliseconds(200)
            try await withClient(configuration) { _, events in
                try await daemon.accept { peer in
                    _ = await peer.lines.next()
                    guard case .unreachable = await events.next() else {
                        Issue.record("the attempt did not fail")
                        return
                    }
                }
            }
        }
    }
}

/// Whether `stream` finishes within `limit` (a bound on the test, not a wait for something
/// to happen).
func finishes(_ stream: AsyncStream<Void>, within limit: Duration) async -> Bool {
    await withTaskGroup(of: Bool.self) { group in
        group.addTask {
            for await _ in stream {}
            return !Task.isCancelled
        }
        group.addTask {
            try? await Task.sleep(for: limit)
            return false
        }
        let first = await group.next() ?? false
        group.cancelAll()
        return first
    }
}
