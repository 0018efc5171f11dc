import Foundation
import NIOCore
import Testing

@testable import todostreamd

/// Protocol 1.1: a write request with a client mutation id (`mid`) is applied at most once.
@Suite(.timeLimit(.minutes(2))) struct MutationIDTests {
    private func toggle(_ id: String, re: String, mid: String?) -> [String: Any] {
        var frame: [String: Any] = [
            "type": "RequestToggleCompleteTodoViewModel", "id": re, "payload": ["todo": ["id": id]],
        ]
        if let mid { frame["mid"] = mid }
        return frame
    }

    private func payload(_ frame: [String: Any]) -> NSDictionary? {
        (frame["payload"] as? [String: Any]).map { NSDictionary(dictionary: $0) }
    }

    @Test func helloAnnouncesTheFeature() async throws {
        try await withDaemon { daemon in
            let (connection, hello) = try await daemon.client()
            #expect(hello["protocol"] as? Int == 1)
            #expect(hello["features"] as? [String] == ["mid"])
            await connection.close()
        }
    }

    /// Two ids that Swift's `String` holds equal (canonically equivalent) but whose bytes
    /// differ are two writes: `é` as one scalar, then `e` with a combining accent.
    @Test(arguments: ["memory", "sqlite"])
    func midsAreMatchedByTheirBytes(storage: String) async throws {
        try await withDaemon(storage: storage == "sqlite" ? .sqlite : .memory) { daemon in
            let (writer, _) = try await daemon.client()
            let id = try #require(todoID(try await writer.createTodo("Accents")))
            let composed = "m-\u{E9}"
            let decomposed = "m-e\u{301}"
            try await writer.send(toggle(id, re: "a", mid: composed))
            let (first, _) = try await writer.json { $0["re"] as? String == "a" }
            #expect(first["seq"] as? Int == 2)
            try await writer.send(toggle(id, re: "b", mid: decomposed))
            let (second, _) = try await writer.json { $0["re"] as? String == "b" }
            #expect(second["duplicate"] == nil, "a different id, not a retry")
            #expect(second["seq"] as? Int == 3)
            #expect((second["mid"] as? String).map { Array($0.utf8) } == Array(decomposed.utf8))
            // Each is still known by its own bytes.
            try await writer.send(toggle(id, re: "c", mid: decomposed))
            let (retry, _) = try await writer.json { $0["re"] as? String == "c" }
            #expect(retry["duplicate"] as? Bool == true)
            #expect(retry["applied_seq"] as? Int == 3)
            await writer.close()
        }
    }

    @Test(arguments: ["memory", "sqlite"])
    func aToggleSentTwiceWithOneMidIsAppliedOnce(storage: String) async throws {
        try await withDaemon(storage: storage == "sqlite" ? .sqlite : .memory) { daemon in
            let (writer, _) = try await daemon.client()
            let (watcher, _) = try await daemon.client()
            let id = try #require(todoID(try await writer.createTodo("Once")))
            #expect(try await watcher.json()["seq"] as? Int == 1)

            try await writer.send(toggle(id, re: "t1", mid: "k3f9:17"))
            let (first, _) = try await writer.json { $0["re"] as? String == "t1" }
            #expect(first["seq"] as? Int == 2)
            #expect(first["mid"] as? String == "k3f9:17")
            #expect(first["duplicate"] == nil)
            let seen = try await watcher.json()
            #expect(seen["seq"] as? Int == 2)
            #expect(seen["mid"] as? String == "k3f9:17")
            #expect(seen["re"] == nil)

            // The retry: a reply with the original payload, nothing applied, nothing broadcast.
            try await writer.send(toggle(id, re: "t2", mid: "k3f9:17"))
            let again = try await writer.json()
            #expect(again["re"] as? String == "t2")
            #expect(again["type"] as? String == "ResponseTodoViewModel")
            #expect(again["seq"] == nil)
            #expect(again["mid"] as? String == "k3f9:17")
            #expect(again["duplicate"] as? Bool == true)
            #expect(again["applied_seq"] as? Int == 2)
            #expect(payload(again) == payload(first))

            // The next write takes the next seq, and the watcher's next frame is it: the
            // duplicate was not broadcast.
            try await writer.send(toggle(id, re: "t3", mid: "k3f9:18"))
            let (next, _) = try await writer.json { $0["re"] as? String == "t3" }
            #expect(next["seq"] as? Int == 3)
            #expect((next["payload"] as? [String: Any])?["complete"] as? Bool == false)
            let nextSeen = try await watcher.json()
            #expect(nextSeen["seq"] as? Int == 3)
            #expect(nextSeen["mid"] as? String == "k3f9:18")
        }
    }

    @Test func theSameMidTwiceInOnePipelinedBurstIsAppliedOnce() async throws {
        try await withDaemon(storage: .sqlite) { daemon in
            let (client, _) = try await daemon.client()
            let id = try #require(todoID(try await client.createTodo("Burst")))
            let lines = [
                #"{"type":"RequestToggleCompleteTodoViewModel","id":1,"mid":"b:1","payload":{"todo":{"id":"\#(id)"}}}"#,
                #"{"type":"RequestToggleCompleteTodoViewModel","id":2,"mid":"b:1","payload":{"todo":{"id":"\#(id)"}}}"#,
                #"{"type":"RequestDeleteTodoViewModel","id":3,"mid":"b:1","payload":{"todo":{"id":"\#(id)"}}}"#,
                #"{"type":"RequestToggleCompleteTodoViewModel","id":4,"mid":"b:2","payload":{"todo":{"id":"\#(id)"}}}"#,
            ]
            try await client.send(lines.joined(separator: "\n") + "\n")
            var frames: [Int: [String: Any]] = [:]
            while frames.count < 4 {
                let frame = try await client.json()
                if let re = frame["re"] as? Int { frames[re] = frame }
            }
            #expect(frames[1]?["seq"] as? Int == 2)
            #expect(frames[1]?["mid"] as? String == "b:1")
            for re in [2, 3] {
                #expect(frames[re]?["seq"] == nil)
                #expect(frames[re]?["duplicate"] as? Bool == true)
                #expect(frames[re]?["applied_seq"] as? Int == 2)
                #expect(payload(frames[re] ?? [:]) == payload(frames[1] ?? [:]))
            }
            // The delete with a used mid did nothing; the fourth toggles back.
            #expect((frames[3]?["payload"] as? [String: Any])?["deleted"] as? Bool == false)
            #expect(frames[4]?["seq"] as? Int == 3)
            #expect((frames[4]?["payload"] as? [String: Any])?["complete"] as? Bool == false)
        }
    }

    @Test func aDuplicateSaveIsAnsweredWithTheDetailAsFirstSaved() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            let id = try #require(todoID(try await client.createTodo("Draft")))
            let save =
                #"{"type":"RequestUpdateDetailViewModel","id":"s","mid":"save:1","payload":{"todo":{"id":"\#(id)"},"title":"Final"}}"#
            try await client.sendLine(save)
            let (reply, _) = try await client.json {
                $0["re"] as? String == "s" && $0["type"] as? String == "ResponseUpdateDetailViewModel"
            }
            let (broadcast, _) = try await client.json { $0["re"] as? String == "s" && $0["seq"] != nil }
            #expect(reply["mid"] == nil)
            #expect(broadcast["mid"] as? String == "save:1")
            let retry = save.replacingOccurrences(of: #""id":"s""#, with: #""id":"s2""#)
                .replacingOccurrences(of: "Final", with: "Changed meanwhile")
            try await client.sendLine(retry)
            let again = try await client.json()
            #expect(again["re"] as? String == "s2")
            #expect(again["type"] as? String == "ResponseUpdateDetailViewModel")
            #expect(again["duplicate"] as? Bool == true)
            #expect(again["applied_seq"] as? Int == broadcast["seq"] as? Int)
            #expect(payload(again) == payload(reply))
            #expect((again["payload"] as? [String: Any])?["title"] as? String == "Final")
            // Then the list row the save broadcast, as a reply too (no seq).
            let row = try await client.json()
            #expect(row["re"] as? String == "s2")
            #expect(row["type"] as? String == "ResponseTodoViewModel")
            #expect(row["duplicate"] as? Bool == true)
            #expect(row["mid"] as? String == "save:1")
            #expect(row["applied_seq"] as? Int == broadcast["seq"] as? Int)
            #expect(row["seq"] == nil)
            #expect(payload(row) == payload(broadcast))
            // Nothing followed: a ping is the next answer.
            try await client.send(["op": "ping", "id": "p"])
            #expect(try await client.json()["op"] as? String == "pong")
        }
    }

    @Test func aFailedWriteIsNotRememberedAndItsRetryIsEvaluatedAfresh() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            let id = try #require(todoID(try await client.createTodo("Versioned")))
            let stale: [String: Any] = [
                "type": "RequestToggleCompleteTodoViewModel", "id": "c", "mid": "f:1",
                "payload": ["todo": ["id": id, "version": 9]],
            ]
            try await client.send(stale)
            let conflict = try await client.json()
            #expect(errorCode(conflict) == "conflict")
            #expect(conflict["duplicate"] == nil)
            try await client.send(toggle(id, re: "ok", mid: "f:1"))
            let applied = try await client.json()
            #expect(applied["seq"] as? Int == 2)
            #expect(applied["duplicate"] == nil)
        }
    }

    @Test func aMidSurvivesARestart() async throws {
        let directory = temporaryDirectory()
        var id = ""
        var original: NSDictionary?
        try await withDaemon(storage: .sqlite, dataDirectory: directory) { daemon in
            let (client, _) = try await daemon.client()
            id = try #require(todoID(try await client.createTodo("Durable")))
            try await client.send(toggle(id, re: "t", mid: "r:1"))
            let first = try await client.json()
            #expect(first["seq"] as? Int == 2)
            original = payload(first)
        }
        try await withDaemon(storage: .sqlite, dataDirectory: directory) { daemon in
            let (client, _) = try await daemon.client()
            try await client.send(toggle(id, re: "t", mid: "r:1"))
            let again = try await client.json()
            #expect(again["duplicate"] as? Bool == true)
            #expect(again["applied_seq"] as? Int == 2)
            #expect(again["seq"] == nil)
            #expect(payload(again) == original)
            try await client.send(toggle(id, re: "u", mid: "r:2"))
            #expect(try await client.json()["seq"] as? Int == 3)
        }
    }

    @Test(arguments: ["memory", "sqlite"])
    func resumeReplaysCarryTheMid(storage: String) async throws {
        try await withDaemon(storage: storage == "sqlite" ? .sqlite : .memory) { daemon in
            let (writer, hello) = try await daemon.client()
            let id = try #require(todoID(try await writer.createTodo("Replayed")))
            try await writer.send(toggle(id, re: "t", mid: "p:1"))
            #expect(try await writer.json()["seq"] as? Int == 2)
            try await writer.send(toggle(id, re: "u", mid: nil))
            #expect(try await writer.json()["seq"] as? Int == 3)

            let (reader, _) = try await daemon.client()
            try await reader.send(["op": "resume", "epoch": hello["epoch"] as? String ?? "", "after": 0, "id": "r"])
            let created = try await reader.json()
            let toggled = try await reader.json()
            let plain = try await reader.json()
            #expect(created["seq"] as? Int == 1)
            #expect(created["mid"] == nil)
            #expect(toggled["seq"] as? Int == 2)
            #expect(toggled["mid"] as? String == "p:1")
            #expect(plain["seq"] as? Int == 3)
            #expect(plain["mid"] == nil)
            #expect(try await reader.json()["op"] as? String == "resumed")
        }
    }

    /// A monitor sees a duplicate's model-layer answer marked as one: the `ResponseTodo` of a
    /// write that wrote nothing says `"duplicate":true` and the seq it was applied with, while
    /// the first write's says neither.
    @Test func aTapTellsADuplicatesModelAnswerFromAWrite() async throws {
        try await withDaemon(
            .custom({ $0.tokens = [TokenEntry(sha256: TokenEntry.digest("tap-secret"), role: .monitor)] })
        ) { daemon in
            let (tap, _) = try await daemon.client()
            try await tap.send(["op": "auth", "token": "tap-secret", "id": "a"])
            _ = try await tap.json { $0["re"] as? String == "a" }
            try await tap.send(["op": "subscribe", "types": ["ResponseTodo"], "id": "s"])
            _ = try await tap.json { $0["re"] as? String == "s" }
            let (writer, _) = try await daemon.client()
            let id = try #require(todoID(try await writer.createTodo("Tapped")))
            let (created, _) = try await tap.json { $0["type"] as? String == "ResponseTodo" }
            #expect(created["duplicate"] == nil)
            for re in ["t1", "t2"] {
                try await writer.send(toggle(id, re: re, mid: "tap:1"))
                _ = try await writer.json { $0["re"] as? String == re }
            }
            let (first, _) = try await tap.json { $0["type"] as? String == "ResponseTodo" }
            #expect(first["duplicate"] == nil)
            let (again, _) = try await tap.json { $0["type"] as? String == "ResponseTodo" }
            #expect(again["mid"] as? String == "tap:1")
            #expect(again["duplicate"] as? Bool == true)
            #expect(again["applied_seq"] as? Int == 2)
        }
    }

    @Test func badMidsAreInvalidFrames() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            let id = try #require(todoID(try await client.createTodo("Untouched")))
            let bad: [Any] = ["", String(repeating: "x", count: 65), 17, ["a": 1], NSNull(), ["m"]]
            for (index, mid) in bad.enumerated() {
                try await client.send([
                    "type": "RequestToggleCompleteTodoViewModel", "id": index, "mid": mid,
                    "payload": ["todo": ["id": id]],
                ])
                let answer = try await client.json()
                #expect(answer["op"] as? String == "error")
                #expect(answer["re"] as? Int == index)
                #expect(errorCode(answer) == "invalid_frame")
                let message = (answer["error"] as? [String: Any])?["message"] as? String
                #expect(message == "mid must be a string of 1 to 64 characters.")
            }
            // 64 characters is the longest allowed; nothing before it was applied.
            try await client.send(toggle(id, re: "ok", mid: String(repeating: "y", count: 64)))
            let applied = try await client.json()
            #expect(applied["seq"] as? Int == 2)
        }
    }

    @Test func aMidOnAReadHasNoEffect() async throws {
        try await withDaemon { daemon in
            let (client, _) = try await daemon.client()
            _ = try await client.createTodo("Listed")
            for re in ["l1", "l2"] {
                try await client.send(["type": "RequestTodoViewModels", "id": re, "mid": "read:1"])
                let list = try await client.json()
                #expect(list["re"] as? String == re)
                #expect(list["type"] as? String == "ResponseTodoViewModels")
                #expect(list["mid"] == nil)
                #expect(list["duplicate"] == nil)
                #expect((list["payload"] as? [Any])?.count == 1)
            }
            // The mid a read carried is not used up: a write may still use it.
            let (other, _) = try await daemon.client()
            let id = try #require(todoID(try await other.createTodo("Toggled")))
            try await client.send(toggle(id, re: "t", mid: "read:1"))
            let (applied, _) = try await client.json { $0["re"] as? String == "t" }
            #expect(applied["seq"] as? Int == 3)
            #expect(applied["duplicate"] == nil)
        }
    }
}
