import EventStream
import NIOCore
import ServiceLifecycle
import TodoApp

/// Runs the sequencer for as long as the daemon serves. First in the service group, so it is
/// told to stop last: once the relay has drained, it runs what is still queued and returns.
///
/// The sequencer runs on one event loop (`SequencerHost`), the same loop the SQLite store
/// runs on and its database calls complete on: a batch then hops between threads only to
/// the database's thread pool and back.
struct SequencerService: Service {
    let sequencer: Sequencer<Event>
    let loop: any EventLoop

    func run() async throws {
        let host = SequencerHost(loop: loop)
        let sequencer = self.sequencer
        await withGracefulShutdownHandler {
            await host.run(sequencer)
        } onGracefulShutdown: {
            sequencer.stop()
        }
    }
}

/// An actor whose executor is an event loop: what it awaits (`nonisolated(nonsending)`)
/// stays on that loop's thread.
actor SequencerHost {
    private let loop: any EventLoop

    init(loop: any EventLoop) { self.loop = loop }

    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.executor.asUnownedSerialExecutor() }

    func run(_ sequencer: Sequencer<Event>) async {
        await sequencer.run()
    }
}
