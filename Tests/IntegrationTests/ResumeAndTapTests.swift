import Foundation
import NIOCore
import Relay
import Testing

@testable import todostreamd

@Suite(.timeLimit(.minutes(3))) struct ResumeTests {
    @Test func resumeReplaysWhatWasMissedThenGoesLive() async throws {
        try await withDaemon { daemon in
            let (writer, _) = try await daemon.client()
            let (first, hello) = try await daemon.client()
            let epoch = try #require(hello["epoch"] as? String)
            _ = try await writer.createTodo("one")
            #expect(try await first.json()["seq"] as? Int == 1)
            await first.close()
            _ = try await writer.createTodo("two")
            _ = try await writer.createTodo("three")

            let (again, _) = try await daemon.client()
            try await again.send(["op": "resume", "epoch": epoch, "after": 1, "id": "r"])
            let replayed = [try await again.json(), try await again.json()]
            #expect(replayed.map { $0["seq"] as? Int } == [2, 3])
            #expect(replayed.allSatisfy { $0["re"] == nil })
            let resumed = try await again.json()
            #expect(resumed["op"] as? String == "resumed")
            #expect(resumed["re"] as? String == "r")
            #expect(resumed["from"] as? Int == 2)
            #expect(resumed["to"] as? Int == 3)
            _ = try await writer.createTodo("four")
            #expect(try await again.json()["seq"] as? Int == 4)
        }
    }

    /// A second `resume` on the same connection sends none of the broadcasts the first one
    /// replayed, nor those that came live since; it still reports the range it covers.
    @Test func aSecondResumeOnTheConnectionSendsNothingTwice() async throws {
        try await withDaemon { daemon in
            let (writer, hello) = try await daemon.client()
            let epoch = try #require(hello["epoch"] as? String)
            for title in ["one", "two", "three"] { _ = try await writer.createTodo(title) }
            let (again, _) = try await daemon.client()
            try await again.send(["op": "resume", "epoch": epoch, "after": 1, "id": "r1"])
            let replayed = [try await again.json(), try await again.json()]
            #expect(replayed.map { $0["seq"] as? Int } == [2, 3])
            #expect(try await again.json()["op"] as? String == "resumed")
            _ = try await writer.createTodo("four")
            #expect(try await again.json()["seq"] as? Int == 4)
            try await again.send(["op": "resume", "epoch": epoch, "after": 0, "id": "r2"])
            // Only seq 1 was not sent on this connection yet.
            let (resumed, sent) = try await again.json(until: { $0["op"] as? String == "resumed" })
            #expect(sent.map { $0["seq"] as? Int } == [1])
            #expect(resumed["re"] as? String == "r2")
            #expect(resumed["from"] as? Int == 1)
            #expect(resumed["to"] as? Int == 4)
            _ = try await writer.createTodo("five")
            #expect(try await again.json()["seq"] as? Int == 5)
        }
    }

    /// Broadcasts that came while the connection was unsubscribed never reached it: once it
    /// subscribes again, a resume replays them (PROTOCOL.md §5: "no seq missed").
    @Test func aResumeReplaysWhatCameWhileUnsubscribed() async throws {
        try await withDaemon { daemon in
            let (writer, _) = try await daemon.client()
            let (reader, hello) = try await daemon.client()
            let epoch = try #require(hello["epoch"] as? String)
            _ = try await writer.createTodo("one")
            #expect(try await reader.json()["seq"] as? Int == 1)
            try await reader.send(["op": "unsubscribe", "types": ["Response*"], "id": "u"])
            #expect(try await reader.json()["op"] as? String == "unsubscribed")
            _ = try await writer.createTodo("two")
            _ = try await writer.createTodo("three")
            try await reader.send(["op": "subscribe", "types": ["Response*"], "id": "s"])
            #expect(try await reader.json()["op"] as? String == "subscribed")
            try await reader.send(["op": "resume", "epoch": epoch, "after": 1, "id": "r"])
            let (resumed, replayed) = try await reader.json(until: { $0["op"] as? String == "resumed" })
            #expect(replayed.map { $0["seq"] as? Int } == [2, 3])
            #expect(resumed["from"] as? Int == 2)
            #expect(resumed["to"] as? Int == 3)
            // Nothing of it twice.
            try await reader.send(["op": "resume", "epoch": epoch, "after": 0, "id": "r2"])
            let (_, again) = try await reader.json(until: { $0["op"] as? String == "resumed" })
            #expect(again.isEmpty)
        }
    }

    /// A replay far longer than the outbound bound goes at the pace of a client that reads
    /// slowly: every page waits until the client has taken the last, so the client gets it
    /// all instead of being cut as a slow consumer.
    @Test func aLongReplayGoesAtTheClientsPace() async throws {
        try await withDaemon(
            .custom({ options in
                DaemonSetup.roomForAFlood.apply(&options)
                options.relay.maxQueueBytes = 32 << 10
                options.relay.maxQueueFrames = 100
                options.relay.resumePageSize = 20
                options.relay.slowConsumerCheckMs = 100
            })
        ) { daemon in
            let (writer, hello) = try await daemon.client()
            let epoch = try #require(hello["epoch"] as? String)
            let created = try await writer.createTodo(String(repeating: "Replayed ", count: 100))
            let id = try #require(todoID(created))
            let count = 400
            for index in 0..<count {
                try await writer.send([
                    "type": "RequestToggleCompleteTodoViewModel", "id": index, "payload": ["todo": ["id": id]],
                ])
                if index % 25 == 24 { _ = try await writer.json(until: { ($0["re"] as? Int) == index }) }
            }
            let reader = try await TestConnection.connect(port: daemon.tcpPort, receiveBuffer: 4096)
            _ = try await reader.json()
            try await reader.readSlowly()
            let reading = reader.trickle(every: .milliseconds(5))
            defer { reading.cancel() }
            try await reader.send(["op": "resume", "epoch": epoch, "after": 0, "id": "r"])
            let (resumed, replayed) = try await reader.json(
                until: { $0["op"] as? String == "resumed" || $0["op"] as? String == "error" },
                timeout: .seconds(60)
            )
            #expect(resumed["op"] as? String == "resumed", "\(resumed) after \(replayed.count)")
            #expect(replayed.compactMap { $0["seq"] as? Int } == Array(1...(count + 1)))
        }
    }

    @Test func replayedFramesAreByteForByteTheLiveOnes() async throws {
        try await withDaemon(storage: .sqlite) { daemon in
            let (writer, _) = try await daemon.client()
            let (watcher, hello) = try await daemon.client()
            _ = try await writer.createTodo("exact")
            let live = try await watcher.line()
            let (again, _) = try await daemon.client()
            try await again.send(["op": "resume", "epoch": hello["epoch"] as? String ?? "", "after": 0])
            #expect(try await again.line() == live)
        }
    }

    @Test func nothingMissedMeansFromAfterPlusOneToAfter() async throws {
        try await withDaemon { daemon in
            let (writer, _) = try await daemon.client()
            _ = try await writer.createTodo("x")
            let (client, hello) = try await daemon.client()
            try await client.send(["op": "resume", "epoch": hello["epoch"] as? String ?? "", "after": 1, "id": 5])
            let resumed = try await client.json()
            #expect(resumed["op"] as? String == "resumed")
            #expect(resumed["from"] as? Int == 2)
            #expect(resumed["to"] as? Int == 1)
        }
    }

    @Test func aForeignEpochOrAFutureSeqIsAGap() async throws {
        try await withDaemon { daemon in
            let (writer, _) = try await daemon.client()
            _ = try await writer.createTodo("x")
            let (client, hello) = try await daemon.client()
            try await client.send(["op": "resume", "epoch": "someone-else", "after": 0, "id": "g"])
            let gap = try await client.json()
            #expect(gap["op"] as? String == "gap")
            #expect(gap["re"] as? String == "g")
            #expect(gap["epoch"] as? String == hello["epoch"] as? String)
            #expect(gap["seq"] as? Int == 1)
            try await client.send(["op": "resume", "epoch": hello["epoch"] as? String ?? "", "after": 99, "id": "h"])
            #expect(try await client.json()["op"] as? String == "gap")
        }
    }

    @Test func aPrunedRangeIsAGap() async throws {
        try await withDaemon(
            storage: .sqlite,
            .custom({ options in
                options.retention = .init(maxEntries: 5, maxAgeSeconds: 0)
                options.maxBatch = 1
            }
            )
        ) { daemon in
            let (writer, hello) = try await daemon.client()
            let created = try await writer.createTodo("churn")
            for index in 0..<70 {
                try await writer.send([
                    "type": "RequestToggleCompleteTodoViewModel", "id": "t\(index)",
                    "payload": ["todo": ["id": todoID(created) ?? ""]],
                ])
                _ = try await writer.json { $0["re"] as? String == "t\(index)" }
            }
            let (client, _) = try await daemon.client()
            try await client.send(["op": "resume", "epoch": hello["epoch"] as? String ?? "", "after": 0, "id": "p"])
            let gap = try await client.json()
            #expect(gap["op"] as? String == "gap")
            #expect(gap["seq"] as? Int == 71)
        }
    }

    @Test func resumeWorksAcrossARestart() async throws {
        let directory = temporaryDirectory()
        var epoch = ""
        try await withDaemon(storage: .sqlite, dataDirectory: directory) { daemon in
            let (writer, hello) = try await daemon.client()
            epoch = hello["epoch"] as? String ?? ""
            _ = try await writer.createTodo("before restart 1")
            _ = try await writer.createTodo("before restart 2")
        }
        try await withDaemon(storage: .sqlite, dataDirectory: directory) { daemon in
            let (client, hello) = try await daemon.client()
            #expect(hello["epoch"] as? String == epoch)
            #expect(hello["seq"] as? Int == 2)
            try await client.send(["op": "resume", "epoch": epoch, "after": 1])
            #expect(try await client.json()["seq"] as? Int == 2)
            #expect(try await client.json()["op"] as? String == "resumed")
        }
    }

    /// Thousands of writes from several clients while a reader drops and resumes again and
    /// again: across all its connections it sees every seq exactly once, in order.
    @Test func resumeUnderConcurrentWritersMissesAndDoublesNothing() async throws {
        // Each reconnect resumes at once; on a loaded machine that can take longer than the
        // default start hold, after which live output would flow before the replay. The hold
        // ends as soon as the resume is answered, so a long one costs nothing here.
        try await withDaemon(storage: .sqlite, .custom({ $0.relay.initialHoldMs = 10_000 })) { daemon in
            let (seeder, hello) = try await daemon.client()
            let epoch = try #require(hello["epoch"] as? String)
            let created = try await seeder.createTodo("contended")
            let id = try #require(todoID(created))
            let writers = 4
            let perWriter = 500
            let total = 1 + writers * perWriter
            let writing = Task {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for writerIndex in 0..<writers {
                        group.addTask {
                            let (connection, _) = try await daemon.client()
                            for index in 0..<perWriter {
                                try await connection.send([
                                    "type": "RequestToggleCompleteTodoViewModel", "id": "\(writerIndex)-\(index)",
                                    "payload": ["todo": ["id": id]],
                                ])
                                if index % 16 == 15 {
                                    _ = try await connection.json { $0["re"] as? String == "\(writerIndex)-\(index)" }
                                }
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            var seen: [Int] = [1]
            var connection = try await daemon.client().0
            try await connection.send(["op": "resume", "epoch": epoch, "after": 1])
            var reconnects = 0
            while seen.last ?? 0 < total {
                let frame = try await connection.json()
                if let seq = frame["seq"] as? Int {
                    seen.append(seq)
                    if seq % 300 == 0 {
                        await connection.close()
                        reconnects += 1
                        connection = try await daemon.client().0
                        try await connection.send([
                            "op": "resume", "epoch": epoch, "after": seq, "id": "r\(reconnects)",
                        ])
                    }
                } else {
                    #expect(frame["op"] as? String == "resumed")
                }
            }
            try await writing.value
            #expect(seen == Array(1...total))
            #expect(reconnects >= 5)
        }
    }
}

@Suite(.timeLimit(.minutes(2))) struct AuthAndTapTests {
    @Test func theTapSeesModelLayerEventsMarkedWithTheirSession() async throws {
        try await withDaemon(
            .custom({ $0.tokens = [TokenEntry(sha256: TokenEntry.digest("tap-secret"), role: .monitor)] })
        ) { daemon in
            let (tap, hello) = try await daemon.client()
            #expect(hello["auth"] as? String == "none")
            try await tap.send(["op": "subscribe", "types": ["ResponseTodos"], "id": "early"])
            #expect(errorCode(try await tap.json()) == "not_permitted")
            try await tap.send(["op": "auth", "token": "tap-secret", "id": "a"])
            let authenticated = try await tap.json()
            #expect(authenticated["op"] as? String == "authenticated")
            #expect(authenticated["role"] as? String == "monitor")
            try await tap.send(["op": "subscribe", "types": ["*"], "id": "s"])
            #expect(try await tap.json()["op"] as? String == "subscribed")

            let (view, viewHello) = try await daemon.client()
            try await view.send(["type": "RequestTodoViewModels", "id": "l"])
            _ = try await view.json()
            var names: [String] = []
            var sessions: Set<String> = []
            while names.count < 4 {
                let frame = try await tap.json()
                names.append(frame["type"] as? String ?? "?")
                sessions.insert(frame["session"] as? String ?? "?")
            }
            #expect(names == ["RequestTodoViewModels", "RequestReadTodos", "ResponseTodos", "ResponseTodoViewModels"])
            #expect(sessions == [viewHello["session"] as? String ?? ""])

            try await tap.send(["type": "RequestTodoViewModels", "id": "p"])
            #expect(errorCode(try await tap.json()) == "not_permitted")
            // Any type, one the daemon does not know too: a monitor publishes nothing.
            try await tap.send(["type": "Bogus", "id": "q"])
            #expect(errorCode(try await tap.json()) == "not_permitted")
        }
    }

    @Test func monitorsGetConfiguredPayloadFieldsRedactedAndViewsDoNot() async throws {
        try await withDaemon(
            .custom({
                $0.tokens = [TokenEntry(sha256: TokenEntry.digest("tap-secret"), role: .monitor)]
                $0.relay.monitorRedactedFields = ["title"]
            })
        ) { daemon in
            let (tap, _) = try await daemon.client()
            try await tap.send(["op": "auth", "token": "tap-secret", "id": "a"])
            _ = try await tap.json()
            try await tap.send(["op": "subscribe", "types": ["*"], "id": "s"])
            _ = try await tap.json()
            let (view, _) = try await daemon.client()
            let created = try await view.createTodo("a private title")
            #expect((created["payload"] as? [String: Any])?["title"] as? String == "a private title")
            // Every frame the tap got about it — the request copies, model events and the
            // broadcast — has the title redacted, and only the title.
            let (broadcast, earlier) = try await tap.json { $0["seq"] as? Int == created["seq"] as? Int }
            #expect((broadcast["payload"] as? [String: Any])?["title"] as? String == "[redacted]")
            #expect(todoID(broadcast) == todoID(created))
            let titles = (earlier + [broadcast]).compactMap { frame -> String? in
                let text = String(
                    decoding: (try? JSONSerialization.data(withJSONObject: frame)) ?? Data(),
                    as: UTF8.self
                )
                return text.contains("a private title") ? text : nil
            }
            #expect(titles.isEmpty, "unredacted: \(titles)")
        }
    }

    /// A session that must authenticate cannot send `resume` first thing: its hold on live
    /// output starts when it has authenticated, so `auth` then `resume` still sees the replay
    /// before any live broadcast, in seq order (PROTOCOL.md §2, §5).
    @Test func aResumeRightAfterAuthenticationComesBeforeLiveBroadcasts() async throws {
        try await withRequiredAuthAndALongHold { daemon, writer in
            _ = try await writer.createTodo("one")
            _ = try await writer.createTodo("two")

            let (reader, hello) = try await daemon.client()
            let epoch = try #require(hello["epoch"] as? String)
            try await reader.send(["op": "auth", "token": "view-secret", "id": "a"])
            #expect(try await reader.json()["op"] as? String == "authenticated")
            // A broadcast after the authentication, before the resume.
            let three = try await writer.createTodo("three")
            #expect(three["seq"] as? Int == 3)
            try await reader.send(["op": "resume", "epoch": epoch, "after": 1, "id": "r"])
            // The replay runs to the newest seq, so 3 comes with it, and not again live.
            let (resumed, replayed) = try await reader.json(until: { $0["op"] as? String == "resumed" })
            #expect(replayed.map { $0["seq"] as? Int } == [2, 3])
            #expect(resumed["to"] as? Int == 3)
            try await reader.send(["op": "ping", "id": "p"])
            #expect(try await reader.json()["op"] as? String == "pong")
        }
    }

    /// Where auth is required, nothing is held before it: a session that does not resume gets
    /// live broadcasts once the hold after its authentication ends with its next frame.
    @Test func theHoldAfterAuthenticationEndsWithTheNextFrame() async throws {
        try await withRequiredAuthAndALongHold { daemon, writer in
            let (reader, _) = try await daemon.client()
            try await reader.send(["op": "auth", "token": "view-secret", "id": "a"])
            #expect(try await reader.json()["op"] as? String == "authenticated")
            _ = try await writer.createTodo("one")
            try await reader.send(["op": "ping", "id": "p"])
            #expect(try await reader.json()["seq"] as? Int == 1)
            #expect(try await reader.json()["op"] as? String == "pong")
        }
    }

    /// A daemon with a view token (so auth is required) and a start hold long enough that only
    /// a client's frame can end it in a test, with an authenticated writer.
    private func withRequiredAuthAndALongHold(_ body: (Daemon, TestConnection) async throws -> Void) async throws {
        try await withDaemon(
            .custom({
                $0.tokens = [TokenEntry(sha256: TokenEntry.digest("view-secret"), role: .view)]
                $0.relay.initialHoldMs = 60_000
            })
        ) { daemon in
            let (writer, _) = try await daemon.client()
            try await writer.send(["op": "auth", "token": "view-secret", "id": "a"])
            _ = try await writer.json()
            try await body(daemon, writer)
        }
    }

    @Test func requiredAuthGatesEverythingButPingAndClosesAfterThreeBadTokens() async throws {
        try await withDaemon(
            .custom({ $0.tokens = [TokenEntry(sha256: TokenEntry.digest("view-secret"), role: .view)] })
        ) { daemon in
            let (client, hello) = try await daemon.client()
            #expect(hello["auth"] as? String == "required")
            try await client.send(["type": "RequestTodoViewModels", "id": 1])
            #expect(errorCode(try await client.json()) == "unauthorized")
            try await client.send(["op": "subscribe", "types": ["*"], "id": 2])
            #expect(errorCode(try await client.json()) == "unauthorized")
            try await client.send(["op": "ping", "id": 3])
            #expect(try await client.json()["op"] as? String == "pong")
            try await client.send(["op": "auth", "token": "view-secret", "id": 4])
            #expect(try await client.json()["role"] as? String == "view")
            try await client.send(["type": "RequestTodoViewModels", "id": 5])
            #expect(try await client.json()["type"] as? String == "ResponseTodoViewModels")

            let (stranger, _) = try await daemon.client()
            for attempt in 1...3 {
                try await stranger.send(["op": "auth", "token": "guess\(attempt)", "id": attempt])
                #expect(errorCode(try await stranger.json()) == "unauthorized")
            }
            _ = try await stranger.waitForClose()

            // Whatever else is wrong with a frame, before auth it is refused as such; an auth
            // without a token is a bad token, and three of them close (one whose token is not a
            // string is a mistyped field).
            let (malformed, _) = try await daemon.client()
            for frame in [
                #"{"id":11}"#, #"{"op":"ping","type":"X","id":12}"#,
                #"{"type":"RequestTodoViewModels","mid":"","id":13}"#,
                #"{"op":["subscribe"],"id":14}"#, #"{"op":"subscribe","id":true}"#,
            ] {
                try await malformed.sendLine(frame)
                let refusal = try await malformed.json()
                #expect(errorCode(refusal) == "unauthorized", "\(frame): \(refusal)")
            }
            try await malformed.sendLine(#"{"op":"ping","id":false}"#)
            #expect(errorCode(try await malformed.json()) == "invalid_frame", "a ping's own mistakes are its own")
            try await malformed.sendLine(#"{"op":"auth","token":5}"#)
            #expect(errorCode(try await malformed.json()) == "invalid_frame")
            for attempt in 1...3 {
                try await malformed.send(["op": "auth", "id": attempt])
                let refusal = try await malformed.json()
                #expect(errorCode(refusal) == "unauthorized")
                #expect(refusal["re"] as? Int == attempt)
            }
            _ = try await malformed.waitForClose()
            // Every error answered is counted, the third bad token's too, that closes: 2 + 3 + 8.
            let metrics = try await httpGet(port: daemon.httpPort, path: "/metrics").body
            #expect(metrics.contains("\ntodostream_errors_total{code=\"unauthorized\"} 13\n"), "\(metrics)")
        }
    }

    @Test func theRateLimitAnswersRateLimitedAndKeepsTheConnection() async throws {
        try await withDaemon(
            .custom({ options in
                // A token every 1,000 s: the five pings find the bucket as the burst left it
                // however slowly a loaded machine sends them (at 1 a second, a run of the whole
                // suite once took over a second and got a fifth pong).
                options.relay.rateLimitPerSecond = 0.001
                options.relay.rateLimitBurst = 3
            })
        ) { daemon in
            let (client, _) = try await daemon.client()
            for index in 0..<5 { try await client.send(["op": "ping", "id": index]) }
            var codes: [String] = []
            for _ in 0..<5 {
                let frame = try await client.json()
                codes.append(frame["op"] as? String == "pong" ? "pong" : errorCode(frame) ?? "?")
            }
            #expect(codes == ["pong", "pong", "pong", "rate_limited", "rate_limited"])
        }
    }
}
