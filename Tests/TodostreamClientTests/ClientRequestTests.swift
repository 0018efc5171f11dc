import Testing
import TodoApp

@testable import TodostreamClient

/// Requests against a scripted daemon: how each one ends, and what `events` says of it.
@Suite struct ClientRequestTests {
    /// A `send` the daemon refuses is told on `events`, with the id `send` returned, and
    /// leaves the outbox.
    @Test(.timeLimit(.minutes(1)))
    func aRefusedSendIsToldOnEvents() async throws {
        try await FakeDaemon.with { daemon in
            try await withClient(try fakeConfiguration(port: daemon.port)) { client, events in
                try await daemon.accept { peer in
                    try await peer.hello(seq: 1)
                    #expect(await events.next() == .connected(resumed: false))
                    let id = try await client.send(.requestTodoViewModels)
                    #expect(try await peer.receive().id == id)
                    try await peer.send(
                        #"{"op":"error","re":"\#(id)","error":{"code":"rate_limited","message":"Slow down."}}"#
                    )
                    // Something after it, so that an event missing is told at once.
                    try await peer.broadcast(seq: 2)
                    let refused = ClientError(.rejected, "Slow down.", serverCode: "rate_limited")
                    #expect(await events.next() == .requestFailed(id: id, error: refused))
                    #expect(await client.outboxCount == 0)
                }
            }
        }
    }
}
