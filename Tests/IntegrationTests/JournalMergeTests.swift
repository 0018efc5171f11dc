import EventStream
import Foundation
import Testing

@testable import todostreamd

/// Broadcasts another daemon committed (read from a shared journal) merge into this daemon's
/// one order: held until every earlier seq is out, never sent twice.
@Suite struct JournalMergeTests {
    func entry(_ seq: UInt64, _ title: String) -> JournalEntry {
        JournalEntry(seq: seq, type: "ResponseTodoViewModel", payload: Array("{\"title\":\"\(title)\"}".utf8))
    }

    @Test func journalEntriesGoOutInSeqOrderOnceEach() async throws {
        try await withDaemon { daemon in
            let client = try await TestConnection.connect(port: daemon.tcpPort)
            let hello = try await client.json()
            #expect(hello["seq"] as? Int == 0)
            try await client.send(["op": "ping", "id": "p1"])
            _ = try await client.json(until: { $0["op"] as? String == "pong" })

            let hub = daemon.relay.hub
            hub.publishJournal([entry(2, "second")])  // early: held back
            hub.publishJournal([entry(1, "first"), entry(2, "second again")])
            let first = try await client.line()
            let second = try await client.line()
            #expect(first == #"{"seq":1,"type":"ResponseTodoViewModel","payload":{"title":"first"}}"#)
            #expect(second == #"{"seq":2,"type":"ResponseTodoViewModel","payload":{"title":"second"}}"#)
            hub.publishJournal([entry(1, "late double")])
            try await client.send(["op": "ping", "id": "p2"])
            let next = try await client.json()
            #expect(next["op"] as? String == "pong", "nothing sent twice: \(next)")
            #expect(hub.seq == 2)
            await client.close()
        }
    }

    /// Another daemon's broadcast (seq 2) is followed before this daemon's own save (seq 1) is
    /// handed over: the save's reply still comes before its broadcast, and both before seq 2;
    /// a read sent after the save is answered after seq 1, before or after seq 2.
    @Test func aSavesReplyComesBeforeItsBroadcastWhenLaterSeqsArriveFirst() async throws {
        try await withDaemon { daemon in
            let client = try await TestConnection.connect(port: daemon.tcpPort)
            _ = try await client.json()
            daemon.relay.hub.publishJournal([entry(2, "from elsewhere")])  // held: seq 1 is not out
            try await client.send([
                "type": "RequestUpdateDetailViewModel", "id": "save",
                "payload": ["todo": ["id": UUID().uuidString, "version": 0], "title": "mine"],
            ])
            try await client.send(["type": "RequestTodoViewModels", "id": "list"])
            var order: [String] = []
            while order.count < 4 {
                let frame = try await client.json()
                let seq = (frame["seq"] as? Int).map { "seq \($0)" }
                order.append(
                    [frame["type"] as? String, frame["re"] as? String, seq].compactMap { $0 }.joined(separator: " ")
                )
            }
            #expect(
                Array(order.prefix(2)) == ["ResponseUpdateDetailViewModel save", "ResponseTodoViewModel save seq 1"]
            )
            #expect(Set(order.suffix(2)) == ["ResponseTodoViewModel seq 2", "ResponseTodoViewModels list"])
        }
    }
}
