import NIOConcurrencyHelpers
import Testing

@testable import EventStream

struct TestEvent: StreamEvent, Hashable {
    let name: String
}

final class RecordingSink: EventSink, Sendable {
    let recorded = NIOLockedValueBox<[(String, Scope, Origin)]>([])
    let answered = NIOLockedValueBox<[Origin]>([])
    let batches = NIOLockedValueBox<[Int]>([])
    func deliver(_ deliveries: [Delivery<TestEvent>], answering requests: [Origin]) {
        recorded.withLockedValue { $0 += deliveries.map { ($0.event.name, $0.scope, $0.origin) } }
        answered.withLockedValue { $0 += requests }
        batches.withLockedValue { $0.append(requests.count) }
    }
    var names: [String] { recorded.withLockedValue { $0.map(\.0) } }
}

struct MapServer: EventServer {
    let observes: Set<String>
    let output: @Sendable (TestEvent) -> [Emission<TestEvent>]
    func handle(_ event: TestEvent) -> [Emission<TestEvent>] { output(event) }
}

/// A model layer that answers each event with `Answer(<name>)` and records the batches.
final class RecordingModel: BatchServer, Sendable {
    let observes: Set<String> = ["ModelRequest"]
    let batches = NIOLockedValueBox<[[String]]>([])
    /// Held closed until `release`: lets a test see requests pile up behind a slow commit.
    let gate = NIOLockedValueBox<CheckedContinuation<Void, Never>?>(nil)
    let holding: Bool

    init(holding: Bool = false) { self.holding = holding }

    nonisolated(nonsending) func handle(batch: [TestEvent]) async -> [[Emission<TestEvent>]] {
        batches.withLockedValue { $0.append(batch.map(\.name)) }
        if holding {
            await withCheckedContinuation { continuation in gate.withLockedValue { $0 = continuation } }
        }
        return batch.map { _ in [Emission(TestEvent(name: "Answer"), .reply)] }
    }

    func release() -> Bool {
        gate.withLockedValue { gate in
            guard let continuation = gate else { return false }
            gate = nil
            continuation.resume()
            return true
        }
    }
}

func origin(_ session: UInt64) -> Origin { Origin(session: SessionID(session), correlation: nil) }

@Suite struct EventBusTests {
    @Test func eventsFlowDepthFirstInCausalOrder() async {
        let first = MapServer(observes: ["Request"]) { _ in
            [Emission(TestEvent(name: "Middle"), .internal), Emission(TestEvent(name: "Reply"), .reply)]
        }
        let second = MapServer(observes: ["Middle"]) { _ in
            [Emission(TestEvent(name: "Broadcast"), .broadcast(seq: 1))]
        }
        let bus = EventBus(servers: [first, second])
        let out = await bus.run([(TestEvent(name: "Request"), origin(1))])
        #expect(out.map(\.event.name) == ["Request", "Middle", "Broadcast", "Reply"])
        #expect(out[2].scope == .broadcast(seq: 1))
    }

    @Test func eventsNoServerObservesOnlyLeaveTheBus() async {
        let bus = EventBus(servers: [MapServer(observes: ["Other"]) { _ in [Emission(TestEvent(name: "X"), .reply)] }])
        let out = await bus.run([(TestEvent(name: "Lonely"), origin(1))])
        #expect(out.map(\.event.name) == ["Lonely"])
    }

    @Test func theModelLayerAnswersABatchInOneCallAndEachAnswerStaysWithItsRequest() async {
        let view = MapServer(observes: ["Request"]) { _ in [Emission(TestEvent(name: "ModelRequest"), .internal)] }
        let model = RecordingModel()
        let bus = EventBus(servers: [view], model: model)
        let out = await bus.run([
            (TestEvent(name: "Request"), origin(1)), (TestEvent(name: "Request"), origin(2)),
            (TestEvent(name: "Other"), origin(3)),
        ])
        #expect(model.batches.withLockedValue { $0 } == [["ModelRequest", "ModelRequest"]])
        #expect(
            out.map(\.event.name) == [
                "Request", "ModelRequest", "Answer", "Request", "ModelRequest", "Answer", "Other",
            ]
        )
        #expect(out.map(\.origin.session.rawValue) == [1, 1, 1, 2, 2, 2, 3])
    }
}

@Suite struct SequencerTests {
    func makeSequencer(
        model: RecordingModel,
        sink: RecordingSink,
        capacity: Int = 1_000,
        maxBatch: Int = 256,
        offload: Sequencer<TestEvent>.Offload? = nil
    )
        -> Sequencer<TestEvent>
    {
        let view = MapServer(observes: ["Request"]) { _ in [Emission(TestEvent(name: "ModelRequest"), .internal)] }
        return Sequencer(
            bus: EventBus(servers: [view], model: model),
            sink: sink,
            capacity: capacity,
            maxBatch: maxBatch,
            offload: offload
        )
    }

    /// Hand-overs given to another thread wait there until the test runs them, in order.
    final class HeldHandOvers: Sendable {
        let held = NIOLockedValueBox<[@Sendable () -> Void]>([])
        var count: Int { held.withLockedValue { $0.count } }
        func offload(_ work: @escaping @Sendable () -> Void) { held.withLockedValue { $0.append(work) } }
        func runAll() {
            let works = held.withLockedValue { held in
                let works = held
                held = []
                return works
            }
            for work in works { work() }
        }
    }

    @Test func handOversOnAnotherThreadKeepTheirOrderAndOnlyAnIdleOneIsMadeInPlace() async {
        let model = RecordingModel(holding: true)
        let sink = RecordingSink()
        let handOvers = HeldHandOvers()
        let sequencer = makeSequencer(model: model, sink: sink, offload: { handOvers.offload($0) })
        let running = Task { await sequencer.run() }
        #expect(sequencer.submit(TestEvent(name: "Request"), origin: origin(0)))
        while !model.release() { await Task.yield() }
        // Batch [0] is committing; the next one waits behind it, so [0] is handed over there.
        for session in 1...10 {
            #expect(sequencer.submit(TestEvent(name: "Request"), origin: origin(UInt64(session))))
        }
        while handOvers.count < 1 { await Task.yield() }
        #expect(sink.answered.withLockedValue { $0.isEmpty }, "handed over on the other thread, not here")
        // Batch [1…10] finds nothing waiting after it, but [0] is still there: it follows it
        // rather than overtake it.
        while handOvers.count < 2, sink.answered.withLockedValue({ $0.isEmpty }) {
            _ = model.release()
            await Task.yield()
        }
        #expect(sink.answered.withLockedValue { $0.isEmpty }, "a later batch overtook one still held")
        handOvers.runAll()
        #expect(sink.answered.withLockedValue { $0.map(\.session.rawValue) } == Array(0...10))
        // Now nothing is waiting and nothing is held: the hand-over is made in place.
        #expect(sequencer.submit(TestEvent(name: "Request"), origin: origin(11)))
        while sink.answered.withLockedValue({ $0.count }) < 12 {
            _ = model.release()
            await Task.yield()
        }
        #expect(handOvers.count == 0)
        #expect(sink.answered.withLockedValue { $0.map(\.session.rawValue) } == Array(0...11))
        sequencer.stop()
        await running.value
    }

    @Test func aStoppingSequencerWaitsForItsHandOvers() async {
        let model = RecordingModel()
        let sink = RecordingSink()
        let handOvers = HeldHandOvers()
        let sequencer = makeSequencer(model: model, sink: sink, maxBatch: 2, offload: { handOvers.offload($0) })
        // Queued before the run: each batch finds the next one waiting.
        for session in 0..<5 { #expect(sequencer.submit(TestEvent(name: "Request"), origin: origin(UInt64(session)))) }
        sequencer.stop()
        let returned = NIOLockedValueBox(false)
        let running = Task {
            await sequencer.run()
            returned.withLockedValue { $0 = true }
        }
        // Batches [0, 1], [2, 3] and [4] are handed over there; then the run waits for them
        // (by handing over one more thing) rather than return.
        while handOvers.count < 4, !returned.withLockedValue({ $0 }), sink.answered.withLockedValue({ $0.isEmpty }) {
            await Task.yield()
        }
        #expect(!returned.withLockedValue { $0 }, "the run returned with answers not handed over")
        #expect(sink.answered.withLockedValue { $0.isEmpty })
        handOvers.runAll()
        await running.value
        #expect(sink.answered.withLockedValue { $0.map(\.session.rawValue) } == [0, 1, 2, 3, 4])
    }

    @Test func requestsQueuedDuringACommitRunAsTheNextBatchInArrivalOrder() async throws {
        let model = RecordingModel(holding: true)
        let sink = RecordingSink()
        let sequencer = makeSequencer(model: model, sink: sink)
        let running = Task { await sequencer.run() }
        #expect(sequencer.submit(TestEvent(name: "Request"), origin: origin(0)))
        // Wait (without sleeping) until the first batch is inside the model layer.
        while !model.release() { await Task.yield() }
        // That released it; hold the next one again.
        for session in 1...100 {
            #expect(sequencer.submit(TestEvent(name: "Request"), origin: origin(UInt64(session))))
        }
        while sink.answered.withLockedValue({ $0.count }) < 101 {
            _ = model.release()
            await Task.yield()
        }
        sequencer.stop()
        await running.value
        #expect(sink.answered.withLockedValue { $0.map(\.session.rawValue) } == Array(0...100))
        #expect(sink.batches.withLockedValue { $0 }.count < 101, "requests that waited ran together")
        #expect(!sequencer.submit(TestEvent(name: "Request"), origin: origin(1)), "a stopped sequencer refuses")
    }

    @Test func aFullQueueRefusesAndLosesNothingItTook() async {
        let model = RecordingModel()
        let sink = RecordingSink()
        let sequencer = makeSequencer(model: model, sink: sink, capacity: 3, maxBatch: 2)
        // Not running yet: the queue fills.
        let taken = (0..<5).map { sequencer.submit(TestEvent(name: "Request"), origin: origin(UInt64($0))) }
        #expect(taken == [true, true, true, false, false])
        #expect(sequencer.queued == 3)
        sequencer.stop()
        await sequencer.run()
        #expect(sink.answered.withLockedValue { $0.map(\.session.rawValue) } == [0, 1, 2])
        #expect(sink.batches.withLockedValue { $0 } == [2, 1], "batches are at most maxBatch")
        #expect(sequencer.counts.requests == 3)
    }
}

@Suite struct RequestQueueTests {
    @Test func stopHandsTheWaitingConsumerNil() {
        var queue = RequestQueue<Int>(capacity: 10, maxBatch: 10)
        guard case .wait = queue.take() else {
            Issue.record("an empty queue makes the consumer wait")
            return
        }
        guard case .queued = queue.submit(1), case .batch(let batch) = queue.take() else {
            Issue.record("a queued item is taken")
            return
        }
        #expect(batch == [1])
        guard case .none = queue.stop(), case .finished = queue.take() else {
            Issue.record("after stop an empty queue is finished")
            return
        }
        guard case .refused = queue.submit(2) else {
            Issue.record("a stopped queue refuses")
            return
        }
    }

    /// Runs `body` with a consumer's continuation; `body` returns what the queue handed back
    /// to resume (nil: the test failed, and the continuation is resumed anyway so that the
    /// test does not hang).
    func consume(
        _ body: (RequestQueue<Int>.Waiter) -> (RequestQueue<Int>.Waiter, [Int]?)?
    ) async -> [Int]? {
        await withCheckedContinuation { (waiter: RequestQueue<Int>.Waiter) in
            if let (handed, batch) = body(waiter) {
                handed.resume(returning: batch)
            } else {
                waiter.resume(returning: [-1])
            }
        }
    }

    @Test func aGatheringConsumerIsHandedTheBatchOnlyOnceAsManyAsItWantsCame() async {
        var queue = RequestQueue<Int>(capacity: 10, maxBatch: 10)
        let batch = await consume { waiter in
            guard case .wait = queue.gather(waiter, want: 3, limit: 3).0 else { return nil }
            guard case .queued = queue.submit(1), case .queued = queue.submit(2) else { return nil }
            guard case .resume(let handed, let batch) = queue.submit(3) else { return nil }
            return (handed, batch)
        }
        #expect(batch == [1, 2, 3], "fewer than it wants are queued; the third hands it all three")
        _ = queue.submit(4)
        guard case .batch([4]) = queue.take() else {
            Issue.record("then it takes as before")
            return
        }
    }

    @Test func aGatheringWaitEndsWithWhatCameAndAnOldWaitsEndDoesNothing() async {
        var queue = RequestQueue<Int>(capacity: 10, maxBatch: 10)
        var first: UInt64 = 0
        let early = await consume { waiter in
            let (_, wait) = queue.gather(waiter, want: 5, limit: 2)
            first = wait
            for item in 1...3 { _ = queue.submit(item) }
            guard case .resume(let handed, let batch) = queue.expire(gathering: wait) else { return nil }
            return (handed, batch)
        }
        #expect(early == [1, 2], "its own end hands it what came, at most the limit")
        let late = await consume { waiter in
            let (action, wait) = queue.gather(waiter, want: 5, limit: 10)
            guard case .wait = action, case .none = queue.expire(gathering: first) else { return nil }
            guard case .resume(let handed, let batch) = queue.expire(gathering: wait) else { return nil }
            return (handed, batch)
        }
        #expect(late == [3], "the first wait's end did not end the second")
    }

    @Test func stoppingHandsAGatheringConsumerWhatCameThenFinishes() async {
        var queue = RequestQueue<Int>(capacity: 10, maxBatch: 10)
        let batch = await consume { waiter in
            _ = queue.gather(waiter, want: 4, limit: 4)
            _ = queue.submit(1)
            guard case .resume(let handed, let batch) = queue.stop() else { return nil }
            return (handed, batch)
        }
        #expect(batch == [1])
        guard case .finished = queue.take() else {
            Issue.record("then the queue is finished")
            return
        }
    }

    @Test func aParkedConsumerIsHandedTheNextRequestAndIsParkedNoMoreAfterIt() async {
        var queue = RequestQueue<Int>(capacity: 10, maxBatch: 10)
        let batch = await consume { waiter in
            guard case .wait = queue.park(waiter) else { return nil }
            guard case .resume(let handed, let batch) = queue.submit(7) else { return nil }
            return (handed, batch)
        }
        #expect(batch == [7])
        guard case .queued = queue.submit(8) else {
            Issue.record("with nobody parked, the next request is queued")
            return
        }
        guard case .batch([8]) = queue.take() else {
            Issue.record("and taken in order")
            return
        }
    }

    @Test func stopHandsAParkedConsumerNilAndAFullQueueRefuses() async {
        var full = RequestQueue<Int>(capacity: 2, maxBatch: 10)
        guard case .queued = full.submit(1), case .queued = full.submit(2), case .refused = full.submit(3) else {
            Issue.record("a queue at its capacity refuses")
            return
        }
        var queue = RequestQueue<Int>(capacity: 10, maxBatch: 10)
        let batch = await consume { waiter in
            guard case .wait = queue.park(waiter) else { return nil }
            guard case .resume(let handed, let batch) = queue.stop() else { return nil }
            return (handed, batch)
        }
        #expect(batch == nil, "a parked consumer hears that nothing will come")
        guard case .refused = queue.submit(1), case .finished = queue.take() else {
            Issue.record("a stopped queue refuses and is finished")
            return
        }
    }

    @Test func takingInBatchesKeepsOrderAcrossManyItems() {
        var queue = RequestQueue<Int>(capacity: 100_000, maxBatch: 7)
        for item in 0..<10_000 { _ = queue.submit(item) }
        var seen: [Int] = []
        while case .batch(let batch) = queue.take() {
            #expect(batch.count <= 7)
            seen += batch
        }
        #expect(seen == Array(0..<10_000))
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

    /// The escaping a string must get, byte by byte (the writer looks at eight bytes at a time).
    private static func reference(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    @Test func escapesEveryByteThatNeedsItAtEveryPlaceOfAWord() {
        let special: [Character] = ["\"", "\\", "\n", "\u{00}", "\u{01}", "\u{1F}", "\t"]
        // Bytes next to the special ones, which a word-at-a-time test could mistake for them.
        let neighbours: [Character] = [" ", "!", "#", "[", "]", "\u{7F}", "é", "a"]
        for length in 0..<20 {
            for position in 0..<max(length, 1) {
                for character in special + neighbours {
                    var characters = Array(repeating: neighbours[(position + length) % neighbours.count], count: length)
                    if length > 0 { characters[position] = character }
                    let text = String(characters)
                    var writer = JSONWriter()
                    writer.string(text)
                    let written = String(decoding: writer.bytes, as: UTF8.self)
                    #expect(written == Self.reference(text), "\(Array(text.utf8))")
                }
            }
        }
    }

    /// Commas are right at every depth, past the 64 levels kept as bits too, and after
    /// containers close back to a level that already had a value.
    @Test func separatesValuesAtEveryDepth() {
        for depth in [1, 2, 63, 64, 65, 66, 130] {
            var writer = JSONWriter()
            // Each level: 1, the next level, an empty object, 2.
            func write(_ level: Int) {
                writer.beginArray()
                writer.integer(1)
                if level < depth { write(level + 1) }
                writer.beginObject()
                writer.endObject()
                writer.integer(2)
                writer.endArray()
            }
            func expected(_ level: Int) -> String {
                "[1," + (level < depth ? expected(level + 1) + "," : "") + "{},2]"
            }
            write(1)
            #expect(String(decoding: writer.bytes, as: UTF8.self) == expected(1), "\(depth)")
        }
    }

    @Test func writesIntegersAtTheirLimits() {
        let values: [Int64] = [0, 7, -7, 10, -10, 99, 100, 1_000_000_007, Int64.max, Int64.min]
        for value in values {
            var writer = JSONWriter()
            writer.integer(value)
            #expect(String(decoding: writer.bytes, as: UTF8.self) == String(value))
        }
        var writer = JSONWriter()
        writer.integer(UInt64.max)
        #expect(String(decoding: writer.bytes, as: UTF8.self) == "18446744073709551615")
    }
}
