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
}
