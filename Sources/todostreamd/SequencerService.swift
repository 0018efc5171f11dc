import EventStream
import ServiceLifecycle
import TodoApp
import TodoStore

/// Runs the sequencer for as long as the daemon serves. First in the service group, so it is
/// told to stop last: once the relay has drained, it runs what is still queued and returns.
///
/// The sequencer runs on a thread of its own (`StoreThread`), the one the SQLite store runs
/// and commits on: a batch is run, committed and handed to the event loops without crossing
/// a thread in between.
struct SequencerService: Service {
    let sequencer: Sequencer<Event>
    let thread: StoreThread

    func run() async throws {
        let host = SequencerHost(thread: thread)
        let sequencer = self.sequencer
        await withGracefulShutdownHandler {
            // Preferring the thread as task executor too: when a request wakes the sequencer,
            // it resumes on its thread directly, not first on the global pool.
            await withTaskExecutorPreference(thread.tasks) {
                await host.run(sequencer)
            }
        } onGracefulShutdown: {
            sequencer.stop()
        }
    }
}

/// An actor whose executor is the sequencer's thread: what it awaits
/// (`nonisolated(nonsending)`) stays on that thread.
actor SequencerHost {
    private let thread: StoreThread

    init(thread: StoreThread) { self.thread = thread }

    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    func run(_ sequencer: Sequencer<Event>) async {
        await sequencer.run()
    }
}
