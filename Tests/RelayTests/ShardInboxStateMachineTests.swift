import EventStream
import NIOCore
import Testing

@testable import Relay

@Suite struct ShardInboxStateMachineTests {
    private let shard = 1

    private func broadcast(_ seq: UInt64, origin: UInt64? = nil, originShard: Int? = nil) -> ShardInboxItem {
        let plain = ByteBuffer(string: "{\"seq\":\(seq)}\n")
        let copy = origin == nil ? plain : ByteBuffer(string: "{\"seq\":\(seq),\"re\":\"r\"}\n")
        return .broadcast(
            BroadcastFrame(
                seq: seq,
                typeIndex: 0,
                plain: plain,
                origin: origin.map(SessionID.init),
                originCopy: copy,
                originShard: originShard
            )
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
        #expect(inbox.post([broadcast(6), broadcast(7)], shard: shard, ownBytes: false) == .none)
        #expect(inbox.items.isEmpty)
        #expect(inbox.head(fannedOut: 5) == 7)
        // A session starting now is greeted with the newest seq, not the last one fanned out.
        #expect(inbox.register(fannedOut: 5) == 7)
    }

    @Test func aStartingSessionKeepsBroadcastsUntilItsSubscriptionsAreSettled() {
        var inbox = ShardInboxStateMachine(head: 0)
        #expect(inbox.register(fannedOut: 0) == 0)
        #expect(inbox.post([broadcast(1)], shard: shard, ownBytes: false) == .schedule)
        #expect(kinds(inbox.take()) == ["b1"])
        // Settled without a subscription (it must authenticate first): nobody listens.
        inbox.settled()
        #expect(inbox.post([broadcast(2)], shard: shard, ownBytes: false) == .none)
        #expect(inbox.take().isEmpty)
        #expect(inbox.head(fannedOut: 1) == 2)
    }

    @Test func subscribersKeepBroadcastsAndTheLastOneToLeaveStopsThem() {
        var inbox = ShardInboxStateMachine(head: 0)
        startSubscribed(&inbox)
        startSubscribed(&inbox)
        // A change of types that stays subscribed changes nothing.
        inbox.subscriptionChanged(was: true, now: true)
        #expect(inbox.post([broadcast(1)], shard: shard, ownBytes: false) == .schedule)
        inbox.subscriptionChanged(was: true, now: false)
        // Scheduled already: kept, no second wake-up.
        #expect(inbox.post([broadcast(2)], shard: shard, ownBytes: false) == .none)
        #expect(kinds(inbox.take()) == ["b1", "b2"])
        inbox.subscriptionChanged(was: true, now: false)
        #expect(inbox.post([broadcast(3)], shard: shard, ownBytes: false) == .none)
        #expect(inbox.take().isEmpty)
        #expect(inbox.head(fannedOut: 2) == 3)
    }

    @Test func whileBroadcastsAreQueuedLaterOnesAreKeptBehindThem() {
        // A session that starts after a left-out seq must never get an older one from the
        // queue: so nothing is left out while a broadcast is still queued.
        var inbox = ShardInboxStateMachine(head: 0)
        _ = inbox.register(fannedOut: 0)
        #expect(inbox.post([broadcast(1)], shard: shard, ownBytes: false) == .schedule)
        inbox.settled()
        #expect(inbox.post([broadcast(2)], shard: shard, ownBytes: false) == .none)
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
        #expect(inbox.post(posted, shard: shard, ownBytes: true) == .schedule)
        let items = inbox.take()
        #expect(kinds(items) == ["o1", "a"])
        if case .ownCopy(let frame) = items.first {
            #expect(frame.origin == SessionID(9))
            #expect(String(buffer: frame.originCopy) == "{\"seq\":1,\"re\":\"r\"}\n")
        }
        #expect(inbox.head(fannedOut: 1) == 3)
    }

    @Test func theCausersCopyIsSharedNotCopiedEvenWhereKeptBroadcastsGetBytesOfTheirOwn() {
        var inbox = ShardInboxStateMachine(head: 0)
        let item = broadcast(1, origin: 9, originShard: shard)
        guard case .broadcast(let original) = item else { return }
        #expect(inbox.post([item], shard: shard, ownBytes: true) == .schedule)
        guard case .ownCopy(let kept)? = inbox.take().first else {
            Issue.record("the causer's copy is kept")
            return
        }
        kept.originCopy.withUnsafeReadableBytes { keptBytes in
            original.originCopy.withUnsafeReadableBytes { originalBytes in
                #expect(keptBytes.baseAddress == originalBytes.baseAddress, "one writer: no copy")
            }
        }
    }

    @Test func repliesAndOtherItemsAreAlwaysPosted() {
        var inbox = ShardInboxStateMachine(head: 0)
        #expect(
            inbox.post([.reply(SessionID(1), ByteBuffer(string: "x"), typeIndex: 0)], shard: 0, ownBytes: false)
                == .schedule
        )
        #expect(inbox.post([.gap(4), .run({})], shard: 0, ownBytes: false) == .none)
        #expect(kinds(inbox.take()) == ["r", "g4", "run"])
        #expect(inbox.post([.answered(SessionID(1))], shard: 0, ownBytes: false) == .schedule)
    }

    @Test func keptBroadcastsGetBytesOfTheirOwnOnlyWhenAsked() {
        var inbox = ShardInboxStateMachine(head: 0)
        _ = inbox.register(fannedOut: 0)
        let item = broadcast(1)
        guard case .broadcast(let original) = item else { return }
        _ = inbox.post([item, item], shard: shard, ownBytes: true)
        _ = inbox.post([broadcast(2)], shard: shard, ownBytes: false)
        let taken = inbox.take()
        guard case .broadcast(let copied) = taken[0], case .broadcast(let shared) = taken[2] else {
            Issue.record("expected broadcasts, got \(kinds(taken))")
            return
        }
        #expect(String(buffer: copied.plain) == String(buffer: original.plain))
        copied.plain.withUnsafeReadableBytes { copiedBytes in
            original.plain.withUnsafeReadableBytes { originalBytes in
                #expect(copiedBytes.baseAddress != originalBytes.baseAddress)
            }
        }
        #expect(shared.seq == 2)
    }
}
