import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import Testing

/// A raw client connection for tests: collects every byte the daemon sends, and lets a test
/// wait (with a timeout, never a sleep) for a line or a number of bytes.
final class TestConnection: Sendable {
    let channel: any Channel
    private let inbox: Inbox

    struct Timeout: Error, CustomStringConvertible {
        let what: String
        var description: String { "timed out waiting for \(what)" }
    }

    struct Closed: Error {}

    private init(channel: any Channel, inbox: Inbox) {
        self.channel = channel
        self.inbox = inbox
    }

    static func connect(
        port: Int,
        host: String = "127.0.0.1",
        receiveBuffer: Int? = nil,
        autoRead: Bool = true,
        extraHandlers: @escaping @Sendable (any Channel) throws -> Void = { _ in }
    ) async throws -> TestConnection {
        let inbox = Inbox()
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.autoRead, value: autoRead)
        if let receiveBuffer {
            bootstrap = bootstrap.channelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(receiveBuffer))
        }
        let channel = try await bootstrap.channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try extraHandlers(channel)
                try channel.pipeline.syncOperations.addHandler(InboxHandler(inbox: inbox))
            }
        }
        .connect(host: host, port: port).get()
        return TestConnection(channel: channel, inbox: inbox)
    }

    func send(_ text: String) async throws {
        try await channel.writeAndFlush(ByteBuffer(string: text)).get()
    }

    func sendLine(_ text: String) async throws { try await send(text + "\n") }

    /// Hands `text` to the channel without waiting for the daemon to take it (it may read
    /// none of it for a while).
    func post(_ text: String) {
        channel.writeAndFlush(ByteBuffer(string: text), promise: nil)
    }

    func send(_ object: [String: Any]) async throws {
        let data = try JSONSerialization.data(withJSONObject: object)
        try await sendLine(String(decoding: data, as: UTF8.self))
    }

    func sendBytes(_ bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(ByteBuffer(bytes: bytes)).get()
    }

    /// The next line, without its newline.
    func line(timeout: TimeAmount = .seconds(10)) async throws -> String {
        let bytes = try await inbox.take(timeout: timeout, on: channel.eventLoop) { buffer in
            guard let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
            return newline + 1
        }
        return String(decoding: bytes.dropLast(), as: UTF8.self)
    }

    /// The next line, parsed as a JSON object.
    func json(timeout: TimeAmount = .seconds(10)) async throws -> [String: Any] {
        let text = try await line(timeout: timeout)
        guard let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
            throw Timeout(what: "a JSON object, got \(text)")
        }
        return object
    }

    /// Reads frames until one satisfies `match`; returns it and everything skipped before it.
    func json(
        until match: ([String: Any]) -> Bool,
        timeout: TimeAmount = .seconds(10)
    ) async throws -> (
        [String: Any], skipped: [[String: Any]]
    ) {
        var skipped: [[String: Any]] = []
        while true {
            let object = try await json(timeout: timeout)
            if match(object) { return (object, skipped) }
            skipped.append(object)
        }
    }

    func bytes(_ count: Int, timeout: TimeAmount = .seconds(10)) async throws -> [UInt8] {
        try await inbox.take(timeout: timeout, on: channel.eventLoop) { buffer in buffer.count >= count ? count : nil }
    }

    func bytes(through separator: [UInt8], timeout: TimeAmount = .seconds(10)) async throws -> [UInt8] {
        try await inbox.take(timeout: timeout, on: channel.eventLoop) { buffer in
            guard buffer.count >= separator.count else { return nil }
            for start in 0...(buffer.count - separator.count)
            where Array(buffer[start..<(start + separator.count)]) == separator {
                return start + separator.count
            }
            return nil
        }
    }

    /// Waits until the daemon closes the connection; returns what was left unread.
    func waitForClose(timeout: TimeAmount = .seconds(10)) async throws -> [UInt8] {
        try await inbox.waitForClose(timeout: timeout, on: channel.eventLoop)
    }

    /// From now on the connection reads only when `trickle` asks: 1 KiB at a time.
    func readSlowly() async throws {
        try await channel.setOption(.autoRead, value: false).get()
        try await channel.setOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 1024)).get()
        try await channel.setOption(.maxMessagesPerRead, value: 1).get()
    }

    /// Reads 1 KiB every 50 ms (about 20 KB/s: a reader, but a slow one) until the returned
    /// task is cancelled or the connection closes. The reads are scheduled on the connection's
    /// own event loop, not on Swift's cooperative pool: tests running beside this one can hold
    /// that pool's threads for longer than a grace period, and a reader whose reads stall for
    /// that long is rightly closed as one that takes nothing (the stream then ends mid-frame).
    func trickle(every pause: TimeAmount = .milliseconds(50)) -> RepeatedTask {
        let channel = self.channel
        return channel.eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: pause) { task in
            guard channel.isActive else { return task.cancel() }
            channel.read()
        }
    }

    func startReading() {
        channel.setOption(.autoRead, value: true).whenSuccess { [channel] in channel.read() }
    }

    func close() async {
        try? await channel.close()
    }
}

/// Bytes received so far, and at most one waiter.
final class Inbox: Sendable {
    private struct State {
        var buffer: [UInt8] = []
        var closed = false
        var waiter: (@Sendable () -> Void)?
    }

    private let state = NIOLockedValueBox(State())

    func append(_ bytes: [UInt8]) {
        let waiter = state.withLockedValue { state -> (@Sendable () -> Void)? in
            state.buffer += bytes
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?()
    }

    func close() {
        let waiter = state.withLockedValue { state -> (@Sendable () -> Void)? in
            state.closed = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?()
    }

    /// Takes a prefix of the buffer once `length` returns its size.
    func take(
        timeout: TimeAmount,
        on loop: any EventLoop,
        length: @escaping @Sendable ([UInt8]) -> Int?
    ) async throws -> [UInt8] {
        let deadline = NIODeadline.now() + timeout
        while true {
            let wake = Wake(loop: loop)
            enum Step {
                case done([UInt8])
                case closed
                case wait
            }
            // Checking and registering the waiter under one lock: nothing can slip in between.
            let step = state.withLockedValue { state -> Step in
                if let count = length(state.buffer) {
                    let taken = Array(state.buffer.prefix(count))
                    state.buffer.removeFirst(count)
                    return .done(taken)
                }
                if state.closed { return .closed }
                state.waiter = { wake.fire() }
                return .wait
            }
            switch step {
            case .done(let bytes):
                wake.fire()
                return bytes
            case .closed:
                wake.fire()
                throw TestConnection.Closed()
            case .wait: try await wake.wait(until: deadline)
            }
        }
    }

    func waitForClose(timeout: TimeAmount, on loop: any EventLoop) async throws -> [UInt8] {
        let deadline = NIODeadline.now() + timeout
        while true {
            let wake = Wake(loop: loop)
            let done = state.withLockedValue { state -> [UInt8]? in
                if state.closed { return state.buffer }
                state.waiter = { wake.fire() }
                return nil
            }
            if let done {
                wake.fire()
                return done
            }
            try await wake.wait(until: deadline)
        }
    }
}

/// A one-shot wake-up with a deadline.
final class Wake: Sendable {
    private let promise: EventLoopPromise<Bool>
    private let fired = NIOLockedValueBox(false)
    private let loop: any EventLoop

    init(loop: any EventLoop) {
        self.loop = loop
        self.promise = loop.makePromise(of: Bool.self)
    }

    func fire(timedOut: Bool = false) {
        let first = fired.withLockedValue { fired -> Bool in
            defer { fired = true }
            return !fired
        }
        if first { promise.succeed(timedOut) }
    }

    func wait(until deadline: NIODeadline) async throws {
        let timer = loop.scheduleTask(deadline: deadline) { self.fire(timedOut: true) }
        let timedOut = try await promise.futureResult.get()
        timer.cancel()
        if timedOut { throw TestConnection.Timeout(what: "data from the daemon") }
    }
}

private final class InboxHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let inbox: Inbox
    init(inbox: Inbox) { self.inbox = inbox }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        inbox.append(Array(buffer.readableBytesView))
    }

    func channelInactive(context: ChannelHandlerContext) {
        inbox.close()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        print("TEST CONNECTION ERROR: \(error)")
        context.close(promise: nil)
    }
}

extension TestConnection {
    /// A TLS connection that trusts the certificate in the PEM file at `path`.
    static func connectTLS(port: Int, trusting path: String) async throws -> TestConnection {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(path))
        let context = try NIOSSLContext(configuration: configuration)
        return try await connect(port: port) { channel in
            try channel.pipeline.syncOperations.addHandler(
                try NIOSSLClientHandler(context: context, serverHostname: "localhost")
            )
        }
    }
}
