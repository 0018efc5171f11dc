import EventStream
import NIOCore
import Testing

@testable import Relay

@Suite struct ShardInboxStateMachineTests {
    private let shard = 1

    private func broadcast(_ seq: UInt64, origin: UInt64? = nil, originShard: Int? = nil) -> ShardInboxItem {
        .broadcast(pending(seq, origin: origin, originShard: originShard))
    }

    private func pending(_ seq: UInt64, origin: UInt64? = nil, originShard: Int? = nil) -> PendingBroadcast {
        PendingBroadcast(
            seq: seq,
            typeIndex: 0,
            type: "T",
            mark: nil,
            body: .payload(Array("{}".utf8)),
            origin: origin.map(SessionID.init),
            correlation: origin == nil ? nil : .string("r"),
            originShard: originShard
        )
    }

    /// A session registers and settles with a subscription.
    private func startSubscribed(_ inbox: inout ShardInboxStateMachine) {
        _ = inbox.register(fannedOut: 0)
        inbox.subscriptionChanged(was: false, now: true)
        inbox.settled()
    }

    /// The items' kinds and seqs, as `b3` (a broadcast), `o3` (an own copy), `a` (answered).
    private func kinds(_ items: [ShardInboxItem]) -> [String] {
        items.map { item in
            switch item {
            case .broadcast(let frame): "b\(frame.seq)"
            case .ownCopy(let frame): "o\(frame.seq)"
            case .answered: "a"
            case .reply: "r"
            case .monitor: "m"
            case .gap(let seq): "g\(seq)"
            case .run: "run"
            }
        }
    }

    @Test func withNoSessionBroadcastsAreLeftOutAndTheLoopIsNotWoken() {
        var inbox = ShardInboxStateMachine(head: 5)
        #expect(inbox.post([broadcast(6), broadcast(7)], shard: shard) == .none)
        #expect(inbox.items.isEmpty)
        #expect(inbox.head(fannedOut: 5) == 7)
        // A session starting now is greeted with the newest seq, not the last one fanned out.
        #expect(inbox.register(fannedOut: 5) == 7)
    }

    @Test func aStartingSessionKeepsBroadcastsUntilItsSubscriptionsAreSettled() {
        var inbox = ShardInboxStateMachine(head: 0)
        #expect(inbox.register(fannedOut: 0) == 0)
        #expect(inbox.post([broadcast(1)], shard: shard) == .schedule)
        #expect(kinds(inbox.take()) == ["b1"])
        // Settled without a subscription (it must authenticate first): nobody listens.
        inbox.settled()
        #expect(inbox.post([broadcast(2)], shard: shard) == .none)
        #expect(inbox.take().isEmpty)
        #expect(inbox.head(fannedOut: 1) == 2)
    }

    @Test func subscribersKeepBroadcastsAndTheLastOneToLeaveStopsThem() {
        var inbox = ShardInboxStateMachine(head: 0)
        startSubscribed(&inbox)
        startSubscribed(&inbox)
        // A change of types that stays subscribed changes nothing.
        inbox.subscriptionChanged(was: true, now: true)
        #expect(inbox.post([broadcast(1)], shard: shard) == .schedule)
        inbox.subscriptionChanged(was: true, now: false)
        // Scheduled already: kept, no second wake-up.
        #expect(inbox.post([broadcast(2)], shard: shard) == .none)
        #expect(kinds(inbox.take()) == ["b1", "b2"])
        inbox.subscriptionChanged(was: true, now: false)
        #expect(inbox.post([broadcast(3)], shard: shard) == .none)
        #expect(inbox.take().isEmpty)
        #expect(inbox.head(fannedOut: 2) == 3)
    }

    @Test func whileBroadcastsAreQueuedLaterOnesAreKeptBehindThem() {
        // A session that starts after a left-out seq must never get an older one from the
        // queue: so nothing is left out while a broadcast is still queued.
        var inbox = ShardInboxStateMachine(head: 0)
        _ = inbox.register(fannedOut: 0)
        #expect(inbox.post([broadcast(1)], shard: shard) == .schedule)
        inbox.settled()
        #expect(inbox.post([broadcast(2)], shard: shard) == .none)
        #expect(inbox.register(fannedOut: 0) == 0)
        #expect(kinds(inbox.take()) == ["b1", "b2"])
    }

    @Test func theCauserOnThisLoopStillGetsItsCopyWhenNobodyListens() {
        var inbox = ShardInboxStateMachine(head: 0)
        let posted = [
            broadcast(1, origin: 9, originShard: shard),
            broadcast(2, origin: 8, originShard: 0),
            broadcast(3),
            .answered(SessionID(9)),
        ]
        #expect(inbox.post(posted, shard: shard) == .schedule)
        let items = inbox.take()
        #expect(kinds(items) == ["o1", "a"])
        if case .ownCopy(let frame) = items.first {
            #expect(frame.origin == SessionID(9))
            #expect(String(buffer: frame.originCopy()) == "{\"seq\":1,\"type\":\"T\",\"re\":\"r\",\"payload\":{}}\n")
        }
        #expect(inbox.head(fannedOut: 1) == 3)
    }

    @Test func repliesAndOtherItemsAreAlwaysPosted() {
        var inbox = ShardInboxStateMachine(head: 0)
        let reply = PendingReply(type: "T", correlation: nil, mark: nil, body: .payload([]))
        #expect(
            inbox.post([.reply(SessionID(1), reply, typeIndex: 0)], shard: 0)
                == .schedule
        )
        #expect(inbox.post([.gap(4), .run({})], shard: 0) == .none)
        #expect(kinds(inbox.take()) == ["r", "g4", "run"])
        #expect(inbox.post([.answered(SessionID(1))], shard: 0) == .schedule)
    }

    /// Each loop makes the frames it writes, in buffers of its own: everyone's frame, and the
    /// requester's copy with `re` only where the requester is.
    @Test func eachLoopMakesTheFramesItNeedsInBuffersOfItsOwn() {
        let broadcast = pending(5, origin: 9, originShard: shard)
        let here = broadcast.frames(on: shard)
        #expect(String(buffer: here.plain) == "{\"seq\":5,\"type\":\"T\",\"payload\":{}}\n")
        #expect(String(buffer: here.originCopy) == "{\"seq\":5,\"type\":\"T\",\"re\":\"r\",\"payload\":{}}\n")
        let elsewhere = broadcast.frames(on: 0)
        #expect(String(buffer: elsewhere.plain) == String(buffer: here.plain))
        elsewhere.plain.withUnsafeReadableBytes { plain in
            elsewhere.originCopy.withUnsafeReadableBytes { copy in
                #expect(plain.baseAddress == copy.baseAddress, "no requester on that loop: no copy made")
            }
            here.plain.withUnsafeReadableBytes { other in
                #expect(plain.baseAddress != other.baseAddress, "two loops never share a buffer")
            }
        }
        #expect(String(buffer: broadcast.originCopy()) == String(buffer: here.originCopy))
        // Without an `re`, the requester's copy is everyone's frame.
        let unanswered = pending(6).frames(on: shard)
        #expect(String(buffer: unanswered.originCopy) == String(buffer: unanswered.plain))
    }
}
