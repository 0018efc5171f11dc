import Foundation
import NIOCore
import NIOPosix
import Relay
import Testing

@testable import TodoStore
@testable import todostreamd

@Suite(.timeLimit(.minutes(2))) struct ProtocolTests {
    @Test func helloComesFirstWithEveryField() async throws {
        try await withDaemon { daemon in
            let (connection, hello) = try await daemon.client()
            #expect(hello["op"] as? String == "hello")
            #expect(hello["protocol"] as? Int == 1)
            #expect(hello["server"] as? String == "todostreamd/1.0.0")
            #expect((hello["session"] as? String).flatMap(UUID.init(uuidString:)) != nil)
            #expect((hello["epoch"] as? String)?.isEmpty == false)
            #expect(hello["seq"] as? Int == 0)
            #expect(hello["auth"] as? String == "none")
            #expect(hello["subscriptions"] as? [String] == ["Response*"])
            await connection.close()
        }
    }

    @Test func aChangeReachesEveryClientWithOneSeqAndReOnlyForTheRequester() async throws {
        try await withDaemon { daemon in
            let (writer, _) = try await daemon.client()
            let (other, _) = try await daemon.client()
            let mine = try await writer.createTodo("Buy milk", id: "a")
            let theirs = try await other.json()
            #expect(theirs["seq"] as? Int == 1)
            #expect(mine["seq"] as? Int == 1)
            #expect(mine["re"] as? String == "save-a")
            #expect(theirs["re"] == nil)
            #expect(theirs["type"] as? String == "ResponseTodoViewModel")
            #expect(todoID(theirs) == todoID(mine))
            let title = (theirs["payload"] as? [String: Any])?["title"] as? String
            #expect(title == "Buy milk")

            // Toggle from the other client: seq rises by exactly one.
            try await other.send([
                "type": "RequestToggleCompleteTodoViewModel", "id": 7, "payload": ["todo": ["id": todoID(mine) ?? ""]],
            ])
            let toggled = try await other.json()
            #expect(toggled["re"] as? Int == 7)
            #expect(toggled["seq"] as? Int == 2)
            let seen = try await writer.json()
            #expect(seen["seq"] as? Int == 2)
            #expect((seen["payload"] as? [String: Any])?["complete"] as? Bool == true)
        }
    }

    @Test func pipelinedRequestsAreAnsweredInTheOrderSent() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            let created = try await client.createTodo("Pipelined")
            let id = try #require(todoID(created))
            let missing = UUID().uuidString.lowercased()
            // Toggles (writes), a toggle of an unknown todo (a failure reply), an empty title (a
            // validation failure before the store), a read, then a ping: sent at once, answered
            // in this order, with the broadcasts' seqs rising by one.
            var lines: [String] = []
            for number in 1...20 {
                let target = number == 7 ? missing : id
                lines.append(
                    #"{"type":"RequestToggleCompleteTodoViewModel","id":\#(number),"payload":{"todo":{"id":"\#(target)"}}}"#
                )
            }
            lines.append(
                #"{"type":"RequestUpdateDetailViewModel","id":21,"payload":{"todo":{"id":"\#(id)"},"title":"  "}}"#
            )
            lines.append(#"{"type":"RequestTodoViewModels","id":22}"#)
            lines.append(#"{"op":"ping","id":23}"#)
            try await client.send(lines.joined(separator: "\n") + "\n")
            var answered: [Int] = []
            var seqs: [Int] = []
            var listed: [String: Any]?
            while answered.last != 23 {
                let frame = try await client.json()
                if let re = frame["re"] as? Int { answered.append(re) }
                if let seq = frame["seq"] as? Int { seqs.append(seq) }
                if frame["re"] as? Int == 7 { #expect(errorCode(frame) == "not_found") }
                if frame["re"] as? Int == 21 { #expect(errorCode(frame) == "validation_failed") }
                if frame["re"] as? Int == 22 { listed = frame }
            }
            #expect(answered == Array(1...23))
            let first = try #require(seqs.first)
            #expect(seqs == Array(first..<(first + 19)))
            // The read saw all 19 toggles: an odd number of them leaves the todo complete.
            let todos = try #require(listed?["payload"] as? [[String: Any]])
            #expect(todos.first?["complete"] as? Bool == true)
        }
    }

    @Test func fiftyConcurrentClientsAllReceiveABroadcast() async throws {
        try await withDaemon { daemon in
            var clients: [TestConnection] = []
            for _ in 0..<50 { clients.append(try await daemon.client().0) }
            let (writer, _) = try await daemon.client()
            let broadcast = try await writer.createTodo("For everyone")
            let seq = try #require(broadcast["seq"] as? Int)
            try await withThrowingTaskGroup(of: Int?.self) { group in
                for client in clients { group.addTask { try await client.json()["seq"] as? Int } }
                for try await received in group { #expect(received == seq) }
            }
        }
    }

    @Test(arguments: [
        ("this is not json", "invalid_json", false),
        ("[1,2]", "invalid_json", false),
        ("42", "invalid_json", false),
        // Not JSON, though Foundation's decoder would read each (the frame is checked first).
        (#"{"op":"ping","id":"x",}"#, "invalid_json", false),
        (#"{"op":"ping","id":"x","x":[1,]}"#, "invalid_json", false),
        (#"{"op":"ping","id":"x","x":"\q"}"#, "invalid_json", false),
        (#"{"op":"ping","id":"x","x":01}"#, "invalid_json", false),
        ("{\"op\":\"pi\tng\",\"id\":\"x\"}", "invalid_json", false),
        ("{\"type\":\"RequestTodoViewModels\",\"id\":\"x\",\"x\":\"a\u{1}\u{0}\"}", "invalid_json", false),
        (#"{"type":"RequestUpdateDetailViewModel","id":"x","payload":{"title":"a\ud800b"}}"#, "invalid_json", false),
        (#"{"id":"x"}"#, "invalid_frame", true),
        (#"{"type":"RequestTodoViewModels","op":"ping","id":"x"}"#, "invalid_frame", true),
        (#"{"type":5,"id":"x"}"#, "invalid_frame", true),
        (#"{"op":"ping","id":""}"#, "invalid_frame", false),
        (#"{"op":"ping","id":1.5}"#, "invalid_frame", false),
        (#"{"op":"subscribe","types":"Response*","id":"x"}"#, "invalid_frame", true),
        (#"{"type":"RequestEverything","id":"x"}"#, "unknown_type", true),
        (#"{"op":"launch","id":"x"}"#, "unknown_op", true),
        (#"{"type":"ResponseTodoViewModel","id":"x","payload":{}}"#, "not_permitted", true),
        (#"{"type":"RequestWriteTodo","id":"x"}"#, "not_permitted", true),
        (#"{"op":"subscribe","types":["RequestReadTodos"],"id":"x"}"#, "not_permitted", true),
        (#"{"op":"subscribe","types":["Nothing*"],"id":"x"}"#, "unknown_type", true),
        (#"{"type":"RequestDeleteTodoViewModel","id":"x","payload":{"todo":{}}}"#, "invalid_payload", true),
        (#"{"op":"auth","token":"wrong","id":"x"}"#, "unauthorized", true),
        (#"{"op":"resume","epoch":1,"after":0,"id":"x"}"#, "invalid_frame", true),
    ])
    func relayErrorsKeepTheConnectionOpen(frame: String, code: String, echoesID: Bool) async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            try await client.sendLine(frame)
            let answer = try await client.json()
            #expect(answer["op"] as? String == "error")
            #expect(errorCode(answer) == code)
            #expect(((answer["error"] as? [String: Any])?["message"] as? String)?.isEmpty == false)
            if echoesID { #expect(answer["re"] as? String == "x") } else { #expect(answer["re"] == nil) }
            try await client.sendLine(#"{"op":"ping","id":"still"}"#)
            #expect(try await client.json()["op"] as? String == "pong")
        }
    }

    /// An unknown name is quoted in the message, an empty one said to be empty, a long one cut.
    @Test func unknownNamesAreShownReadably() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            let long = String(repeating: "Q", count: 5_000)
            let cases: [(String, String)] = [
                (#"{"type":"","id":"x"}"#, "The event type is empty."),
                (#"{"op":"","id":"x"}"#, "The op is empty."),
                (#"{"type":"RequestEverything","id":"x"}"#, "Unknown event type RequestEverything."),
                (#"{"type":"\#(long)","id":"x"}"#, "Unknown event type \(long.prefix(80))…."),
                (#"{"op":"\#(long)","id":"x"}"#, "Unknown op \(long.prefix(80))…."),
            ]
            for (frame, message) in cases {
                try await client.sendLine(frame)
                let answer = try await client.json()
                #expect((answer["error"] as? [String: Any])?["message"] as? String == message)
            }
        }
    }

    @Test func invalidUTF8IsInvalidJSON() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            try await client.sendBytes(
                Array(#"{"op":"ping","id":""#.utf8) + [0xFF, 0xFE] + Array(#""}"#.utf8) + [0x0A]
            )
            #expect(errorCode(try await client.json()) == "invalid_json")
        }
    }

    @Test func crlfAndBlankLinesAreTolerated() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            try await client.send("\n\r\n   \n{\"op\":\"ping\",\"id\":1}\r\n")
            let pong = try await client.json()
            #expect(pong["op"] as? String == "pong")
            #expect(pong["re"] as? Int == 1)
        }
    }

    /// A reload's `max_frame_bytes` applies to connections opened after it; one opened before
    /// keeps its own limit, and its `frame_too_large` names that limit, not the new one.
    @Test func aFrameTooLargeNamesTheConnectionsOwnLimitAfterAReload() async throws {
        try await withDaemon(.custom({ $0.relay.maxFrameBytes = 512 })) { daemon in
            let (old, _) = try await daemon.client()
            let settings = daemon.relay.settings
            var raised = settings.configuration
            raised.maxFrameBytes = 2048
            settings.update(configuration: raised, auth: settings.auth)
            let (new, _) = try await daemon.client()
            let line = #"{"op":"ping","id":"big","pad":""# + String(repeating: "x", count: 1000) + "\"}\n"
            try await old.send(line)
            let refused = try await old.json()
            #expect(errorCode(refused) == "frame_too_large")
            let message = try #require((refused["error"] as? [String: Any])?["message"] as? String)
            #expect(message.contains("larger than 512 bytes"), "\(message)")
            try await new.send(line)
            #expect(try await new.json()["re"] as? String == "big")
        }
    }

    /// A frame refused as too large is a frame received: `frames_in_total` counts it, as it
    /// counts one refused as invalid JSON, so that frames in and errors add up.
    @Test func aFrameTooLargeCountsAsAFrameIn() async throws {
        try await withDaemon(.custom({ $0.relay.maxFrameBytes = 512 })) { daemon in
            func framesIn() async throws -> Int? {
                let body = try await httpGet(port: daemon.httpPort, path: "/metrics").body
                return body.split(separator: "\n").first { $0.hasPrefix("todostream_frames_in_total ") }
                    .flatMap { Int($0.split(separator: " ")[1]) }
            }
            let (client, _) = try await daemon.client()
            try await client.sendLine(#"{"op":"ping","id":"a"}"#)
            _ = try await client.json()
            let before = try #require(try await framesIn())
            try await client.sendLine(String(repeating: "x", count: 2_000))
            #expect(errorCode(try await client.json()) == "frame_too_large")
            try await client.sendLine("not json")
            #expect(errorCode(try await client.json()) == "invalid_json")
            #expect(try await framesIn() == before + 2)
        }
    }

    @Test func anOversizedLineIsDroppedAsItArrivesAndTheConnectionStays() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            let chunk = String(repeating: "x", count: 32 * 1024)
            for _ in 0..<8 { try await client.send(chunk) }  // 256 KiB, no newline yet
            let refused = try await client.json()
            #expect(errorCode(refused) == "frame_too_large")
            for _ in 0..<8 { try await client.send(chunk) }
            try await client.send("\n{\"op\":\"ping\",\"id\":\"after\"}\n")
            let pong = try await client.json()
            #expect(pong["re"] as? String == "after")
        }
    }

    @Test func appErrorsComeAsTheRequestsOwnResponseType() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            let unknown = "00000000-0000-0000-0000-000000000000"
            try await client.send([
                "type": "RequestToggleCompleteTodoViewModel", "id": "t", "payload": ["todo": ["id": unknown]],
            ])
            let notFound = try await client.json()
            #expect(notFound["type"] as? String == "ResponseTodoViewModel")
            #expect(errorCode(notFound) == "not_found")
            #expect(notFound["seq"] == nil)

            try await client.send([
                "type": "RequestTodoDetailViewModel", "id": "d", "payload": ["todo": ["id": unknown]],
            ])
            let detail = try await client.json()
            #expect(detail["type"] as? String == "ResponseTodoDetailViewModel")
            #expect(errorCode(detail) == "not_found")

            try await client.send(["type": "RequestNewTodoDetailViewModel", "id": "n"])
            var fresh = try #require(try await client.json()["payload"] as? [String: Any])
            fresh["title"] = "   "
            try await client.send(["type": "RequestUpdateDetailViewModel", "id": "u", "payload": fresh])
            let invalid = try await client.json()
            #expect(invalid["type"] as? String == "ResponseUpdateDetailViewModel")
            let error = try #require(invalid["error"] as? [String: Any])
            #expect(error["code"] as? String == "validation_failed")
            #expect(error["field"] as? String == "title")
            #expect(error["message"] as? String == "Please add a title.")

            let created = try await client.createTodo("Versioned")
            let id = try #require(todoID(created))
            try await client.send([
                "type": "RequestDeleteTodoViewModel", "id": "c", "payload": ["todo": ["id": id, "version": 9]],
            ])
            let conflict = try await client.json()
            #expect(errorCode(conflict) == "conflict")
            let current = try #require((conflict["error"] as? [String: Any])?["current"] as? [String: Any])
            #expect(current["title"] as? String == "Versioned")

            // A read that names a version is held to it too (PROTOCOL.md §6); without one it
            // answers with what is stored.
            try await client.send([
                "type": "RequestTodoDetailViewModel", "id": "s", "payload": ["todo": ["id": id, "version": 9]],
            ])
            let stale = try await client.json()
            #expect(stale["type"] as? String == "ResponseTodoDetailViewModel")
            #expect(errorCode(stale) == "conflict")
            let stored = try #require((stale["error"] as? [String: Any])?["current"] as? [String: Any])
            #expect((stored["todo"] as? [String: Any])?["version"] as? Int == 1)
            for (re, todo) in [("v", ["id": id, "version": 1]), ("w", ["id": id])] as [(String, [String: Any])] {
                try await client.send(["type": "RequestTodoDetailViewModel", "id": re, "payload": ["todo": todo]])
                let detail = try await client.json()
                #expect(detail["re"] as? String == re)
                #expect((detail["payload"] as? [String: Any])?["title"] as? String == "Versioned")
            }
        }
    }

    @Test func storageFailureAnswersUnavailableAndKeepsTheConnection() async throws {
        let (store, faults) = await GroupCommitStore.inMemory()
        try await withDaemon(store: store) { daemon in
            let (client, _) = try await daemon.client()
            let created = try await client.createTodo("Before the outage")
            faults.failCommits(true)
            try await client.send([
                "type": "RequestDeleteTodoViewModel", "id": "x", "payload": ["todo": ["id": todoID(created) ?? ""]],
            ])
            let answer = try await client.json()
            #expect(errorCode(answer) == "unavailable")
            #expect(answer["seq"] == nil)
            let health = try await httpGet(port: daemon.httpPort, path: "/healthz")
            #expect(health.status == 503)
            faults.failCommits(false)
            try await client.send(["type": "RequestTodoViewModels", "id": "l"])
            let list = try await client.json()
            #expect((list["payload"] as? [Any])?.count == 1)
        }
    }

    /// `/healthz` says 200 at its first look once storage takes writes again: the other looks
    /// at the store's health (`/metrics`, the watchdog's) make no probe write of their own, so
    /// they never use up the one `/healthz` may make (at most one a probe interval).
    @Test func healthzRecoversAtItsFirstLookWhateverElseLookedMeanwhile() async throws {
        let (store, faults) = await GroupCommitStore.inMemory()
        await store.setProbeInterval(.seconds(3_600))
        try await withDaemon(store: store) { daemon in
            let (client, _) = try await daemon.client()
            let created = try await client.createTodo("Before the outage")
            faults.failCommits(true)
            try await client.send([
                "type": "RequestDeleteTodoViewModel", "id": "x", "payload": ["todo": ["id": todoID(created) ?? ""]],
            ])
            #expect(errorCode(try await client.json()) == "unavailable")
            let metrics = try await httpGet(port: daemon.httpPort, path: "/metrics")
            #expect(metrics.body.contains("todostream_storage_up 0"), "\(metrics.body.prefix(300))")
            faults.failCommits(false)
            _ = try await httpGet(port: daemon.httpPort, path: "/metrics")
            #expect(try await httpGet(port: daemon.httpPort, path: "/healthz").status == 200)
        }
    }

    @Test func listsAreNewestFirstAndHideDeletedTodos() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            let first = try await client.createTodo("first")
            _ = try await client.createTodo("second")
            _ = try await client.createTodo("third")
            try await client.send([
                "type": "RequestDeleteTodoViewModel", "id": "del", "payload": ["todo": ["id": todoID(first) ?? ""]],
            ])
            let deleted = try await client.json()
            #expect((deleted["payload"] as? [String: Any])?["deleted"] as? Bool == true)
            try await client.send(["type": "RequestTodoViewModels", "id": "list"])
            let list = try #require(try await client.json()["payload"] as? [[String: Any]])
            #expect(list.map { $0["title"] as? String } == ["third", "second"])
        }
    }

    @Test func subscriptionsChooseWhatBroadcastsArrive() async throws {
        try await withDaemon { daemon in
            let (quiet, _) = try await daemon.client()
            let (writer, _) = try await daemon.client()
            try await quiet.send(["op": "unsubscribe", "types": ["Response*"], "id": "u"])
            let unsubscribed = try await quiet.json()
            #expect(unsubscribed["op"] as? String == "unsubscribed")
            #expect(unsubscribed["types"] as? [String] == [])
            _ = try await writer.createTodo("unseen")
            try await quiet.send([
                "op": "subscribe", "types": ["ResponseTodoViewModel", "ResponseTodoViewModel"], "id": "s",
            ])
            let subscribed = try await quiet.json()
            // The broadcast made while unsubscribed never arrives: the next frame is this answer.
            #expect(subscribed["op"] as? String == "subscribed")
            #expect(subscribed["types"] as? [String] == ["ResponseTodoViewModel"])
            _ = try await writer.createTodo("seen")
            let seen = try await quiet.json()
            #expect(seen["seq"] as? Int == 2)
            // Own replies arrive whatever the subscriptions.
            try await quiet.send(["op": "unsubscribe", "types": ["ResponseTodoViewModel"], "id": "u2"])
            _ = try await quiet.json()
            try await quiet.send(["type": "RequestTodoViewModels", "id": "mine"])
            #expect(try await quiet.json()["re"] as? String == "mine")
        }
    }

    /// A loop where no session listens is not woken for broadcasts; a session that starts
    /// there later is greeted with the newest seq all the same, resumes through it, and gets
    /// every broadcast after it.
    @Test func loopsWhereNobodyListensStillGreetAndResumeWithTheNewestSeq() async throws {
        try await withDaemon { daemon in
            // Requesters only, on every loop. Connections go to the loops in turn, and the test's
            // clients take turns from the same group: one turn skipped every other connection
            // puts the daemon's sessions on alternate loops.
            var quiet: [TestConnection] = []
            for index in 0..<4 {
                if index % 2 == 1 { _ = MultiThreadedEventLoopGroup.singleton.next() }
                let (connection, _) = try await daemon.client()
                try await connection.send(["op": "unsubscribe", "types": ["Response*"], "id": "u\(index)"])
                #expect(try await connection.json()["op"] as? String == "unsubscribed")
                quiet.append(connection)
            }
            for seq in 1...3 {
                // The requester's own copy (with `re`) arrives though it subscribes to nothing.
                let mine = try await quiet[seq].createTodo("t\(seq)")
                #expect(mine["seq"] as? Int == seq)
            }
            var fresh: [(TestConnection, hello: [String: Any])] = []
            for index in 0..<4 {
                if index % 2 == 1 { _ = MultiThreadedEventLoopGroup.singleton.next() }
                fresh.append(try await daemon.client())
            }
            #expect(fresh.map { $0.hello["seq"] as? Int } == [3, 3, 3, 3])
            for (index, (connection, hello)) in fresh.enumerated() where index < 2 {
                try await connection.send([
                    "op": "resume", "epoch": hello["epoch"] as? String ?? "", "after": 0, "id": "r",
                ])
                let replayed = [try await connection.json(), try await connection.json(), try await connection.json()]
                #expect(replayed.map { $0["seq"] as? Int } == [1, 2, 3])
                let resumed = try await connection.json()
                #expect(resumed["op"] as? String == "resumed")
                #expect(resumed["to"] as? Int == 3)
            }
            #expect(try await quiet[0].createTodo("t4")["seq"] as? Int == 4)
            for (connection, _) in fresh { #expect(try await connection.json()["seq"] as? Int == 4) }
        }
    }

    @Test func aClientThatNeverReadsIsCutWhileOthersKeepReceiving() async throws {
        try await withDaemon(
            .custom({ options in
                // Room for a reader that lags a little on a busy machine (the suite runs tests
                // in parallel on two cores); none for one that reads nothing.
                options.relay.maxQueueBytes = 512 * 1024
                options.relay.maxQueueFrames = 4096
                // A test client whose event loop is starved for a moment by the tests running
                // beside it is not stalled; the client that never reads still is after 5 s.
                options.relay.slowConsumerCheckMs = 5_000
                // 4,000 requests in a burst: none may be refused as rate_limited.
                options.relay.rateLimitPerSecond = 1_000_000
                options.relay.rateLimitBurst = 1_000_000
                options.relay.socketSendBufferBytes = 4096
            })
        ) { daemon in
            let slow = try await TestConnection.connect(port: daemon.tcpPort, receiveBuffer: 4096, autoRead: false)
            let (reader, _) = try await daemon.client()
            let (writer, _) = try await daemon.client()
            // Many more frames than any kernel buffering on loopback plus the queue bound holds,
            // so the bound is what decides.
            let created = try await writer.createTodo("Busy")
            let id = try #require(todoID(created))
            _ = try await reader.json()
            let count = 4000
            try await toggle(id, times: count, from: writer)
            var last = 0
            for _ in 0..<count {
                let frame = try await reader.json(timeout: .seconds(30))
                let seq = try #require(frame["seq"] as? Int, "\(frame)")
                #expect(seq == last + 1 || last == 0)
                last = seq
            }
            #expect(last == count + 1)
            slow.startReading()
            let rest = try await slow.waitForClose(timeout: .seconds(30))
            let lines = String(decoding: rest, as: UTF8.self).split(separator: "\n")
            #expect(lines.count < count)
            // The notice reaches the client, right after the last complete frame, and nothing
            // follows it.
            let lastLine = try #require(lines.last)
            let notice = try #require(
                try JSONSerialization.jsonObject(with: Data(lastLine.utf8)) as? [String: Any],
                "the last line is not a whole frame: \(lastLine.prefix(200))"
            )
            #expect(notice["op"] as? String == "error")
            #expect((notice["error"] as? [String: Any])?["code"] as? String == "slow_consumer")
            var previous = 0
            for line in lines.dropLast() {
                let frame = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                guard let seq = frame["seq"] as? Int else { continue }
                #expect(previous == 0 || seq == previous + 1, "broadcasts before the cut come in order, no gaps")
                previous = seq
            }
        }
    }

    /// A client that reads, but far slower than its broadcasts come, is cut as a slow consumer
    /// and still gets every frame it was sent whole, then the notice, then the close, however
    /// many grace periods its backlog takes it: only a client that takes nothing for a whole
    /// grace period is closed before its last frames are out.
    /// A client that has just connected and sent nothing yet has its live output held (the
    /// start hold). More than the outbound bound arriving meanwhile ends the hold rather than
    /// cutting the client, which has had no chance to read: it gets every broadcast, in order.
    @Test func aFloodDuringTheStartHoldEndsTheHoldInsteadOfCuttingTheClient() async throws {
        try await withDaemon(
            .custom({ options in
                options.relay.initialHoldMs = 10_000
                options.relay.maxQueueBytes = 64 << 10
                options.relay.rateLimitPerSecond = 1_000_000
                options.relay.rateLimitBurst = 1_000_000
            })
        ) { daemon in
            let (writer, _) = try await daemon.client()
            let created = try await writer.createTodo(String(repeating: "Flood ", count: 150))
            let id = try #require(todoID(created))
            let first = try #require(created["seq"] as? Int)
            let reader = try await TestConnection.connect(port: daemon.tcpPort)
            #expect(try await reader.json()["op"] as? String == "hello")
            try await toggle(id, times: 300, from: writer)
            for expected in (first + 1)...(first + 300) {
                let frame = try await reader.json()
                #expect(frame["error"] == nil, "\(frame)")
                #expect(frame["seq"] as? Int == expected)
                if frame["seq"] as? Int != expected { break }
            }
        }
    }

    /// A small outbound bound and no rate limit: lists pipelined far past the bound.
    private static func pipelinedLists(_ options: inout DaemonOptions) {
        options.relay.maxQueueBytes = 64 << 10
        options.relay.rateLimitPerSecond = 1_000_000
        options.relay.rateLimitBurst = 1_000_000
    }

    /// Reads the answers to `count` lists sent with ids 0, 1, … in order, each of `todos`.
    private func expectListAnswers(_ count: Int, of todos: Int, on reader: TestConnection) async throws {
        for index in 0..<count {
            let answer = try await reader.json(timeout: .seconds(30))
            #expect(answer["re"] as? Int == index, "\(answer["error"] ?? answer["re"] ?? "")")
            #expect((answer["payload"] as? [Any])?.count == todos)
            if answer["re"] as? Int != index { break }
        }
    }

    /// A client that pipelines requests whose answers are far larger than the outbound bound,
    /// and reads them as fast as it can, gets every answer in order: answers it asked for are
    /// not a reason to cut it, and no new request is taken while they back up.
    @Test func pipelinedAnswersLargerThanTheBoundReachAReadingClient() async throws {
        try await withDaemon(
            .custom({ options in
                Self.pipelinedLists(&options)
                // What is tested is that a reading client gets every answer, not how soon one
                // that stops reading is cut: on a machine busy with the other tests, this
                // process's client may not get to read for a second.
                options.relay.slowConsumerCheckMs = 10_000
            })
        ) { daemon in
            let (writer, _) = try await daemon.client()
            try await saveLongTodos(40, subtitleBytes: 2_400, from: writer)
            let reader = try await TestConnection.connect(port: daemon.tcpPort)
            _ = try await reader.json()
            let count = 100
            reader.post((0..<count).map { #"{"type":"RequestTodoViewModels","id":\#($0)}"# + "\n" }.joined())
            try await expectListAnswers(count, of: 40, on: reader)
        }
    }

    /// A client that pipelines requests with large answers (lists) and reads none of them
    /// does not make the daemon hold them all: a request joins those in flight only while
    /// their answers fit beside the unsent ones in half the outbound bound, so here (answers
    /// three times the bound) they go one at a time, and only once the client has taken the
    /// last. It still gets every answer, in order, once it reads.
    @Test func pipelinedLargeAnswersAreNotTakenFasterThanTheClientReads() async throws {
        try await withDaemon(
            .custom({ options in
                Self.pipelinedLists(&options)
                // The client stops reading for a while: it is not to be cut meanwhile.
                options.relay.slowConsumerCheckMs = 120_000
                // The kernel takes little of what the client does not read.
                options.relay.socketSendBufferBytes = 16 << 10
            })
        ) { daemon in
            let (writer, _) = try await daemon.client()
            let todos = 60
            try await saveLongTodos(todos, subtitleBytes: 3_000, from: writer)
            let reader = try await TestConnection.connect(port: daemon.tcpPort, receiveBuffer: 4096)
            _ = try await reader.json()
            try await reader.channel.setOption(.autoRead, value: false).get()
            let count = 64
            // Each answer: 60 todos of about 3,100 bytes.
            let answerBytes = todos * 3_200
            reader.post((0..<count).map { #"{"type":"RequestTodoViewModels","id":\#($0)}"# + "\n" }.joined())
            func metric(_ line: String) async throws -> Int? {
                let body = try await httpGet(port: daemon.httpPort, path: "/metrics").body
                guard let found = body.split(separator: "\n").first(where: { $0.hasPrefix(line + " ") }) else {
                    return nil
                }
                return Int(found.dropFirst(line.count + 1))
            }
            try await eventually("the first answer backs up") {
                (try await metric("todostream_queued_bytes") ?? 0) > 32 << 10
            }
            // The daemon read them all at once; without the bound it would have taken all 64.
            let taken = try #require(try await metric(#"todostream_requests_total{type="RequestTodoViewModels"}"#))
            #expect(taken <= 3, "lists taken while the client reads nothing: \(taken)")
            // What the daemon holds for it: the unsent part of about one answer, beside half the
            // bound (without the bound: every answer the kernel did not take, megabytes).
            let held = try #require(try await metric("todostream_queued_bytes_max"))
            #expect(held <= (32 << 10) + 2 * answerBytes, "bytes held: \(held)")
            reader.startReading()
            try await expectListAnswers(count, of: todos, on: reader)
        }
    }

    /// A client cut as a slow consumer while its own requests still wait unread in the
    /// daemon's socket (it pipelined far more than the daemon reads ahead, and goes on
    /// sending) gets the notice and an orderly end once it reads: the daemon shuts its output
    /// and reads on, where a close would have reset the connection and lost what the client had
    /// not received yet, the notice among it.
    @Test func aCutClientWithUnreadRequestsStillGetsTheNotice() async throws {
        try await withDaemon(.slowReaderCut({ $0.relay.slowConsumerGraceMs = 30_000 })) { daemon in
            let (writer, _) = try await daemon.client()
            let created = try await writer.createTodo(String(repeating: "Unread ", count: 140))
            let id = try #require(todoID(created))
            let slow = try await TestConnection.connect(port: daemon.tcpPort, receiveBuffer: 4096, autoRead: false)
            // Requests it does not read the answers of, far more than the daemon reads ahead.
            slow.post(String(repeating: #"{"op":"ping"}"# + "\n", count: 20_000))
            // Broadcasts it does not read either, far over its bound.
            try await toggle(id, times: 400, from: writer)
            try await eventually("the client is cut") {
                let body = try await httpGet(port: daemon.httpPort, path: "/metrics").body
                return body.contains("\ntodostream_slow_consumer_disconnects_total 1")
            }
            // The notice is an error answered like any other: counted by its code.
            let metrics = try await httpGet(port: daemon.httpPort, path: "/metrics").body
            #expect(metrics.contains("\ntodostream_errors_total{code=\"slow_consumer\"} 1\n"), "\(metrics)")
            // It reads again, slowly, and goes on sending requests meanwhile: there is unread
            // input at the daemon's end when its last frames are written.
            try await slow.readSlowly()
            let reading = slow.trickle()
            let sending = Task {
                while !Task.isCancelled {
                    slow.post(String(repeating: #"{"op":"ping"}"# + "\n", count: 500))
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            defer {
                reading.cancel()
                sending.cancel()
            }
            let rest = try await slow.waitForClose(timeout: .seconds(60))
            let lines = rest.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            #expect(lines.last?.isEmpty == true, "the stream ends with a whole line")
            let last = try #require(lines.dropLast().last.flatMap { try? JSONSerialization.jsonObject(with: Data($0)) })
            let notice = try #require(last as? [String: Any])
            #expect((notice["error"] as? [String: Any])?["code"] as? String == "slow_consumer")
        }
    }

    /// A client that pipelines toggles of a large todo and reads every answer is not a slow
    /// consumer, however little the kernel takes at a time: a toggle's answer is its copy of
    /// the broadcast, asked for like a reply. (Counted as a broadcast, the answers of 40
    /// toggles of a 9 KB todo went over a 64 KiB bound behind a 4 KiB send buffer, and the
    /// client was cut every time.)
    @Test func aClientReadingItsPipelinedTogglesIsNotCut() async throws {
        try await withDaemon(.slowReaderCut({ $0.relay.socketSendBufferBytes = 4096 })) { daemon in
            let (writer, _) = try await daemon.client()
            let id = try await largeTodo(from: writer)
            try await writer.send(toggleBurst(id, count: 40))
            for index in 0..<40 {
                let (answer, _) = try await writer.json(until: { $0["re"] as? Int == index || $0["op"] != nil })
                #expect(errorCode(answer) == nil, "\(answer)")
                #expect(answer["re"] as? Int == index)
            }
            let metrics = try await httpGet(port: daemon.httpPort, path: "/metrics").body
            #expect(metrics.contains("\ntodostream_slow_consumer_disconnects_total 0\n"))
        }
    }

    /// Broadcasts that reach a loop in one pass make one run; a run larger than the outbound
    /// bound goes to a session frame by frame, so what waits for a slow reader stays within
    /// the bound and it is cut, its notice right behind what it was handed. (A run handed to
    /// the channel whole waited past the bound, out of a cut's reach: a reader taking 100 KB/s
    /// was sent every frame, for several seconds, and got no notice. Seen when a loop that
    /// was held up took the broadcasts of many batches at once.)
    @Test func aRunLargerThanTheBoundIsNotHandedOverWhole() async throws {
        try await withDaemon(.slowReaderCut) { daemon in
            let slow = try await liveReader(daemon)
            let (writer, _) = try await daemon.client()
            let id = try await largeTodo(from: writer)
            try await slow.readSlowly()
            let reading = slow.trickle(every: .milliseconds(10))
            defer { reading.cancel() }
            // 60 toggles in one write: a batch or two, each of its runs far over the 64 KiB bound.
            try await writer.send(toggleBurst(id, count: 60))
            _ = try await writer.json(until: { $0["re"] as? Int == 59 }, timeout: .seconds(30))
            let rest = try await slow.waitForClose(timeout: .seconds(60))
            let frames = try wholeFrames(rest)
            let notice = try #require(frames.last)
            #expect((notice["error"] as? [String: Any])?["code"] as? String == "slow_consumer")
            // The bound (64 KiB), the channel's high-water mark (64 KiB), the socket buffers
            // (4 KiB each, doubled by the kernel) and a frame (9 KB): far less than the 60
            // broadcasts (560 KB).
            #expect(rest.count < 200_000, "\(rest.count) bytes before the notice")
            #expect(frames.count < 25)
        }
    }

    @Test func aSlowReaderThatIsCutGetsWholeFramesThenTheNotice() async throws {
        try await withDaemon(.slowReaderCut) { daemon in
            let slow = try await liveReader(daemon)
            let (writer, _) = try await daemon.client()
            let created = try await writer.createTodo(String(repeating: "Slow ", count: 180))
            let id = try #require(todoID(created))
            try await slow.readSlowly()
            let reading = slow.trickle(every: .milliseconds(20))
            defer { reading.cancel() }
            try await toggle(id, times: 400, from: writer)
            let rest = try await slow.waitForClose(timeout: .seconds(60))
            let frames = try wholeFrames(rest)
            let notice = try #require(frames.last)
            #expect((notice["error"] as? [String: Any])?["code"] as? String == "slow_consumer")
            // From the todo's creation on.
            var previous = try #require(created["seq"] as? Int) - 1
            for frame in frames.dropLast() {
                let seq = try #require(frame["seq"] as? Int, "\(frame)")
                #expect(seq == previous + 1, "in order, no gaps before the cut")
                previous = seq
            }
            #expect(frames.count > 2, "the client read for several grace periods")
        }
    }

    /// A large list answer goes out in parts (its head, the rows every answer of the list
    /// shares, its end); a client cut while the rows are on their way still gets the answer
    /// whole, then the notice: the end waiting in the session's queue is not dropped with the
    /// frames behind it.
    @Test func aClientCutInTheMiddleOfALargeListGetsItWholeThenTheNotice() async throws {
        try await withDaemon(.slowReaderCut) { daemon in
            let (writer, _) = try await daemon.client()
            // 40 rows of about 2,500 bytes: a list over the 64 KiB from which rows are shared.
            try await saveLongTodos(40, subtitleBytes: 2_400, from: writer)
            let slow = try await liveReader(daemon)
            let created = try await writer.createTodo(String(repeating: "Cut ", count: 200))
            let id = try #require(todoID(created))
            try await slow.readSlowly()
            try await slow.sendLine(#"{"type":"RequestTodoViewModels","id":"list"}"#)
            try await eventually("the list is answered") {
                let body = try await httpGet(port: daemon.httpPort, path: "/metrics").body
                return body.contains(#"todostream_requests_total{type="RequestTodoViewModels"} 1"#)
            }
            // A reader, but a slow one (about 50 KB/s): the flood cuts it with the list on its way.
            let reading = slow.trickle(every: .milliseconds(20))
            defer { reading.cancel() }
            try await toggle(id, times: 400, from: writer)
            let rest = try await slow.waitForClose(timeout: .seconds(60))
            let frames = try wholeFrames(rest)
            let list = try #require(frames.first { $0["re"] as? String == "list" })
            #expect((list["payload"] as? [Any])?.count == 41)
            let notice = try #require(frames.last)
            #expect((notice["error"] as? [String: Any])?["code"] as? String == "slow_consumer")
        }
    }

    /// A client that stops reading for a while, within the bound, is not cut: what waits for
    /// it (in the kernel, in the channel, and past the channel's high-water mark in the
    /// session's own queue, which only a writability change hands on) reaches it in order once
    /// it reads again.
    /// Past `max_connections` a TCP connection is closed at once, with nothing sent; one that
    /// closes makes room for the next, and those admitted are served throughout.
    @Test func connectionsOverTheLimitAreClosedAndTheOthersServed() async throws {
        try await withDaemon(.custom({ $0.relay.maxConnections = 3 })) { daemon in
            var admitted: [TestConnection] = []
            for _ in 0..<3 { admitted.append(try await daemon.client().0) }
            let refused = try await TestConnection.connect(port: daemon.tcpPort)
            #expect(try await refused.waitForClose().isEmpty)
            // Counted by the limit it was over (the log says it at most every 10 s).
            let metrics = try await httpGet(port: daemon.httpPort, path: "/metrics").body
            #expect(
                metrics.contains("\ntodostream_connections_refused_total{limit=\"max_connections\"} 1\n"),
                "\(metrics)"
            )
            #expect(metrics.contains("\ntodostream_connections_refused_total{limit=\"max_connections_per_ip\"} 0\n"))
            for (index, client) in admitted.enumerated() {
                try await client.sendLine(#"{"op":"ping","id":"\#(index)"}"#)
                #expect(try await client.json()["re"] as? String == "\(index)")
            }
            await admitted[0].close()
            // The slot is released when the daemon sees the close: retry until it has.
            var hello: [String: Any]?
            for _ in 0..<200 where hello == nil {
                let next = try await TestConnection.connect(port: daemon.tcpPort)
                if let line = try? await next.line(timeout: .seconds(2)) {
                    hello = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                } else {
                    await next.close()
                }
            }
            #expect(hello?["op"] as? String == "hello")
        }
    }

    /// A client that half-closes after a last line with no newline gets that line's answer:
    /// from the end of its input on, the session writes through the channel, not the socket.
    @Test func aLastLineWithoutNewlineBeforeAHalfCloseIsAnswered() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            try await client.sendLine(#"{"op":"ping","id":"first"}"#)
            #expect(try await client.json()["re"] as? String == "first")
            try await client.send(#"{"op":"ping","id":"last"}"#)
            try await client.channel.close(mode: .output)
            let rest = String(decoding: try await client.waitForClose(), as: UTF8.self)
            #expect(rest == #"{"op":"pong","re":"last"}"# + "\n")
        }
    }

    /// Connections reset with a last frame unread leave, one after another, while others
    /// connect (whose sockets may take the numbers just freed): nobody gets another's answer.
    @Test func answersToAConnectionThatWasResetReachNobodyElse() async throws {
        try await withDaemon { daemon in
            var bystanders: [TestConnection] = []
            for round in 0..<40 {
                let (leaver, _) = try await daemon.client()
                try await leaver.sendLine(#"{"op":"ping","id":"leaver-\#(round)-a"}"#)
                try await leaver.send(#"{"op":"ping","id":"leaver-\#(round)-b"}"#)
                // SO_LINGER 0: the close is a reset, so the daemon tears the channel down with
                // the unterminated frame still in its decoder.
                let provider = try #require(leaver.channel as? any SocketOptionProvider)
                try await provider.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
                await leaver.close()
                let (bystander, hello) = try await daemon.client()
                #expect(hello["op"] as? String == "hello")
                try await bystander.sendLine(#"{"op":"ping","id":"bystander-\#(round)"}"#)
                bystanders.append(bystander)
            }
            for (round, bystander) in bystanders.enumerated() {
                try await bystander.sendLine(#"{"op":"ping","id":"end"}"#)
                let (_, before) = try await bystander.json(until: { ($0["re"] as? String) == "end" })
                #expect(before.map { $0["re"] as? String } == ["bystander-\(round)"])
                await bystander.close()
            }
            // The daemon still answers.
            let (last, _) = try await daemon.client()
            try await last.sendLine(#"{"op":"ping","id":"after"}"#)
            #expect(try await last.json()["re"] as? String == "after")
        }
    }

    @Test func aClientThatPausesWithinTheBoundGetsEveryFrameInOrder() async throws {
        try await withDaemon(.roomForAFlood) { daemon in
            let paused = try await TestConnection.connect(port: daemon.tcpPort, receiveBuffer: 4096, autoRead: false)
            let (reader, _) = try await daemon.client()
            let (writer, _) = try await daemon.client()
            let created = try await writer.createTodo("Paused")
            let id = try #require(todoID(created))
            _ = try await reader.json()
            // About 1,500 × 330 bytes: several times what the kernel's buffers (4 KiB each
            // way) and the channel (its high-water mark, 64 KiB) hold together.
            let count = 1500
            try await toggle(id, times: count, from: writer)
            for _ in 0..<count { _ = try await reader.json(timeout: .seconds(30)) }
            paused.startReading()
            #expect(try await paused.json()["op"] as? String == "hello")
            var last = 0
            var bytes = 0
            for _ in 0..<(count + 1) {
                let line = try await paused.line(timeout: .seconds(30))
                bytes += line.utf8.count + 1
                let frame = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                let seq = try #require(frame["seq"] as? Int, "not a broadcast: \(line.prefix(200))")
                #expect(last == 0 || seq == last + 1, "broadcasts in order, no gaps")
                last = seq
            }
            #expect(last == count + 1)
            #expect(bytes > 4 * 64 * 1024, "the burst was too small to fill the channel: \(bytes) bytes")
            // Still connected and answered: not cut.
            try await paused.send(["op": "ping", "id": "p"])
            #expect(try await paused.json()["op"] as? String == "pong")
            // Caught up, its session writes to the socket itself again (plain TCP): what
            // follows the backlog continues it, in order and without gaps.
            let more = 300
            try await toggle(id, times: more, from: writer)
            for _ in 0..<more {
                let frame = try await paused.json(timeout: .seconds(30))
                let seq = try #require(frame["seq"] as? Int, "not a broadcast: \(frame)")
                #expect(seq == last + 1, "broadcasts in order, no gaps")
                last = seq
            }
            #expect(last == count + 1 + more)
        }
    }

    /// A graceful shutdown that begins while a client's start hold is on sends it `draining`
    /// without the broadcasts held for it: its `resume`, which may be on its way, comes first.
    /// (They went out ahead of `draining`; a client that then reconnected from the last seq it
    /// saw had skipped the range its resume asked for.)
    @Test func drainingDuringTheStartHoldLeavesTheHeldBroadcastsToTheResume() async throws {
        try await withDaemon(.custom({ $0.relay.initialHoldMs = 30_000 })) { daemon in
            let (writer, _) = try await daemon.client()
            let created = try await writer.createTodo("Held")
            let id = try #require(todoID(created))
            let late = try await TestConnection.connect(port: daemon.tcpPort)
            let hello = try await late.json()
            let seen = try #require(hello["seq"] as? Int)
            try await toggle(id, times: 3, from: writer)
            _ = try await writer.json(until: { ($0["re"] as? Int) == 2 && $0["seq"] != nil }, timeout: .seconds(30))
            await daemon.shutdown()
            let rest = String(decoding: try await late.waitForClose(), as: UTF8.self)
            let frames = rest.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            #expect(frames.first?["op"] as? String == "draining", "\(rest)")
            let broadcasts = frames.compactMap { $0["seq"] as? Int }.filter { $0 > seen }
            #expect(broadcasts.isEmpty, "held broadcasts went out with no resume asked for: \(broadcasts)")
        }
    }

    /// A client with a 4 KiB receive buffer, past the greeting and its hold on live output
    /// (its first frame, a ping, ends it).
    private func liveReader(_ daemon: Daemon) async throws -> TestConnection {
        let reader = try await TestConnection.connect(port: daemon.tcpPort, receiveBuffer: 4096)
        _ = try await reader.json()
        try await reader.sendLine(#"{"op":"ping","id":"p"}"#)
        #expect(try await reader.json()["op"] as? String == "pong")
        return reader
    }

    /// The frames of a stream that ended: each line a whole JSON object, the last one ended.
    private func wholeFrames(_ stream: [UInt8]) throws -> [[String: Any]] {
        let lines = stream.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        #expect(lines.last?.isEmpty == true, "the stream ends with a whole line")
        return try lines.dropLast().map { line in
            try #require(
                try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any],
                "a whole frame, not \(String(decoding: line.prefix(80), as: UTF8.self))"
            )
        }
    }

    /// A todo whose broadcasts are about 9 KB each (a 9,000-character subtitle); its id.
    private func largeTodo(from writer: TestConnection) async throws -> String {
        let created = try await writer.createTodo("Large")
        let id = try #require(todoID(created))
        try await writer.send([
            "type": "RequestUpdateDetailViewModel", "id": "big",
            "payload": ["todo": ["id": id], "title": "Large", "subtitle": String(repeating: "s", count: 9_000)],
        ])
        _ = try await writer.json(until: { $0["re"] as? String == "big" && $0["seq"] != nil })
        return id
    }

    /// `count` toggles of `id` as one write, with ids 0 to count - 1.
    private func toggleBurst(_ id: String, count: Int) -> String {
        (0..<count).map { index in
            #"{"type":"RequestToggleCompleteTodoViewModel","id":\#(index),"payload":{"todo":{"id":"\#(id)"}}}"# + "\n"
        }.joined()
    }

    @Test func anUnreadableStartIsAClearError() async throws {
        try await withDaemon { daemon in
            var options = DaemonOptions()
            options.storage = .memory
            options.listeners = ListenerConfiguration(tcp: .init(host: "127.0.0.1", port: daemon.tcpPort))
            await #expect {
                _ = try await Daemon.start(options, logger: .init(label: "t"))
            } throws: { error in
                "\(error)" == "cannot listen on 127.0.0.1:\(daemon.tcpPort) (TCP): address already in use"
            }
        }
    }

    /// A second daemon on a SQLite data directory in use does not start (it would write the
    /// same seqs as the first); the first serves on.
    @Test func aSecondDaemonOnTheSameDataDirectoryDoesNotStart() async throws {
        let directory = temporaryDirectory()
        try await withDaemon(storage: .sqlite, dataDirectory: directory) { daemon in
            var options = DaemonOptions()
            options.storage = .sqlite
            options.dataDirectory = directory
            options.listeners = ListenerConfiguration(tcp: .init(host: "127.0.0.1", port: 0))
            await #expect {
                _ = try await Daemon.start(options, logger: .init(label: "t"))
            } throws: { error in
                "\(error)".hasPrefix("data directory \(directory) is in use by another todostreamd (pid ")
            }
            let (client, _) = try await daemon.client()
            #expect(try await client.createTodo("still served")["seq"] as? Int == 1)
        }
    }
}

struct HTTPResult {
    let status: Int
    let body: String
}

/// A plain HTTP/1.1 GET over a raw connection.
/// Waits until `condition` holds, looking every 20 ms, for at most `timeout`.
/// Saves `count` new todos with subtitles of `subtitleBytes`, one after the other, each waiting
/// for its reply.
/// Toggles todo `id` `count` times from `writer`, reading its own answers every 25 (so that its
/// own backlog stays far under the bound).
func toggle(_ id: String, times count: Int, from writer: TestConnection) async throws {
    for index in 0..<count {
        try await writer.send([
            "type": "RequestToggleCompleteTodoViewModel", "id": index, "payload": ["todo": ["id": id]],
        ])
        if index % 25 == 24 {
            _ = try await writer.json(until: { ($0["re"] as? Int) == index }, timeout: .seconds(30))
        }
    }
}

func saveLongTodos(_ count: Int, subtitleBytes: Int, from writer: TestConnection) async throws {
    for index in 0..<count {
        try await writer.send([
            "type": "RequestUpdateDetailViewModel", "id": "c\(index)",
            "payload": [
                "todo": ["id": UUID().uuidString, "version": 0], "title": "Todo \(index)",
                "subtitle": String(repeating: "s", count: subtitleBytes),
            ],
        ])
        _ = try await writer.json(until: { $0["re"] as? String == "c\(index)" && $0["seq"] == nil })
    }
}

func eventually(
    _ what: String,
    timeout: Duration = .seconds(30),
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        guard ContinuousClock.now < deadline else { throw TestConnection.Timeout(what: what) }
        try await Task.sleep(for: .milliseconds(20))
    }
}

func httpGet(port: Int, path: String, headers: [String] = []) async throws -> HTTPResult {
    let extra = headers.map { $0 + "\r\n" }.joined()
    let response = try await httpExchange(
        port: port,
        "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\(extra)\r\n"
    )
    let status = Int(response.split(separator: " ").dropFirst().first ?? "") ?? 0
    let body = response.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n")
    return HTTPResult(status: status, body: body)
}

/// Sends `request` (raw bytes of HTTP, as a client would) on a connection of its own, and
/// returns everything the daemon sent until it closed the connection.
func httpExchange(port: Int, _ request: String) async throws -> String {
    let connection = try await TestConnection.connect(port: port)
    try await connection.send(request)
    return String(decoding: try await connection.waitForClose(), as: UTF8.self)
}
