/// When the SQLite store checkpoints its WAL, as values: `SQLiteBackend` tells it what happened
/// (a commit, the end of a background copy, the store closing) and executes what it returns.
/// It does no I/O and keeps no clock.
///
/// The WAL starts over from its beginning (writing over the file's blocks, not appending to it)
/// only when a commit begins with every frame already copied into the database file. Under a
/// steady load a copy that runs beside the commits always ends with newer frames behind it, so:
/// - **The copy**, every `copyEvery` commits: a passive checkpoint on a connection of its own,
///   beside the commits. It copies the frames that were in the WAL when it started.
/// - **Catching up**: once the WAL holds `restartFrames` or more, a copy that left frames behind
///   runs again at once, up to `maxPasses` times in a row. Each pass has less to copy than the
///   one before, and one that ends between two commits lets the next commit start the WAL over.
///   Nothing waits for these passes.
/// - **The tail**, only when the WAL has reached `tailFrames` all the same after the passes: the
///   writer itself, on the store's thread and before its next commit, copies what is left. That
///   commit waits for it, which is why it is the last resort: it keeps the file bounded.
/// - **The limit**: copies that each catch up with the WAL as it was when they ended do not
///   start it over when a commit was under way meanwhile (the next commit finds that one's
///   frames not yet copied), which under a steady load is most of the time; the WAL then
///   starts over only when a copy happens to end between two commits. Once it holds
///   `limitFrames` all the same, the writer copies the tail before its next commit, so the file
///   has a bound that does not depend on luck.
///
/// Without these, the WAL never restarted under a steady load: the file grew without bound
/// (hundreds of MiB in minutes), and each commit appended to it, paying for new blocks.
struct CheckpointStateMachine: Sendable {
    enum CommitAction: Hashable, Sendable {
        case none
        /// Start a copy on the checkpointing connection.
        case startCopy
    }

    enum CopyEndAction: Hashable, Sendable {
        case none
        /// Run the copy again at once.
        case copyAgain
    }

    enum BeforeCommitAction: Hashable, Sendable {
        case none
        /// Copy the tail on the writer before this commit begins.
        case copyTail
    }

    /// Where a copy left the WAL: its size in frames as the writer has it at the copy's end,
    /// and how many frames are in the database file.
    struct CopyResult: Hashable, Sendable {
        var walFrames: Int
        var copied: Int
    }

    private enum State: Hashable {
        /// No checkpoint under way; commits since the last copy started.
        case idle(commitsSince: Int)
        /// A copy runs beside the commits: pass 1, 2, … of this round.
        case copying(commitsSince: Int, pass: Int)
        /// The WAL is over `tailFrames`: the writer copies the tail next.
        case tailDue(commitsSince: Int)
        case closed
    }

    let copyEvery: Int
    let restartFrames: Int
    let tailFrames: Int
    let limitFrames: Int
    let maxPasses: Int
    private var state = State.idle(commitsSince: 0)

    /// - Parameters:
    ///   - copyEvery: commits between the starts of two copies.
    ///   - restartFrames: the WAL's size in frames from which copies try to catch up.
    ///   - tailFrames: the WAL's size in frames from which the writer copies the tail after
    ///     passes that did not catch up.
    ///   - limitFrames: the WAL's size in frames from which the writer copies the tail whatever
    ///     the copies did.
    ///   - maxPasses: copies in a row at most, when catching up.
    init(copyEvery: Int, restartFrames: Int, tailFrames: Int, limitFrames: Int, maxPasses: Int) {
        self.copyEvery = max(1, copyEvery)
        self.restartFrames = max(1, restartFrames)
        self.tailFrames = max(self.restartFrames, tailFrames)
        self.limitFrames = max(self.tailFrames, limitFrames)
        self.maxPasses = max(1, maxPasses)
    }

    /// A commit is about to begin on the writer.
    mutating func beforeCommit() -> BeforeCommitAction {
        guard case .tailDue(let commits) = state else { return .none }
        state = .idle(commitsSince: commits)
        return .copyTail
    }

    /// A commit has been stored; the WAL holds `walFrames` frames now.
    mutating func committed(walFrames: Int) -> CommitAction {
        switch state {
        case .closed:
            return .none
        case .copying(let commits, let pass):
            state = .copying(commitsSince: commits + 1, pass: pass)
            return .none
        case .tailDue(let commits):
            state = .tailDue(commitsSince: commits + 1)
            return .none
        case .idle(let commits) where walFrames >= limitFrames:
            // The copies caught up, but the WAL did not start over: a commit was under way
            // when each one ended, so the next commit found frames not yet copied.
            state = .tailDue(commitsSince: commits + 1)
            return .none
        case .idle(let commits) where commits + 1 < copyEvery:
            state = .idle(commitsSince: commits + 1)
            return .none
        case .idle:
            state = .copying(commitsSince: 0, pass: 1)
            return .startCopy
        }
    }

    /// A copy has ended; `result` is nil when it failed.
    mutating func copyEnded(_ result: CopyResult?) -> CopyEndAction {
        guard case .copying(let commits, let pass) = state else { return .none }
        guard let result, result.copied < result.walFrames, result.walFrames >= restartFrames else {
            // Failed, caught up (the next commit starts the WAL over), or still small.
            state = .idle(commitsSince: commits)
            return .none
        }
        if pass < maxPasses {
            state = .copying(commitsSince: commits, pass: pass + 1)
            return .copyAgain
        }
        state = result.walFrames >= tailFrames ? .tailDue(commitsSince: commits) : .idle(commitsSince: commits)
        return .none
    }

    /// The store is closing: no more checkpoints start.
    mutating func close() {
        state = .closed
    }

    /// Whether a copy is under way.
    var isCopying: Bool {
        if case .copying = state { return true }
        return false
    }
}
