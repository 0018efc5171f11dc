import ServiceLifecycle
import TodoStore

/// Closes the store once everything that uses it has stopped. Placed after the store's
/// connections and before the journal follower and the sequencer in the service group, so it
/// is told to stop after them: the sequencer has run what was queued, and nothing else will
/// ask the store for anything.
///
/// Closes the store exactly once, also when the group is cancelled instead (a service failed).
struct StoreService: Service {
    let store: any ServedStore

    func run() async throws {
        // Returns on graceful shutdown, throws on cancellation: either way the store closes.
        try? await gracefulShutdown()
        await store.close()
    }
}
