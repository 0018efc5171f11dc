import Foundation
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

    /// An answer over `maxFrameBytes` fails its request (which leaves the outbox) and the
    /// connection goes on; a broadcast over it is told and given up like a gap.
    @Test(.timeLimit(.minutes(1)))
    func aFrameOverTheLimitIsSkippedAndTheConnectionGoesOn() async throws {
        try await FakeDaemon.with { daemon in
            var configuration = try fakeConfiguration(port: daemon.port)
            configuration.maxFrameBytes = 1000
            try await withClient(configuration) { client, events in
                try await daemon.accept { peer in
                    try await peer.hello(seq: 1)
                    #expect(await events.next() == .connected(resumed: false))
                    let list = Task { try await client.list() }
                    let id = try #require(try await peer.receive().id)
                    try await peer.send(listReplyFrame(re: id, count: 20))
                    let error = await #expect(throws: ClientError.self) { try await list.value }
                    #expect(error?.code == .responseTooLarge)
                    guard case .requestFailed(id, let told) = await events.next() else {
                        Issue.record("the failed request was not told on events")
                        return
                    }
                    #expect(told.code == .responseTooLarge)
                    #expect(await client.outboxCount == 0)
                    // A broadcast over the limit: told, then a reset at its seq.
                    try await peer.send(
                        #"{"seq":2,"type":"ResponseTodoViewModel","payload":{"x":""#
                            + String(repeating: "y", count: 2000) + #""}}"#
                    )
                    #expect(await events.next() == .frameTooLarge(seq: 2))
                    #expect(await events.next() == .reset(seq: 2))
                    // The same connection carries on.
                    try await peer.broadcast(seq: 3)
                    guard case .event(_, let seq) = await events.next() else {
                        Issue.record("the broadcast after the large ones was not passed on")
                        return
                    }
                    #expect(seq == 3)
                }
            }
        }
    }

    /// A cancelled `request` ends at once; one not sent yet leaves the outbox and is never
    /// sent.
    @Test(.timeLimit(.minutes(1)))
    func aCancelledRequestNotSentYetIsWithdrawn() async throws {
        try await FakeDaemon.with { daemon in
            var configuration = try fakeConfiguration(port: daemon.port)
            configuration.requestTimeout = .seconds(50)
            try await withClient(configuration) { client, events in
                try await daemon.accept { peer in
                    // No greeting yet: the request waits in the outbox.
                    let toggle = Task { try await client.toggle(UUID()) }
                    try await until { await client.outboxCount == 1 }
                    toggle.cancel()
                    await #expect(throws: CancellationError.self) { try await toggle.value }
                    #expect(await client.outboxCount == 0)
                    try await peer.hello(seq: 1)
                    #expect(await events.next() == .connected(resumed: false))
                    try await client.send(.requestTodoViewModels)
                    #expect(try await peer.receive().id == "c2")
                }
            }
        }
    }

    /// A cancelled `request` already sent ends at once too. A write stays in the outbox until
    /// answered (it may be applied: applied once, its answer on `events`); a read does not.
    @Test(.timeLimit(.minutes(1)))
    func aCancelledWriteAlreadySentIsAnsweredOnEvents() async throws {
        try await FakeDaemon.with { daemon in
            var configuration = try fakeConfiguration(port: daemon.port)
            configuration.requestTimeout = .seconds(50)
            try await withClient(configuration) { client, events in
                try await daemon.accept { peer in
                    try await peer.hello(seq: 1)
                    #expect(await events.next() == .connected(resumed: false))
                    let toggle = Task { try await client.toggle(UUID()) }
                    #expect(try await peer.receive().id == "c1")
                    let list = Task { try await client.list() }
                    #expect(try await peer.receive().id == "c2")
                    toggle.cancel()
                    list.cancel()
                    await #expect(throws: CancellationError.self) { try await toggle.value }
                    await #expect(throws: CancellationError.self) { try await list.value }
                    #expect(await client.outboxCount == 1)
                    try await peer.broadcast(seq: 2, re: "c1")
                    guard case .event(_, let seq) = await events.next() else {
                        Issue.record("the answer to the cancelled write was not passed on")
                        return
                    }
                    #expect(seq == 2)
                    #expect(await client.outboxCount == 0)
                }
            }
        }
    }
}
