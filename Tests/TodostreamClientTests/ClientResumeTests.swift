import Testing

@testable import TodostreamClient

/// Resuming against a scripted daemon: every broadcast is passed on once, in seq order, what
/// ever comes live before or during the replay, and across connections lost mid-replay.
@Suite struct ClientResumeTests {
    static let authenticated = #"{"op":"authenticated","re":"auth","role":"view"}"#

    /// A session subscribed before `authenticated` (a WebSocket whose upgrade token was taken,
    /// a monitor token on TCP) gets live broadcasts before it: the resume still starts after
    /// the last seq the client had, and the live one, which the replay skips, follows it.
    @Test(.timeLimit(.minutes(1)))
    func aLiveBroadcastBeforeAuthenticatedIsPassedOnAfterTheReplay() async throws {
        try await FakeDaemon.with { daemon in
            try await withClient(try fakeConfiguration(port: daemon.port, token: "secret")) { _, events in
                try await daemon.accept { peer in
                    try await peer.hello(seq: 57)
                    #expect(try await peer.receive().op == "auth")
                    try await peer.send(Self.authenticated)
                    #expect(await events.next() == .connected(resumed: false))
                }
                #expect(await events.next() == .disconnected)
                try await daemon.accept { peer in
                    try await peer.hello(seq: 60)
                    #expect(try await peer.receive().op == "auth")
                    try await peer.broadcast(seq: 61)
                    try await peer.send(Self.authenticated)
                    let resume = try await peer.receive()
                    #expect(resume.op == "resume")
                    #expect(resume.after == 57)
                    // The replay skips 61: it was sent live on this connection.
                    for seq: UInt64 in 58...60 { try await peer.broadcast(seq: seq) }
                    try await peer.send(#"{"op":"resumed","re":"resume","from":58,"to":61}"#)
                    var last: ClientEvent?
                    #expect(await events.broadcastSeqs(until: &last) == [58, 59, 60, 61])
                    #expect(last == .connected(resumed: true))
                    try await peer.broadcast(seq: 62)
                    guard case .event(_, let seq) = await events.next() else {
                        Issue.record("the live broadcast after the resume was not passed on")
                        return
                    }
                    #expect(seq == 62)
                }
            }
        }
    }

    /// A connection lost mid-replay, after a live broadcast came before the replay: the next
    /// resume replays from where the unbroken run stopped, and nothing is passed on twice.
    @Test(.timeLimit(.minutes(1)))
    func aConnectionLostMidReplayPassesNothingOnTwice() async throws {
        try await FakeDaemon.with { daemon in
            try await withClient(try fakeConfiguration(port: daemon.port)) { _, events in
                try await daemon.accept { peer in
                    try await peer.hello(seq: 10)
                    #expect(await events.next() == .connected(resumed: false))
                }
                #expect(await events.next() == .disconnected)
                try await daemon.accept { peer in
                    try await peer.hello(seq: 14)
                    #expect(try await peer.receive().after == 10)
                    try await peer.broadcast(seq: 15)
                    try await peer.broadcast(seq: 11)
                    try await peer.broadcast(seq: 12)
                }
                try await daemon.accept { peer in
                    try await peer.hello(seq: 15)
                    #expect(try await peer.receive().after == 12)
                    for seq: UInt64 in 13...15 { try await peer.broadcast(seq: seq) }
                    try await peer.send(#"{"op":"resumed","re":"resume","from":13,"to":15}"#)
                    var last: ClientEvent?
                    #expect(await events.broadcastSeqs(until: &last) == [11, 12, 13, 14, 15])
                    #expect(last == .connected(resumed: true))
                }
            }
        }
    }

    /// A live `gap` (several daemons sharing the database) is a `.reset` only: the requests
    /// in flight on the connection are not sent again, and no `connected` comes.
    @Test(.timeLimit(.minutes(1)))
    func aLiveGapIsAResetOnly() async throws {
        try await FakeDaemon.with { daemon in
            try await withClient(try fakeConfiguration(port: daemon.port)) { client, events in
                try await daemon.accept { peer in
                    try await peer.hello(seq: 10)
                    #expect(await events.next() == .connected(resumed: false))
                    try await client.send(.requestTodoViewModels)
                    #expect(try await peer.receive().id == "c1")
                    try await peer.send(#"{"op":"gap","epoch":"e","seq":20}"#)
                    #expect(await events.next() == .reset(seq: 20))
                    try await client.send(.requestTodoViewModels)
                    // c1, still in flight, was not sent again.
                    #expect(try await peer.receive().id == "c2")
                    try await peer.send(#"{"type":"ResponseTodoViewModels","re":"c1","payload":[]}"#)
                    #expect(await events.next() == .event(.responseTodoViewModels(.success([])), seq: nil))
                    #expect(await client.outboxCount == 1)
                    try await peer.broadcast(seq: 21)
                    guard case .event(_, let seq) = await events.next() else {
                        Issue.record("the broadcast after the gap was not passed on")
                        return
                    }
                    #expect(seq == 21)
                }
            }
        }
    }
}
