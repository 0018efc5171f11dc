import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PostgresNIO
import Testing

@testable import TodoStore

/// The pool's lease timeouts (`FailoverPool.withLease`, its watchdog `sweepLeases`) against a
/// server that hangs: one that accepts connections and never answers, and one that completes
/// the start-up and then answers no query. Both run in-process on port 0.
@Suite(.timeLimit(.minutes(1))) struct LeaseTimeoutTests {
    @Test func aLeaseThatGetsNoConnectionFailsWithinItsTimeoutAndRunsNothing() async throws {
        let server = try await HangingServer.start(answersStartUp: false)
        defer { server.stop() }
        try await withPool(port: server.port, timeout: .milliseconds(200)) { pool in
            let ran = NIOLockedValueBox(false)
            await #expect(throws: DatabaseUnavailable.self) {
                try await unlessItHangs {
                    try await pool.withLease(timeout: .milliseconds(200)) { _ in
                        ran.withLockedValue { $0 = true }
                    }
                }
            }
            #expect(!ran.withLockedValue { $0 }, "a connection that comes after the timeout runs nothing")
        }
    }

    @Test func aLeaseWhoseWorkHangsFailsWithinItsTimeoutAndItsConnectionIsClosed() async throws {
        let server = try await HangingServer.start(answersStartUp: true)
        defer { server.stop() }
        // Time enough to connect on a busy machine; the query then hangs past it.
        try await withPool(port: server.port, timeout: .seconds(3)) { pool in
            let started = NIOLockedValueBox(false)
            await #expect(throws: DatabaseUnavailable.self) {
                try await unlessItHangs {
                    try await pool.withLease(timeout: .seconds(3)) { connection in
                        started.withLockedValue { $0 = true }
                        _ = try await connection.query("SELECT 1", logger: Logger(label: "test"))
                    }
                }
            }
            #expect(started.withLockedValue { $0 }, "the work had started")
            // The connection under the hanging query is closed: the server sees it go.
            try await unlessItHangs { try await server.closed.get() }
        }
    }

    private struct Hung: Error {}

    /// `operation`'s outcome, or `Hung` when it has none after 20 s (a lease whose timeout never
    /// fires would otherwise hang the test run: its caller's cancellation does not end a body
    /// that runs).
    private func unlessItHangs(_ operation: @escaping @Sendable () async throws -> Void) async throws {
        let outcome = NIOLockedValueBox<CheckedContinuation<Void, any Error>?>(nil)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            outcome.withLockedValue { $0 = continuation }
            let finish: @Sendable (Result<Void, any Error>) -> Void = { result in
                outcome.withLockedValue { waiting in
                    waiting?.resume(with: result)
                    waiting = nil
                }
            }
            Task {
                do {
                    try await operation()
                    finish(.success(()))
                } catch {
                    finish(.failure(error))
                }
            }
            Task {
                try? await Task.sleep(for: .seconds(20))
                finish(.failure(Hung()))
            }
        }
    }

    private func withPool(port: Int, timeout: Duration, _ body: (FailoverPool) async throws -> Void) async throws {
        var settings = try PostgresSettings(url: "postgres://todo@127.0.0.1:\(port)/todo?sslmode=disable")
        settings.acquireTimeout = timeout
        settings.poolSize = 1
        let pool = FailoverPool(
            connector: try PostgresConnector(settings: settings),
            server: 0,
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
            logger: Logger(label: "test")
        )
        let running = Task { await pool.run() }
        defer { running.cancel() }
        try await body(pool)
    }
}

/// A TCP server that speaks just enough of PostgreSQL to hang: it never answers, or it answers
/// the start-up (authentication ok, ready for query) and nothing after it. `closed` succeeds
/// when a connection that got through the start-up is closed by the client.
private final class HangingServer: Sendable {
    let port: Int
    var closed: EventLoopFuture<Void> { unclosed.futureResult }
    private let unclosed: EventLoopPromise<Void>
    private let channel: any Channel

    private init(port: Int, closed: EventLoopPromise<Void>, channel: any Channel) {
        self.port = port
        self.unclosed = closed
        self.channel = channel
    }

    static func start(answersStartUp: Bool) async throws -> HangingServer {
        let group = MultiThreadedEventLoopGroup.singleton
        let closed = group.next().makePromise(of: Void.self)
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.addHandler(
                        Handler(answersStartUp: answersStartUp, closed: closed)
                    )
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return HangingServer(port: channel.localAddress?.port ?? 0, closed: closed, channel: channel)
    }

    /// Stops listening; `closed` fails if no connection was closed by then.
    func stop() {
        channel.close(promise: nil)
        unclosed.fail(ChannelError.ioOnClosedChannel)
    }

    private final class Handler: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let answersStartUp: Bool
        let closed: EventLoopPromise<Void>
        private let answered = NIOLockedValueBox(false)

        init(answersStartUp: Bool, closed: EventLoopPromise<Void>) {
            self.answersStartUp = answersStartUp
            self.closed = closed
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard answersStartUp, !answered.withLockedValue({ $0 }) else { return }
            answered.withLockedValue { $0 = true }
            var reply = context.channel.allocator.buffer(capacity: 16)
            reply.writeInteger(UInt8(ascii: "R"))  // AuthenticationOk
            reply.writeInteger(Int32(8))
            reply.writeInteger(Int32(0))
            reply.writeInteger(UInt8(ascii: "K"))  // BackendKeyData
            reply.writeInteger(Int32(12))
            reply.writeInteger(Int32(4242))
            reply.writeInteger(Int32(1))
            reply.writeInteger(UInt8(ascii: "Z"))  // ReadyForQuery, idle
            reply.writeInteger(Int32(5))
            reply.writeInteger(UInt8(ascii: "I"))
            context.writeAndFlush(wrapOutboundOut(reply), promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            if answered.withLockedValue({ $0 }) { closed.succeed() }  // a second success is ignored
            context.fireChannelInactive()
        }
    }
}
