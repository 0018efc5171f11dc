import EventStream
import NIOCore

/// Guards a session's `resume`: what is replayed from the journal, the live output held back
/// meanwhile (it goes out after the replay, without the broadcasts the client already has), and
/// what `resumed` reports.
///
/// idle → replaying(plan, held) → idle. A session that starts closing during the replay is
/// `abandoned`: the replay stops at its next page and nothing more is sent; the session stays
/// busy unless the replay still reports an end (one already under way).
///
/// What the connection was sent, live and by earlier resumes, is kept in a `DeliveryLedger`:
/// a resume sends what it lacks of the types it subscribes to now, and none of it twice.
struct ResumeStateMachine {

    /// What a resume replays, worked out when it begins. Read by the task that pages through the
    /// journal.
    struct Plan: Equatable, Sendable {
        let epoch: String
        let after: UInt64
        /// The newest seq broadcast on the session's loop when the resume began.
        let current: UInt64
        /// Replayed from the journal up to here: the greeting's seq, or `current` if lower (the
        /// client cannot have received these live). When live output was held since the
        /// greeting, up to the newest seq the hub had released when the resume began: the
        /// client already saw replies to writes up to there, perhaps on another connection,
        /// while their broadcasts were still on their way to this loop. They reach the session
        /// during the replay, are held, and are dropped as replayed.
        let replayThrough: UInt64
        /// The newest seq the client has once the replay is done, replayed or received live.
        let covered: UInt64
        let pageSize: UInt64
        /// The types the connection subscribes to: those replayed.
        let types: TypeSet
        /// What the connection was sent so far, live or replayed, which is not sent again. Nil
        /// when live output was held since the greeting: then none of it reached the client.
        var sent: DeliveryLedger? = nil

        /// Where the replay starts: past what was sent already from `after` on.
        var start: UInt64 {
            sent?.firstUnsent(after: after, types: types, through: replayThrough) ?? after
        }

        /// Whether a replayed broadcast goes to the client: of a type it subscribes to, and not
        /// sent to it before.
        func sends(_ seq: UInt64, typeIndex: Int) -> Bool {
            types.contains(typeIndex) && !(sent?.wasSent(seq, typeIndex: typeIndex) ?? false)
        }

        /// Whether the journal at `position` can serve this resume (otherwise: `gap`). A seq
        /// this daemon has not broadcast yet but the journal holds (another daemon's, sharing the
        /// database) is fine: it and everything after it reach the session live.
        func isServed(by position: JournalPosition, currentEpoch: String) -> Bool {
            let needsJournal = start < replayThrough
            return epoch == position.epoch && epoch == currentEpoch && after <= max(current, position.head)
                && (!needsJournal || start + 1 >= position.oldest)
        }

        /// The journal page to read once everything up to `cursor` is replayed; nil when the
        /// replay is done.
        func page(after cursor: UInt64) -> Page? {
            page(after: cursor, entries: pageSize)
        }

        /// The journal page of at most `entries` (and `pageSize`) entries to read once everything
        /// up to `cursor` is replayed; nil when the replay is done.
        func page(after cursor: UInt64, entries: UInt64) -> Page? {
            guard cursor < replayThrough else { return nil }
            return Page(after: cursor, through: min(replayThrough, cursor + max(1, min(entries, pageSize))))
        }

        /// Entries the first page reads, before the size of the journal's entries is known: a
        /// page is held in memory while the client takes it, at most this many of the largest
        /// frames the daemon takes.
        static let firstPageEntries: UInt64 = 64

        /// Entries the next page reads: as many as fit in `budgetBytes` at the size the last
        /// page's entries had (at least one, at most `pageSize`), so that a page held for a
        /// client that reads slowly, or not at all, is about the budget, whatever the entries'
        /// size.
        func nextPageEntries(lastPageBytes: Int, lastPageEntries: Int, budgetBytes: Int) -> UInt64 {
            guard lastPageEntries > 0 else { return Self.firstPageEntries }
            let perEntry = max(1, lastPageBytes / lastPageEntries)
            return max(1, min(pageSize, UInt64(max(1, budgetBytes / perEntry))))
        }

        /// The outcome once every page is replayed.
        var resumed: Outcome { .resumed(from: after + 1, to: max(after, covered)) }
    }

    /// The journal entries with seqs in `after + 1 ... through`.
    struct Page: Equatable, Sendable {
        let after: UInt64
        let through: UInt64

        /// Whether `entries` are the whole page (none was pruned while reading).
        func isWhole(_ entries: [JournalEntry]) -> Bool {
            entries.first?.seq == after + 1 && entries.last?.seq == through
        }
    }

    enum Outcome: Equatable, Sendable {
        case resumed(from: UInt64, to: UInt64)
        case gap(current: UInt64)
        /// The journal could not be read.
        case failed
    }

    enum State: Equatable {
        case idle
        case replaying(Plan, held: HeldOutput)
        case abandoned
    }

    enum StartAction: Equatable {
        /// Page through the journal as `plan` says.
        case replay(Plan)
        /// A resume is already running.
        case none
    }

    enum PageAction: Equatable {
        /// Write the page's frames.
        case write
        /// The session is closing: stop replaying.
        case stop
    }

    enum EndAction: Equatable {
        /// Answer the resume with its outcome, then send `release` (the live output held
        /// meanwhile, less what the client already has); frames from the client flow again.
        case answer(release: [ByteBuffer])
        /// No resume was running.
        case none
    }

    private(set) var state: State = .idle
    /// What the connection was sent, live and replayed.
    private(set) var ledger = DeliveryLedger(helloSeq: 0, types: TypeSet())
    /// After a resume, live broadcasts up to this seq are not sent: the client had them before
    /// (`after`) or was just sent them. It matters on a daemon sharing the database whose loop
    /// is behind the seq the client resumes after (it read it from another daemon): those
    /// broadcasts still reach this loop after the resume has been answered.
    private(set) var liveFloor: UInt64 = 0

    /// Whether a resume is running: frames from the client wait until it ends.
    var isRunning: Bool {
        if case .idle = state { return false }
        return true
    }

    /// Whether live output is held (or, once abandoned, dropped).
    var isHoldingLiveOutput: Bool { isRunning }

    /// The connection was greeted at `helloSeq`, subscribed to `types`.
    mutating func greeted(helloSeq: UInt64, types: TypeSet) {
        ledger = DeliveryLedger(helloSeq: helloSeq, types: types)
    }

    /// The connection's subscriptions became `types`; `head` is the newest broadcast
    /// delivered on its loop.
    mutating func subscriptionsChanged(to types: TypeSet, head: UInt64) {
        ledger.subscriptionsChanged(to: types, head: head)
    }

    /// The connection was sent its copy of a broadcast its own write caused.
    mutating func ownBroadcastSent(seq: UInt64, typeIndex: Int) {
        ledger.ownBroadcast(seq: seq, typeIndex: typeIndex)
    }

    /// The client sent `resume`, subscribed to `types`. `heldSinceStart` is the live output
    /// held since the greeting (nil when none was); `helloSeq` the seq the greeting named;
    /// `current` the newest seq
    /// broadcast on the session's loop; `released` the newest seq the hub has released to
    /// every loop (at least `current`; every broadcast up to it is already posted to this
    /// loop, ahead of the replay's end).
    mutating func resumeRequested(
        epoch: String,
        after: UInt64,
        types: TypeSet,
        heldSinceStart: HeldOutput?,
        helloSeq: UInt64,
        current: UInt64,
        released: UInt64,
        pageSize: Int
    ) -> StartAction {
        guard case .idle = state else { return .none }
        // Broadcasts held since the greeting stay held, behind the replay: then the replay
        // covers everything up to the greeting's seq and on to `released`; otherwise the client
        // has received live what its subscriptions let through since the greeting, and the
        // replay sends the rest up to `current`.
        let held = heldSinceStart != nil
        let through = held ? max(helloSeq, released) : ledger.lastUnsent(types: types, head: current)
        let plan = Plan(
            epoch: epoch,
            after: after,
            current: current,
            replayThrough: through,
            covered: held ? through : current,
            pageSize: UInt64(max(1, pageSize)),
            types: types,
            sent: held ? nil : ledger
        )
        state = .replaying(plan, held: heldSinceStart ?? HeldOutput())
        return .replay(plan)
    }

    /// Live output to send: held while replaying.
    mutating func hold(_ frame: ByteBuffer, seq: UInt64?, maxBytes: Int, maxFrames: Int) -> HoldResult {
        switch state {
        case .idle:
            return .notHeld
        case .replaying(let plan, var held):
            state = .abandoned  // so that `held` is the only reference and appending does not copy
            let over = held.append(frame, seq: seq, maxBytes: maxBytes, maxFrames: maxFrames)
            state = .replaying(plan, held: held)
            return over ? .heldOverBound : .held
        case .abandoned:
            return .held
        }
    }

    /// A page of replayed frames is ready to write.
    func pageRead() -> PageAction {
        if case .replaying = state { return .write }
        return .stop
    }

    /// The session began closing.
    mutating func sessionClosing() {
        if case .replaying = state { state = .abandoned }
    }

    /// The replay ended with `outcome` (after the last page, or early with a gap or a failure).
    mutating func replayEnded(_ outcome: Outcome) -> EndAction {
        switch state {
        case .idle:
            return .none
        case .abandoned:
            state = .idle
            return .answer(release: [])
        case .replaying(let plan, let held):
            state = .idle
            // Live broadcasts the client already had before (seq <= after) or that were just
            // replayed are not sent twice; after a gap, none it will refetch with the state as
            // of the gap's seq (they would take its seq backwards).
            var skipThrough: UInt64 = 0
            switch outcome {
            case .resumed(let from, _):
                skipThrough = max(from - 1, plan.replayThrough)
                ledger.replayed(after: plan.after, through: plan.replayThrough, types: plan.types)
            case .gap(let current):
                skipThrough = current
            case .failed:
                break
            }
            liveFloor = max(liveFloor, skipThrough)
            return .answer(release: held.frames(after: skipThrough))
        }
    }
}
