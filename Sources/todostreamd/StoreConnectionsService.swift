import ServiceLifecycle
import TodoStore

/// Runs the store's connections (PostgreSQL's pool: `PostgresClient.run()`) for as long as the
/// daemon serves. First in the service group, so it stops last, once the store has closed.
/// For an engine with nothing to run it only waits for the shutdown.
struct StoreConnectionsService: Service {
    let store: any ServedStore

    func run() async throws {
        await cancelWhenGracefulShutdown { await store.runConnections() }
        try? await gracefulShutdown()
    }
}
