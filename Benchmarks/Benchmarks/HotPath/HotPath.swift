import Benchmark
import EventStream
import Foundation
import NIOCore
import Relay
import TodoApp
import TodoStore

// The hot path of todostreamd, piece by piece, with malloc counts so that a change that adds
// allocations per frame or per subscriber shows up. Run with scripts/microbench.

private let codec = TodoWireCodec()
private let todoID = UUID(uuidString: "6F1C2C54-8E4B-4C55-9A53-0D3C1C8B9E21") ?? UUID()
private let toggleFrame = Array(
    #"{"type":"RequestToggleCompleteTodoViewModel","id":"42","payload":{"todo":{"id":"6f1c2c54-8e4b-4c55-9a53-0d3c1c8b9e21"}}}"#
        .utf8
)
/// The same frame with an escape in its id: the fast reader leaves it to JSONDecoder (two passes,
/// control fields and payload), as every frame was read before.
private let escapedToggleFrame = Array(
    #"{"type":"RequestToggleCompleteTodoViewModel","id":"4\u0032","payload":{"todo":{"id":"6f1c2c54-8e4b-4c55-9a53-0d3c1c8b9e21"}}}"#
        .utf8
)
private let sampleTodo = Todo(
    id: todoID,
    createdAt: Timestamp(millisecondsSince1970: 1_763_700_000_000),
    title: "Benchmark todo of the load tool",
    subtitle: "",
    priority: .high,
    completedAt: Timestamp(millisecondsSince1970: 1_763_700_000_500),
    deleted: false,
    version: 7
)
private let broadcastEvent = Event.responseTodoViewModel(.success(TodoViewModel(todo: sampleTodo)))

private let defaultMetrics: [BenchmarkMetric] = [.wallClock, .cpuTotal, .mallocCountTotal, .throughput]

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: defaultMetrics,
        scalingFactor: .kilo,
        maxDuration: .seconds(2),
        maxIterations: 100_000
    )

    // MARK: Frame decode: a client's toggle request, as a session reads it.

    Benchmark("Frame decode (control fields + payload)") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(RelayProbe.decodeRequest(toggleFrame, codec: codec))
        }
    }

    Benchmark("Frame decode, JSONDecoder fallback (escaped id)") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(RelayProbe.decodeRequest(escapedToggleFrame, codec: codec))
        }
    }

    // MARK: Frame encode: one ResponseTodoViewModel broadcast, body and frame.

    Benchmark("Frame encode (ResponseTodoViewModel)") { benchmark in
        for seq in benchmark.scaledIterations {
            let body = codec.encodeBody(broadcastEvent)
            blackHole(
                RelayProbe.eventFrame(seq: UInt64(seq), type: "ResponseTodoViewModel", correlation: nil, body: body)
            )
        }
    }

    // MARK: Fan-out: one broadcast to N subscribers (encode once, enqueue, flush).

    for subscribers in [1, 100, 1_000] {
        Benchmark(
            "Fan-out encode-once (\(subscribers) subscribers)",
            configuration: .init(
                metrics: defaultMetrics,
                scalingFactor: .one,
                maxDuration: .seconds(2),
                maxIterations: subscribers >= 1_000 ? 2_000 : 20_000
            )
        ) { benchmark, probe in
            for _ in benchmark.scaledIterations {
                probe.broadcast(broadcastEvent)
            }
        } setup: {
            try FanOutProbe(codec: codec, subscribers: subscribers)
        }
    }

    // MARK: Bus dispatch: a toggle through both servers and the store (in memory) to the sink.

    Benchmark(
        "Bus dispatch (toggle, in-memory store)",
        configuration: .init(metrics: defaultMetrics, scalingFactor: .one, maxDuration: .seconds(2))
    ) { benchmark, fixture in
        for _ in benchmark.scaledIterations {
            let request: Sequencer<Event>.Request = (
                .requestToggleCompleteTodoViewModel(TodoReference(id: todoID)), fixture.origin
            )
            fixture.sink.deliver(await fixture.bus.run([request]), answering: [fixture.origin])
        }
    } setup: {
        await BusFixture()
    }

    // MARK: Store commit: one write, committed alone (in memory, and SQLite without fsync).

    Benchmark(
        "Store commit (in-memory, 1 write)",
        configuration: .init(metrics: defaultMetrics, scalingFactor: .one, maxDuration: .seconds(2))
    ) { (benchmark: Benchmark, store: GroupCommitStore) in
        for _ in benchmark.scaledIterations {
            blackHole(await store.write(TodoWrite(id: todoID, expectedVersion: nil, change: .toggleComplete)))
        }
    } setup: {
        let store = await GroupCommitStore.inMemory().0
        _ = await store.write(TodoWrite(id: todoID, expectedVersion: nil, change: .update(TodoEdit(title: "x"))))
        return store
    }

    for concurrent in [1, 64] {
        Benchmark(
            "Store commit (SQLite, synchronous=NORMAL, \(concurrent) concurrent writes)",
            configuration: .init(
                metrics: defaultMetrics,
                scalingFactor: .one,
                maxDuration: .seconds(3),
                maxIterations: 2_000
            )
        ) { benchmark, fixture in
            for _ in benchmark.scaledIterations {
                await withTaskGroup(of: Void.self) { group in
                    for id in fixture.ids {
                        group.addTask {
                            let write = TodoWrite(id: id, expectedVersion: nil, change: .toggleComplete)
                            blackHole(await fixture.store.write(write))
                        }
                    }
                }
            }
        } setup: {
            try await SQLiteFixture(writers: concurrent)
        }
    }
}

/// The bus as the daemon wires it, with a sink that only counts.
private struct BusFixture: Sendable {
    let bus: EventBus<Event>
    let sink = CountingSink()
    let origin = Origin(session: SessionID(1), correlation: .integer(1))

    init() async {
        let store = await GroupCommitStore.inMemory().0
        _ = await store.write(TodoWrite(id: todoID, expectedVersion: nil, change: .update(TodoEdit(title: "x"))))
        bus = EventBus(servers: [ViewModelServer()], model: ModelServer(store: store))
    }
}

private struct CountingSink: EventSink {
    func deliver(_ deliveries: [Delivery<Event>], answering requests: [Origin]) {
        for delivery in deliveries {
            if case .broadcast = delivery.scope { blackHole(codec.encodeBody(delivery.event)) }
        }
    }
}

/// A SQLite store in a fresh temporary directory with `writers` todos to toggle.
private struct SQLiteFixture: Sendable {
    let store: GroupCommitStore
    let ids: [UUID]

    init(writers: Int) async throws {
        let directory = NSTemporaryDirectory() + "todostream-microbench-\(UUID().uuidString)"
        store = try await GroupCommitStore.sqlite(directory: directory, synchronousFull: false)
        var ids: [UUID] = []
        for _ in 0..<writers {
            let id = UUID()
            _ = await store.write(TodoWrite(id: id, expectedVersion: nil, change: .update(TodoEdit(title: "x"))))
            ids.append(id)
        }
        self.ids = ids
    }
}
