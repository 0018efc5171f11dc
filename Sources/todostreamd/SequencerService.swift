import EventStream
import ServiceLifecycle
import TodoApp

/// Runs the sequencer for as long as the daemon serves. First in the service group, so it is
/// told to stop last: once the relay has drained, it runs what is still queued and returns.
struct SequencerService: Service {
    let sequencer: Sequencer<Event>

    func run() async throws {
        let sequencer = self.sequencer
        await withGracefulShutdownHandler {
            await sequencer.run()
        } onGracefulShutdown: {
            sequencer.stop()
        }
    }
}
