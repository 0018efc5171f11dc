import EventStream
import Foundation
import NIOCore
import NIOPosix
import Testing
import TodoApp

@testable import TodostreamClient

/// A daemon played by the test over real sockets (NDJSON on 127.0.0.1, port 0): the test
/// accepts each connection and says what is sent on it, and reads what the client sends.
/// Connections the test does not accept are closed when it ends.
struct FakeDaemon {
    struct Closed: Error {}

    /// A connection as it was accepted: its channel and the frames read from it.
    struct Accepted: Sendable {
        let channel: any Channel
        let frames: AsyncStream<InboundFrame>
    }

    let port: Int
    private var accepted: AsyncStream<Accepted>.Iterator

    /// Runs `body` with a listening daemon; it stops listening when `body` returns.
    static func with(_ body: (inout FakeDaemon) async throws -> Void) async throws {
        let (accepted, acceptedSink) = AsyncStream.makeStream(of: Accepted.self)
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let (frames, sink) = AsyncStream.makeStream(of: InboundFrame.self)
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addHandler(ByteToMessageHandler(LineFrameDecoder(maxLineBytes: 1 << 26)))
                    try pipeline.addHandler(LineFrameEncoder())
                    try pipeline.addHandler(Collector(sink: sink))
                    acceptedSink.yield(Accepted(channel: channel, frames: frames))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        var daemon = FakeDaemon(port: try #require(server.localAddress?.port), accepted: accepted.makeAsyncIterator())
        var failure: (any Error)?
        do {
            try await body(&daemon)
        } catch {
            failure = error
        }
        try? await server.close()
        acceptedSink.finish()
        while let left = await daemon.accepted.next() { try? await left.channel.close() }
        if let failure { throw failure }
    }

    /// The client's next connection, for as long as `body` runs; then it is closed.
    mutating func accept<T>(_ body: (inout Peer) async throws -> T) async throws -> T {
        guard let connection = await accepted.next() else { throw Closed() }
        var peer = Peer(channel: connection.channel, lines: connection.frames.makeAsyncIterator())
        do {
            let result = try await body(&peer)
            try? await connection.channel.close()
            return result
        } catch {
            try? await connection.channel.close()
            throw error
        }
    }

    /// Passes each frame read on to the test.
    private final class Collector: ChannelInboundHandler {
        typealias InboundIn = InboundFrame

        let sink: AsyncStream<InboundFrame>.Continuation

        init(sink: AsyncStream<InboundFrame>.Continuation) {
            self.sink = sink
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            sink.yield(unwrapInboundIn(data))
        }

        func channelInactive(context: ChannelHandlerContext) {
            sink.finish()
            context.fireChannelInactive()
        }
    }

    /// One connection of the client.
    struct Peer {
        let channel: any Channel
        var lines: AsyncStream<InboundFrame>.Iterator

        func send(_ line: String) async throws {
            try await channel.writeAndFlush(ByteBuffer(string: line)).get()
        }

        func hello(epoch: String = "e", seq: UInt64) async throws {
            try await send(
                #"{"op":"hello","protocol":1,"server":"fake","session":"s","epoch":"\#(epoch)","seq":\#(seq),"#
                    + #""auth":"none","subscriptions":["Response*"],"features":["mid"]}"#
            )
        }

        /// A broadcast of a todo titled `"todo <seq>"`, as the daemon writes one.
        func broadcast(seq: UInt64, re: String? = nil) async throws {
            try await send(broadcastFrame(seq: seq, re: re))
        }

        /// The next frame from the client.
        mutating func receive() async throws -> ClientFrame {
            guard case .frame(let buffer) = await lines.next() else { throw Closed() }
            return try JSONDecoder().decode(ClientFrame.self, from: Data(buffer.readableBytesView))
        }
    }
}

/// What a test reads of a client's frame.
struct ClientFrame: Decodable, Sendable, Hashable {
    let op: String?
    let type: String?
    let id: String?
    let mid: String?
    let epoch: String?
    let after: UInt64?
    let token: String?
}

/// A `ResponseTodoViewModel` broadcast of a todo titled `"todo <seq>"`.
func broadcastFrame(seq: UInt64, re: String? = nil) -> String {
    let todo = TodoViewModel(todo: testTodo(title: "todo \(seq)", createdAt: 1_000))
    return frameText(seq: seq, type: "ResponseTodoViewModel", re: re, body: .responseTodoViewModel(.success(todo)))
}

/// The answer to a list request `re`: `count` todos with long titles.
func listReplyFrame(re: String, count: Int) -> String {
    let rows = (0..<count).map { index in
        TodoViewModel(todo: testTodo(title: String(repeating: "t", count: 100), createdAt: 1_000 + Int64(index)))
    }
    return frameText(seq: nil, type: "ResponseTodoViewModels", re: re, body: .responseTodoViewModels(.success(rows)))
}

/// A stored todo, fresh but for its title and creation time.
private func testTodo(title: String, createdAt: Int64) -> Todo {
    Todo(
        id: UUID(),
        createdAt: Timestamp(millisecondsSince1970: createdAt),
        title: title,
        subtitle: "",
        priority: .normal,
        completedAt: nil,
        version: 1
    )
}

/// A daemon frame as the daemon writes it: its envelope, then the payload of `body`.
private func frameText(seq: UInt64?, type: String, re: String?, body: TodoWireCodec.Event) -> String {
    var writer = JSONWriter()
    writer.beginObject()
    if let seq { writer.field("seq", seq) }
    writer.field("type", type)
    if let re { writer.field("re", re) }
    writer.key("payload")
    writer.raw(TodoWireCodec().encodeBody(body).payloadBytes ?? [])
    writer.endObject()
    return String(decoding: writer.bytes, as: UTF8.self)
}

/// A configuration for a client of a `FakeDaemon`: quick reconnects.
func fakeConfiguration(port: Int, token: String? = nil) throws -> ClientConfiguration {
    ClientConfiguration(
        endpoint: ClientEndpoint(transport: .tcp, host: "127.0.0.1", port: port),
        token: token,
        backoff: Backoff(initial: .milliseconds(1), maximum: .milliseconds(5)),
        connectTimeout: .seconds(5),
        requestTimeout: .seconds(30)
    )
}

/// Runs a client for the duration of `body`, which reads its events; closes it after.
func withClient(
    _ configuration: ClientConfiguration,
    _ body: (TodostreamClient, inout AsyncStream<ClientEvent>.Iterator) async throws -> Void
) async throws {
    let client = try TodostreamClient(configuration)
    var events = client.events.makeAsyncIterator()
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await client.run() }
        do {
            try await body(client, &events)
        } catch {
            await client.close()
            throw error
        }
        await client.close()
        try await group.waitForAll()
    }
}

extension AsyncStream<ClientEvent>.Iterator {
    /// The seqs of the broadcasts passed on before the next event that is not one.
    mutating func broadcastSeqs(until last: inout ClientEvent?) async -> [UInt64] {
        var seqs: [UInt64] = []
        while let event = await next() {
            guard case .event(_, let seq?) = event else {
                last = event
                return seqs
            }
            seqs.append(seq)
        }
        last = nil
        return seqs
    }
}

/// Waits until `condition` holds, checking it again whenever other tasks have run (never by
/// sleeping); the test's time limit bounds it.
func until(_ condition: () async -> Bool) async throws {
    while await !condition() {
        try Task.checkCancellation()
        await Task.yield()
    }
}
