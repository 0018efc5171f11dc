import NIOConcurrencyHelpers
import Testing

@testable import EventStream

struct TestEvent: StreamEvent, Hashable {
    let name: String
}

final class RecordingSink: EventSink, Sendable {
    let recorded = NIOLockedValueBox<[(String, Scope)]>([])
    func deliver(_ event: TestEvent, scope: Scope, origin: Origin) {
        recorded.withLockedValue { $0.append((event.name, scope)) }
    }
    var names: [String] { recorded.withLockedValue { $0.map(\.0) } }
}

struct MapServer: EventServer {
    let observes: Set<String>
    let output: @Sendable (TestEvent) -> [Emission<TestEvent>]
    func handle(_ event: TestEvent) async -> [Emission<TestEvent>] { output(event) }
}

@Suite struct EventBusTests {
    @Test func eventsFlowDepthFirstInCausalOrder() async {
        let sink = RecordingSink()
        let first = MapServer(observes: ["Request"]) { _ in
            [Emission(TestEvent(name: "ModelRequest"), .internal), Emission(TestEvent(name: "Reply"), .reply)]
        }
        let second = MapServer(observes: ["ModelRequest"]) { _ in
            [Emission(TestEvent(name: "Broadcast"), .broadcast(seq: 1))]
        }
        let bus = EventBus(servers: [first, second], sink: sink)
        await bus.publish(TestEvent(name: "Request"), origin: Origin(session: SessionID(1), correlation: nil))
        #expect(sink.names == ["Request", "ModelRequest", "Broadcast", "Reply"])
        #expect(sink.recorded.withLockedValue { $0[2].1 } == .broadcast(seq: 1))
    }

    @Test func eventsNoServerObservesOnlyReachTheSink() async {
        let sink = RecordingSink()
        let bus = EventBus(
            servers: [MapServer(observes: ["Other"]) { _ in [Emission(TestEvent(name: "X"), .reply)] }],
            sink: sink
        )
        await bus.publish(TestEvent(name: "Lonely"), origin: Origin(session: SessionID(1), correlation: .integer(3)))
        #expect(sink.names == ["Lonely"])
    }
}

@Suite struct JSONWriterTests {
    @Test func escapesStringsAndNestsContainers() {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("a", "q\"\\\n\t\u{01}é")
        writer.key("list")
        writer.beginArray()
        writer.integer(1)
        writer.bool(false)
        writer.null()
        writer.beginObject()
        writer.endObject()
        writer.endArray()
        writer.field("n", -5)
        writer.endObject()
        #expect(
            String(decoding: writer.bytes, as: UTF8.self)
                == #"{"a":"q\"\\\n\t\u0001é","list":[1,false,null,{}],"n":-5}"#
        )
    }
}
