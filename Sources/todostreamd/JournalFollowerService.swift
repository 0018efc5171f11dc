import EventStream
import ServiceLifecycle
import TodoStore

/// Follows the journal that other daemons write (PostgreSQL) and hands their broadcasts to the
/// hub. Stops after the sequencer, as the store's `close` used to stop it. For an engine that
/// only this process writes it only waits for the shutdown.
struct JournalFollowerService: Service {
    let store: any ServedStore
    /// The journal's head the hub starts from.
    let after: UInt64
    let publish: @Sendable ([JournalEntry]) -> Void
    let resynchronized: @Sendable (UInt64) -> Void

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await store.follow(after: after, publish: publish, resynchronized: resynchronized)
        }
        try? await gracefulShutdown()
    }
}
