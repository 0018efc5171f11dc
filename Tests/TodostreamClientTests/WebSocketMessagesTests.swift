import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

@testable import TodostreamClient

/// The daemon's WebSocket messages as the client reads them, and the protocol errors it
/// closes the connection for (RFC 6455).
@Suite struct WebSocketMessagesTests {
    func text(_ bytes: [UInt8], fin: Bool = true, continuation: Bool = false) -> WebSocketFrame {
        WebSocketFrame(fin: fin, opcode: continuation ? .continuation : .text, data: ByteBuffer(bytes: bytes))
    }

    /// The frames read, as text, and the close code sent, if the connection was closed.
    func read(_ frames: [WebSocketFrame]) throws -> (messages: [String], closed: WebSocketErrorCode?) {
        let channel = EmbeddedChannel(handler: WebSocketMessages(maxMessageBytes: 100))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        for frame in frames where channel.isActive { try channel.writeInbound(frame) }
        var messages: [String] = []
        while let frame = try channel.readInbound(as: InboundFrame.self) {
            if case .frame(let buffer) = frame { messages.append(String(buffer: buffer)) }
        }
        var closed: WebSocketErrorCode?
        while let frame = try channel.readOutbound(as: WebSocketFrame.self) {
            var data = frame.data  // masked by the encoder, after this handler
            if frame.opcode == .connectionClose { closed = data.readWebSocketErrorCode() }
        }
        _ = try? channel.finish()
        return (messages, closed)
    }

    @Test func fragmentsMakeOneMessage() throws {
        let (messages, closed) = try read([
            text(Array(#"{"a":"#.utf8), fin: false), text(Array(#""é"}"#.utf8), continuation: true),
            text(Array("{}\n".utf8)),
        ])
        check(messages, [#"{"a":"é"}"#, "{}"])
        check(closed, nil)
    }

    @Test func aTextFrameInsideAMessageIsAProtocolError() throws {
        let (messages, closed) = try read([text(Array(#"{"a":"#.utf8), fin: false), text(Array("{}".utf8))])
        check(messages, [])
        check(closed, .protocolError)
    }

    @Test func aContinuationOutsideAMessageIsAProtocolError() throws {
        let (messages, closed) = try read([text(Array("{}".utf8), continuation: true)])
        check(messages, [])
        check(closed, .protocolError)
    }

    @Test func aMessageThatIsNotUTF8Closes1007() throws {
        // A lone continuation byte, and an overlong encoding of "/" split across fragments.
        check(try read([text([0x7B, 0x80, 0x7D])]).closed, .dataInconsistentWithMessage)
        let split = try read([text([0x7B, 0xC0], fin: false), text([0xAF, 0x7D], continuation: true)])
        check(split.messages, [])
        check(split.closed, .dataInconsistentWithMessage)
    }
}
