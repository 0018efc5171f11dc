import Testing

@testable import TodostreamClient

@Suite struct OutboxTests {
    @Test func holdsWritesWhileDisconnectedAndSendsThemInOrderOnceReady() {
        var outbox = Outbox(capacity: 3)
        check(outbox.enqueue(id: "c1", mid: "m:1", frame: [1], connectionReady: false), .queued)
        check(outbox.enqueue(id: "c2", mid: "m:2", frame: [2], connectionReady: false), .queued)
        check(outbox.connectionReady().map(\.frame), [[1], [2]])
        check(outbox.enqueue(id: "c3", mid: nil, frame: [3], connectionReady: true), .send([3]))
        #expect(outbox.count == 3)
    }

    @Test func isBounded() {
        var outbox = Outbox(capacity: 2)
        _ = outbox.enqueue(id: "c1", mid: "m:1", frame: [1], connectionReady: false)
        _ = outbox.enqueue(id: "c2", mid: "m:2", frame: [2], connectionReady: true)
        check(outbox.enqueue(id: "c3", mid: "m:3", frame: [3], connectionReady: true), .full)
        check(outbox.enqueue(id: "c4", mid: "m:4", frame: [4], connectionReady: false), .full)
        outbox.remove(id: "c1")
        check(outbox.enqueue(id: "c5", mid: "m:5", frame: [5], connectionReady: false), .queued)
        #expect(outbox.entries.map(\.id) == ["c2", "c5"])
    }

    @Test func whatWasSentOnALostConnectionIsSentAgainWithItsMid() {
        var outbox = Outbox(capacity: 4)
        _ = outbox.enqueue(id: "c1", mid: "m:1", frame: [1], connectionReady: true)
        _ = outbox.enqueue(id: "c2", mid: "m:2", frame: [2], connectionReady: true)
        outbox.remove(id: "c1")
        outbox.connectionLost()
        #expect(outbox.entries.allSatisfy { !$0.sent })
        check(outbox.connectionReady().map(\.frame), [[2]])
        #expect(outbox.entries.map(\.mid) == ["m:2"])
        check(outbox.remove(id: "c2")?.mid, "m:2")
        check(outbox.remove(id: "c2"), nil)
        #expect(outbox.count == 0)
    }

    /// A write that never went out on any connection cannot have been applied; one sent on a
    /// connection since lost may have been.
    @Test func rememberWhetherAnEntryEverWentOut() {
        var outbox = Outbox(capacity: 4)
        _ = outbox.enqueue(id: "c1", mid: "m:1", frame: [1], connectionReady: false)
        _ = outbox.enqueue(id: "c2", mid: "m:2", frame: [2], connectionReady: true)
        outbox.connectionLost()
        #expect(outbox.remove(id: "c1")?.everSent == false)
        #expect(outbox.remove(id: "c2")?.everSent == true)
    }
}

/// Answers come in the order the frames were sent: the one without `re` belongs to the oldest
/// frame not yet answered.
@Suite struct AnswerOrderTests {
    @Test func anAnswerWithoutIDBelongsToTheOldestFrameNotAnswered() {
        var order = AnswerOrder(capacity: 8)
        for id in ["auth", "c1", "c2", "c3"] { order.sent(id) }
        order.answered("auth")
        // c2's answer says c1 was answered before it, whatever that answer was.
        order.answered("c2")
        check(order.answeredWithoutID(), "c3")
        check(order.answeredWithoutID(), nil)
        order.sent("c4")
        order.connectionLost()
        check(order.answeredWithoutID(), nil)
        order.answered("c9")
        check(order.ids, [])
    }

    @Test func pastItsCapacityAnAnswerWithoutIDIsMatchedOnlyOnceTheOrderIsKnownAgain() {
        var order = AnswerOrder(capacity: 2)
        for id in ["c1", "c2", "c3"] { order.sent(id) }
        // c1 is forgotten: c2 may not be the next frame answered.
        check(order.answeredWithoutID(), nil)
        order.answered("c1")
        check(order.answeredWithoutID(), nil)
        order.answered("c2")
        check(order.answeredWithoutID(), "c3")
    }
}

@Suite struct MutationIDsTests {
    @Test func randomPrefixAndCounter() {
        var ids = MutationIDs()
        #expect(ids.prefix.count == 16)
        #expect(ids.prefix.allSatisfy { "abcdefghijklmnopqrstuvwxyz234567".contains($0) })
        let first = ids.next()
        let second = ids.next()
        #expect(first == "\(ids.prefix):1")
        #expect(second == "\(ids.prefix):2")
        #expect(first.count <= 64)
        #expect(MutationIDs().prefix != MutationIDs().prefix)
    }
}

/// `#expect` for a value made by a mutating call (which the macro cannot take apart).
func check<T: Equatable>(_ value: T, _ expected: T, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(value == expected, sourceLocation: sourceLocation)
}
