/// Whether the store's thread stays awake for more work before it sleeps, as values: the thread
/// (`StoreThread`) tells it how its last spin or sleep ended and does what it returns. It does
/// no I/O and keeps no clock; the thread measures the sleeps.
///
/// A spin pays when work comes within it: one client saving edits sends its next request about
/// 0.15 ms after its answer, and a spin catches it with no wake-up through the kernel. It is pure
/// cost when work comes later: at 200 publishes a second the thread spun its whole spin after
/// every publish, 8 % of a core taken from loops that had none to spare. So the thread spins
/// while spins find work, stops after one that does not, and starts again only once a sleep has
/// shown that work came within the spin after all.
struct SpinStateMachine: Sendable {
    enum IdleAction: Hashable, Sendable {
        /// Stay awake for up to `spin` before sleeping.
        case spin(Duration)
        /// Sleep at once.
        case sleep
    }

    private enum State: Hashable {
        /// The last spin found work (or none has run yet): spin when idle.
        case spinning
        /// The last spin found none, and no sleep since has been shorter than a spin.
        case sleeping
        /// No spin at all (`spin` is zero).
        case off
    }

    let spin: Duration
    private var state: State

    init(spin: Duration) {
        self.spin = spin
        state = spin > .zero ? .spinning : .off
    }

    /// The thread has run everything queued and nothing more is there.
    func idle() -> IdleAction {
        switch state {
        case .spinning: .spin(spin)
        case .sleeping, .off: .sleep
        }
    }

    /// A spin has ended: with work found, or at its deadline with none.
    mutating func spinEnded(foundWork: Bool) {
        guard case .spinning = state, !foundWork else { return }
        state = .sleeping
    }

    /// The thread slept for `slept` (from going to sleep to being woken with work) without
    /// spinning first.
    mutating func woke(after slept: Duration) {
        guard case .sleeping = state, slept <= spin else { return }
        state = .spinning
    }

    /// Whether the thread spins when it is next idle.
    var spins: Bool { state == .spinning }

    /// Whether a sleep that `idle` chose is to be timed for `woke(after:)`: only while
    /// stopped, when how soon work comes decides whether to spin again.
    var timesSleeps: Bool { state == .sleeping }
}
