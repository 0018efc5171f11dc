/// When the journal follower reads the journal, and when it can do without, as values:
/// `JournalFollower` tells it what it heard and asks it on each wake-up. It does no I/O and
/// keeps no clock (the caller passes the time).
///
/// A wake-up (a notification, a batch of this process finishing, the periodic timer) reads the
/// journal unless:
/// - the cursor, moved over this process's own committed seqs (`LocalClaims.committed`), has
///   reached the newest head a notification carried: nothing else was committed;
/// - or a batch of this process is being committed: a notification arrives a moment before its
///   commit's answer, so it is likely that batch's own. The read is put off once; that batch's
///   end wakes the follower again, and a second wake-up in that state reads, so another
///   daemon's entries wait for at most one commit of this one.
///
/// When this process's commits bring the journal along (schema step 8: each commit's answer
/// holds the entries before its batch, `commitBrought`), other daemons' entries are put off
/// further, since the next commit brings them: a wake-up while a batch is being committed
/// skips (its end wakes the follower again), and one within `grace` of the last such commit
/// waits until `grace` has passed and asks again (the next batch has usually begun by then).
/// So a daemon that keeps committing reads the journal only every `interval`, and another
/// daemon's entries wait for at most one commit of this one, or `grace` after its last. A
/// commit that brought nothing usable (`commitMissed`) ends this until the next that does.
///
/// Either way the journal is read at least every `interval` (a notification may be lost), and
/// always first on a new connection.
///
/// Whether other daemons' commits notify this follower (schema step 9): it wants them to
/// (holds the listen key) unless this process's commits have brought the journal for
/// `quietAfter` in a row. Then a wake-up during a commit is `.quiet`: the key is released, and
/// committers stop notifying it. Any read (the grace after the last commit has passed, a
/// commit brought nothing usable, the periodic read, a new connection) first takes the key
/// again (`.wantThenRead`), so nothing committed before that read goes unread, and everything
/// after it is notified.
struct CatchUpStateMachine: Sendable {
    enum Action: Hashable, Sendable {
        case read
        /// Take the listen key (notifications resume), then read.
        case wantThenRead
        case skip
        /// Release the listen key: this process's commits bring the journal, so other
        /// daemons' commits need not notify it. Nothing is read.
        case quiet
        /// Ask again at this time.
        case wait(until: ContinuousClock.Instant)
    }

    /// Whether the follower holds the listen key.
    enum Notifications: Hashable, Sendable {
        case wanted
        /// Not held: on a new connection, or released (`.quiet`).
        case quiet
    }

    private enum State: Sendable {
        /// Nothing read on this connection yet.
        case unread
        /// Last read at `lastRead`.
        case reading(lastRead: ContinuousClock.Instant)
        /// Last read at `lastRead`, and a read has been put off for a batch of this process.
        case deferred(lastRead: ContinuousClock.Instant)
    }

    let interval: Duration
    /// How long after a commit that brought the journal a read waits for the next commit.
    let grace: Duration
    private var state = State.unread
    /// The newest head a notification on this connection carried.
    private var notified: UInt64 = 0
    /// When the last commit of this process brought the journal up to its batch; nil when the
    /// last one did not.
    private var brought: ContinuousClock.Instant?
    /// How long this process's commits must have brought the journal, with no read in
    /// between, before the follower stops wanting notifications.
    let quietAfter: Duration
    /// When the commits began to bring the journal without a read since; nil when the last
    /// commit did not, or a read came after.
    private var broughtSince: ContinuousClock.Instant?
    private(set) var notifications = Notifications.quiet

    init(interval: Duration, grace: Duration = .milliseconds(2), quietAfter: Duration? = nil) {
        self.interval = interval
        self.grace = grace
        self.quietAfter = quietAfter ?? grace * 10
    }

    /// A commit of this process brought the journal up to its batch at `now`.
    mutating func commitBrought(at now: ContinuousClock.Instant) {
        brought = now
        if broughtSince == nil { broughtSince = now }
    }

    /// A commit of this process brought nothing usable (or failed): reads go on as usual.
    mutating func commitMissed() {
        brought = nil
        broughtSince = nil
    }

    /// A new connection: read first (taking the listen key, which went with the old
    /// connection), forget what was heard on the old one.
    mutating func connected() {
        state = .unread
        notified = 0
        notifications = .quiet
        broughtSince = nil
    }

    /// Reading now, at `now`: with the listen key taken first when it is not held.
    private mutating func read(at now: ContinuousClock.Instant) -> Action {
        state = .reading(lastRead: now)
        broughtSince = nil
        guard notifications == .quiet else { return .read }
        notifications = .wanted
        return .wantThenRead
    }

    /// A notification carried `head`: whether it wakes the follower. While a batch of this
    /// process is being committed it does not (it is most likely that batch's own): the batch's
    /// end wakes the follower, which then steps over it or reads what another daemon wrote, so
    /// each commit of this process wakes the follower once, not twice.
    @discardableResult
    mutating func heard(head: UInt64?, committing: Bool = false) -> Bool {
        if let head { notified = max(notified, head) }
        return !committing
    }

    /// A wake-up with the cursor at `cursor` (after stepping over this process's own seqs).
    /// `committing` is asked only when it matters.
    mutating func wake(
        cursor: UInt64,
        now: ContinuousClock.Instant,
        committing: () -> Bool
    ) -> Action {
        let lastRead: ContinuousClock.Instant
        let deferred: Bool
        switch state {
        case .unread:
            return read(at: now)
        case .reading(let last):
            (lastRead, deferred) = (last, false)
        case .deferred(let last):
            (lastRead, deferred) = (last, true)
        }
        guard now - lastRead < interval else { return read(at: now) }
        // Commits have brought the journal for a while and one is under way (its end wakes the
        // follower again): other daemons' commits need not notify this one.
        if notifications == .wanted, brought != nil, let since = broughtSince, now - since >= quietAfter,
            committing()
        {
            notifications = .quiet
            return .quiet
        }
        // Nothing was committed past the cursor, as far as notifications tell: they tell only
        // while the follower wants them.
        if notifications == .wanted, notified <= cursor {
            state = .reading(lastRead: lastRead)
            return .skip
        }
        if let brought {
            if committing() { return .skip }
            if now - brought < grace { return .wait(until: brought + grace) }
        }
        if !deferred, committing() {
            state = .deferred(lastRead: lastRead)
            return .skip
        }
        return read(at: now)
    }
}
