import EventStream
import NIOCore
import Testing

@testable import Relay

@Suite struct ResumeStateMachineTests {
    private func frame(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    /// The one broadcast type of these tests (index 0).
    private static let todos = TypeSet(bits: 1)

    /// A connection greeted at seq 10, subscribed to `todos`.
    private func greeted(at helloSeq: UInt64 = 10) -> ResumeStateMachine {
        var machine = ResumeStateMachine()
        machine.greeted(helloSeq: helloSeq, types: Self.todos)
        return machine
    }

    private func start(
        _ machine: inout ResumeStateMachine,
        after: UInt64,
        types: TypeSet = todos,
        heldSinceStart: HeldOutput? = nil,
        helloSeq: UInt64 = 10,
        current: UInt64 = 12,
        released: UInt64? = nil,
        pageSize: Int = 4
    ) -> ResumeStateMachine.Plan? {
        let action = machine.resumeRequested(
            epoch: "E",
            after: after,
            types: types,
            heldSinceStart: heldSinceStart,
            helloSeq: helloSeq,
            current: current,
            released: released ?? current,
            pageSize: pageSize
        )
        guard case .replay(let plan) = action else { return nil }
        return plan
    }

    private func entries(_ seqs: ClosedRange<UInt64>) -> [JournalEntry] {
        seqs.map { JournalEntry(seq: $0, type: "ResponseTodoViewModel", payload: []) }
    }

    @Test func replaysUpToTheGreetingAndCoversWhatCameLive() throws {
        var machine = greeted()
        let plan = try #require(start(&machine, after: 3))
        #expect(machine.isRunning)
        #expect(plan.replayThrough == 10)
        // Nothing was held since the greeting: broadcasts up to `current` came live.
        #expect(plan.covered == 12)
        #expect(plan.resumed == .resumed(from: 4, to: 12))
    }

    @Test func heldSinceStartTheReplayCoversWhatWasHeld() throws {
        // 11 and 12 were held since the greeting: they are replayed in order with the rest.
        var machine = greeted()
        let plan = try #require(start(&machine, after: 3, heldSinceStart: HeldOutput()))
        #expect(plan.replayThrough == 12)
        #expect(plan.covered == 12)
        #expect(plan.resumed == .resumed(from: 4, to: 12))
    }

    @Test func heldSinceStartTheReplayGoesOnToWhatTheHubReleased() throws {
        // Seqs 11 and 12 reached the loop and were held; 13 and 14 were released (their
        // writers may already have their replies) but had not reached the loop yet.
        var machine = greeted()
        var held = HeldOutput()
        _ = held.append(frame("s11"), seq: 11, maxBytes: 1_000, maxFrames: 100)
        _ = held.append(frame("s12"), seq: 12, maxBytes: 1_000, maxFrames: 100)
        let plan = try #require(start(&machine, after: 3, heldSinceStart: held, released: 14))
        #expect(plan.replayThrough == 14)
        #expect(plan.resumed == .resumed(from: 4, to: 14))
        // They arrive during the replay and are held like the rest.
        for seq: UInt64 in 13...15 {
            #expect(machine.hold(frame("s\(seq)"), seq: seq, maxBytes: 1_000, maxFrames: 100) == .held)
        }
        // The replay sent 4...14; only 15 is left to send.
        #expect(machine.replayEnded(plan.resumed) == .answer(release: [frame("s15")]))
    }

    @Test func notHeldSinceStartTheReplayStopsAtTheGreeting() throws {
        // The client may have received 11 and 12 live: the replay covers only the greeting's
        // seq, and what is on its way arrives live after `resumed`.
        var machine = greeted()
        let plan = try #require(start(&machine, after: 3, released: 14))
        #expect(plan.replayThrough == 10)
        #expect(plan.resumed == .resumed(from: 4, to: 12))
        #expect(machine.hold(frame("s13"), seq: 13, maxBytes: 1_000, maxFrames: 100) == .held)
        #expect(machine.replayEnded(plan.resumed) == .answer(release: [frame("s13")]))
    }

    /// Several daemons: the client read up to 20 on another daemon; this one's loop is at 12.
    /// The resume is answered at once, and 13…20, which still reach this loop, are not sent.
    @Test func aResumeAheadOfTheLoopLeavesOutWhatTheClientHad() throws {
        var machine = greeted()
        #expect(machine.liveFloor == 0)
        let plan = try #require(start(&machine, after: 20))
        #expect(plan.page(after: plan.start) == nil)
        #expect(plan.resumed == .resumed(from: 21, to: 20))
        #expect(machine.hold(frame("s13"), seq: 13, maxBytes: 1_000, maxFrames: 100) == .held)
        #expect(machine.replayEnded(plan.resumed) == .answer(release: []))
        #expect(machine.liveFloor == 20)
        // A gap sets the floor at its seq: the client refetches the state as of it.
        var other = greeted()
        _ = try #require(start(&other, after: 20))
        _ = other.replayEnded(.gap(current: 12))
        #expect(other.liveFloor == 12)
    }

    @Test func aSecondResumeSendsNothingTheFirstReplayed() throws {
        var machine = greeted()
        let first = try #require(start(&machine, after: 3))
        #expect(first.start == 3)
        #expect(machine.replayEnded(first.resumed) == .answer(release: []))
        #expect(machine.ledger.spans == [DeliveryLedger.Span(after: 3, through: 10, types: Self.todos)])
        // The same point again: nothing to replay, the range is still reported.
        let again = try #require(start(&machine, after: 3))
        #expect(again.start == 10)
        #expect(again.page(after: again.start) == nil)
        #expect(again.resumed == .resumed(from: 4, to: 12))
        #expect(machine.replayEnded(again.resumed) == .answer(release: []))
        // From further back: only what the first did not send.
        let earlier = try #require(start(&machine, after: 1))
        #expect(earlier.start == 1)
        #expect((2...10).filter { earlier.sends(UInt64($0), typeIndex: 0) } == [2, 3])
        #expect(machine.replayEnded(earlier.resumed) == .answer(release: []))
        #expect((2...12).filter { machine.ledger.wasSent(UInt64($0), typeIndex: 0) }.count == 11)
    }

    @Test func aResumeThatEndsInAGapRemembersNothing() throws {
        var machine = greeted()
        _ = try #require(start(&machine, after: 3))
        #expect(machine.replayEnded(.gap(current: 12)) == .answer(release: []))
        #expect(machine.ledger.spans.isEmpty)
        let again = try #require(start(&machine, after: 3))
        #expect(again.start == 3 && again.sends(4, typeIndex: 0))
    }

    /// Broadcasts that came while the client was not subscribed to their type never reached
    /// it: a resume once it subscribes again sends them.
    @Test func whatCameWhileUnsubscribedIsReplayed() throws {
        var machine = greeted()
        machine.subscriptionsChanged(to: TypeSet(), head: 12)
        // 13 and 14 are broadcast meanwhile, and not sent.
        machine.subscriptionsChanged(to: Self.todos, head: 14)
        let plan = try #require(start(&machine, after: 12, current: 14))
        #expect(plan.replayThrough == 14)
        #expect(plan.start == 12)
        #expect((11...14).filter { plan.sends(UInt64($0), typeIndex: 0) } == [13, 14])
        #expect(plan.resumed == .resumed(from: 13, to: 14))
        #expect(machine.replayEnded(plan.resumed) == .answer(release: []))
        // From further back, nothing more: 11 and 12 came live.
        let again = try #require(start(&machine, after: 10, current: 14))
        #expect(again.page(after: again.start) == nil)
    }

    /// A resume made while unsubscribed sends nothing, and does not count what it did not send
    /// as sent.
    @Test func aResumeWhileUnsubscribedLeavesTheMissedForALaterOne() throws {
        var machine = greeted()
        machine.subscriptionsChanged(to: TypeSet(), head: 12)
        let none = try #require(start(&machine, after: 12, types: TypeSet(), current: 14))
        #expect((13...14).filter { none.sends(UInt64($0), typeIndex: 0) }.isEmpty)
        _ = machine.replayEnded(none.resumed)
        machine.subscriptionsChanged(to: Self.todos, head: 14)
        let plan = try #require(start(&machine, after: 12, current: 14))
        #expect((13...14).filter { plan.sends(UInt64($0), typeIndex: 0) } == [13, 14])
    }

    /// A client's own write's broadcast reaches it whatever its subscriptions: not sent again.
    @Test func ownBroadcastsOutsideTheSubscriptionsAreNotSentAgain() throws {
        var machine = greeted()
        machine.subscriptionsChanged(to: TypeSet(), head: 10)
        machine.ownBroadcastSent(seq: 11, typeIndex: 0)
        machine.subscriptionsChanged(to: Self.todos, head: 12)
        let plan = try #require(start(&machine, after: 10, current: 12))
        #expect((11...12).filter { plan.sends(UInt64($0), typeIndex: 0) } == [12])
    }

    @Test func theLedgerIsBounded() {
        var ledger = DeliveryLedger(helloSeq: 0, types: Self.todos)
        for seq in 1...UInt64(DeliveryLedger.maxSpans + 10) {
            ledger.subscriptionsChanged(to: seq % 2 == 0 ? Self.todos : TypeSet(), head: seq)
            ledger.ownBroadcast(seq: seq, typeIndex: 0)
        }
        ledger.subscriptionsChanged(to: TypeSet(), head: 1_000)
        for seq in 1...UInt64(2 * DeliveryLedger.maxOwn) { ledger.ownBroadcast(seq: 1_000 + seq, typeIndex: 0) }
        #expect(ledger.spans.count == DeliveryLedger.maxSpans)
        #expect(ledger.own.count == DeliveryLedger.maxOwn)
    }

    @Test func aSecondResumeNeedsTheJournalOnlyForWhatItSends() throws {
        var machine = greeted()
        let first = try #require(start(&machine, after: 3))
        _ = machine.replayEnded(first.resumed)
        let again = try #require(start(&machine, after: 5))
        // Pruned up to 8 meanwhile: nothing of it is needed again.
        #expect(again.isServed(by: JournalPosition(epoch: "E", head: 12, oldest: 9), currentEpoch: "E"))
    }

    @Test func nothingMissedReportsAnEmptyRange() throws {
        var machine = greeted()
        let plan = try #require(start(&machine, after: 10, helloSeq: 10, current: 10))
        #expect(plan.page(after: 10) == nil)
        #expect(plan.resumed == .resumed(from: 11, to: 10))
    }

    @Test func pagesCoverTheReplayExactly() throws {
        var machine = greeted()
        let plan = try #require(start(&machine, after: 1, pageSize: 4))
        var pages: [ResumeStateMachine.Page] = []
        var cursor = plan.after
        while let page = plan.page(after: cursor) {
            pages.append(page)
            cursor = page.through
        }
        #expect(pages == [.init(after: 1, through: 5), .init(after: 5, through: 9), .init(after: 9, through: 10)])
    }

    /// A page is held in memory while the client takes it: its entries are as many as fit in
    /// the byte budget at the size the last page's had, within 1 and the page size.
    @Test func pagesFollowTheSizeOfTheEntries() throws {
        var machine = greeted()
        let plan = try #require(start(&machine, after: 1, pageSize: 1_000))
        #expect(plan.nextPageEntries(lastPageBytes: 0, lastPageEntries: 0, budgetBytes: 1 << 20) == 64)
        // 64 entries of 10,000 bytes: 104 fit in 1 MiB.
        #expect(plan.nextPageEntries(lastPageBytes: 640_000, lastPageEntries: 64, budgetBytes: 1 << 20) == 104)
        // Entries larger than the budget: one at a time.
        #expect(plan.nextPageEntries(lastPageBytes: 2_000_000, lastPageEntries: 1, budgetBytes: 1 << 20) == 1)
        // Small entries: no more than the page size.
        #expect(plan.nextPageEntries(lastPageBytes: 6_400, lastPageEntries: 64, budgetBytes: 1 << 20) == 1_000)
        #expect(plan.page(after: 1, entries: 3) == .init(after: 1, through: 4))
        #expect(plan.page(after: 1, entries: 0) == .init(after: 1, through: 2))
        #expect(plan.page(after: 8, entries: 100) == .init(after: 8, through: 10))
    }

    @Test func aPageSizeBelowOneIsOne() throws {
        var machine = greeted()
        let plan = try #require(start(&machine, after: 8, pageSize: 0))
        #expect(plan.page(after: 8) == .init(after: 8, through: 9))
    }

    @Test func aPrunedPageIsNotWhole() {
        let page = ResumeStateMachine.Page(after: 4, through: 8)
        #expect(page.isWhole(entries(5...8)))
        #expect(!page.isWhole(entries(6...8)))
        #expect(!page.isWhole(entries(5...7)))
        #expect(!page.isWhole([]))
    }

    @Test func theJournalMustHoldEverythingAfterAfter() throws {
        var machine = greeted()
        let plan = try #require(start(&machine, after: 3))
        let position = JournalPosition(epoch: "E", head: 12, oldest: 4)
        #expect(plan.isServed(by: position, currentEpoch: "E"))
        // Pruned past `after + 1`.
        #expect(!plan.isServed(by: JournalPosition(epoch: "E", head: 12, oldest: 5), currentEpoch: "E"))
        // Another epoch, in the journal or in the daemon.
        #expect(!plan.isServed(by: JournalPosition(epoch: "F", head: 12, oldest: 1), currentEpoch: "E"))
        #expect(!plan.isServed(by: position, currentEpoch: "F"))
    }

    @Test func anAfterBeyondEverySeqIsAGap() throws {
        var machine = greeted()
        let plan = try #require(start(&machine, after: 20))
        #expect(!plan.isServed(by: JournalPosition(epoch: "E", head: 19, oldest: 1), currentEpoch: "E"))
        // Another daemon's seq the journal already holds is fine, even if long pruned.
        #expect(plan.isServed(by: JournalPosition(epoch: "E", head: 20, oldest: 15), currentEpoch: "E"))
    }

    @Test func liveOutputWaitsAndThenSkipsWhatTheClientHad() throws {
        var machine = greeted()
        var held = HeldOutput()
        _ = held.append(frame("s11"), seq: 11, maxBytes: 1_000, maxFrames: 100)
        _ = try #require(start(&machine, after: 11, heldSinceStart: held, helloSeq: 10, current: 10))
        #expect(machine.isHoldingLiveOutput)
        #expect(machine.hold(frame("reply"), seq: nil, maxBytes: 1_000, maxFrames: 100) == .held)
        #expect(machine.hold(frame("s12"), seq: 12, maxBytes: 1_000, maxFrames: 100) == .held)
        let end = machine.replayEnded(.resumed(from: 12, to: 11))
        #expect(end == .answer(release: [frame("reply"), frame("s12")]))
        #expect(!machine.isRunning)
        #expect(machine.hold(frame("s13"), seq: 13, maxBytes: 1_000, maxFrames: 100) == .notHeld)
    }

    /// A gap releases what is held past its seq; broadcasts up to it are in the state the
    /// client refetches, and sent after the gap they would take its seq backwards.
    @Test func aGapReleasesWhatIsHeldPastItsSeq() throws {
        var machine = greeted()
        _ = try #require(start(&machine, after: 3))
        _ = machine.hold(frame("s11"), seq: 11, maxBytes: 1_000, maxFrames: 100)
        _ = machine.hold(frame("s12"), seq: 12, maxBytes: 1_000, maxFrames: 100)
        _ = machine.hold(frame("s13"), seq: 13, maxBytes: 1_000, maxFrames: 100)
        _ = machine.hold(frame("reply"), seq: nil, maxBytes: 1_000, maxFrames: 100)
        #expect(machine.replayEnded(.gap(current: 12)) == .answer(release: [frame("s13"), frame("reply")]))
        #expect(machine.state == .idle)
        #expect(machine.liveFloor == 12)
    }

    @Test func aSlowConsumerDuringTheReplayIsOverTheBound() throws {
        var machine = greeted()
        _ = try #require(start(&machine, after: 3))
        #expect(machine.hold(frame("123456"), seq: 13, maxBytes: 10, maxFrames: 100) == .held)
        #expect(machine.hold(frame("123456"), seq: 14, maxBytes: 10, maxFrames: 100) == .heldOverBound)
        machine.sessionClosing()
        #expect(machine.state == .abandoned)
        // The replay stops at the next page; what was held is never sent.
        #expect(machine.pageRead() == .stop)
        #expect(machine.hold(frame("s15"), seq: 15, maxBytes: 10, maxFrames: 100) == .held)
        #expect(machine.isRunning)
    }

    @Test func theStartHoldCountsTowardsTheBound() throws {
        var machine = greeted()
        var held = HeldOutput()
        _ = held.append(frame("123456"), seq: 11, maxBytes: 10, maxFrames: 100)
        _ = try #require(start(&machine, after: 3, heldSinceStart: held))
        #expect(machine.hold(frame("123456"), seq: 12, maxBytes: 10, maxFrames: 100) == .heldOverBound)
    }

    @Test func closingDuringTheReplayStopsItAndAnEndReleasesNothing() throws {
        var machine = greeted()
        _ = try #require(start(&machine, after: 3))
        #expect(machine.pageRead() == .write)
        _ = machine.hold(frame("s13"), seq: 13, maxBytes: 1_000, maxFrames: 100)
        machine.sessionClosing()
        #expect(machine.pageRead() == .stop)
        // The journal answered before the replay noticed: the resume still ends, quietly.
        #expect(machine.replayEnded(.gap(current: 12)) == .answer(release: []))
        #expect(machine.state == .idle)
    }

    @Test func closingWhileIdleChangesNothing() {
        var machine = greeted()
        machine.sessionClosing()
        #expect(machine.state == .idle)
        #expect(machine.pageRead() == .stop)
        #expect(machine.replayEnded(.failed) == .none)
    }

    @Test func aSecondResumeWhileOneRunsIsRefused() throws {
        var machine = greeted()
        let first = try #require(start(&machine, after: 3))
        #expect(start(&machine, after: 5) == nil)
        guard case .replaying(let plan, _) = machine.state else {
            Issue.record("not replaying: \(machine.state)")
            return
        }
        #expect(plan == first)
    }
}
