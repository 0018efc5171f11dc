import CompressNIO
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@testable import Relay
@testable import todostreamd

/// permessage-deflate (RFC 7692) over raw frames; the compressed side of the test is zlib
/// driven directly, not the daemon's codec.
@Suite(.timeLimit(.minutes(2))) struct WebSocketDeflateTests {
    static let offer = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"

    /// A message compressed as a client sends it: raw deflate, sync flush, tail dropped.
    static func compress(_ text: String) throws -> [UInt8] { try compress(bytes: Array(text.utf8)) }

    static func compress(bytes: [UInt8]) throws -> [UInt8] {
        let compressor = try ZlibCompressor(algorithm: .deflate)
        var input = ByteBuffer(bytes: bytes)
        var output = try input.compressStream(with: compressor, flush: .sync)
        output.moveWriterIndex(to: output.writerIndex - 4)
        return Array(output.readableBytesView)
    }

    static func inflate(_ payload: [UInt8]) throws -> String {
        let decompressor = try ZlibDecompressor(algorithm: .deflate)
        var input = ByteBuffer(bytes: payload + [0x00, 0x00, 0xFF, 0xFF])
        let output = try input.decompressStream(with: decompressor)
        return String(buffer: output)
    }

    @Test func offeredDeflateIsAcceptedAndCarriesBothWays() async throws {
        try await withDaemon { daemon in
            let (socket, status) = try await RawWebSocket.open(port: daemon.httpPort, headers: [Self.offer])
            let ws = try #require(socket, "upgrade refused: \(status)")
            #expect(status.lowercased().contains("sec-websocket-extensions: permessage-deflate"))
            #expect(status.contains("server_no_context_takeover"))
            #expect(status.contains("client_no_context_takeover"))
            // The hello is short: it goes out uncompressed.
            let hello = try await ws.receiveFrame()
            #expect(!hello.rsv1)
            let (tcp, _) = try await daemon.client()
            for index in 0..<12 { _ = try await tcp.createTodo("todo number \(index) with a title long enough") }
            // Skip the twelve broadcasts, then ask for the list with a compressed request.
            for _ in 0..<12 { _ = try await ws.receiveFrame() }
            try await ws.send(
                opcode: 0x1,
                try Self.compress(#"{"type":"RequestTodoViewModels","id":"list"}"#),
                rsv: 0x40
            )
            let list = try await ws.receiveFrame()
            #expect(list.rsv1, "a reply over compress_min_bytes is compressed")
            let text = try Self.inflate(list.payload)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
            #expect(object["re"] as? String == "list")
            #expect((object["payload"] as? [Any])?.count == 12)
            // Without the offer, nothing is compressed and RSV1 from the client is a violation.
            let (plain, plainStatus) = try await RawWebSocket.open(port: daemon.httpPort)
            let uncompressed = try #require(plain)
            #expect(!plainStatus.lowercased().contains("permessage-deflate"))
            _ = try await uncompressed.receiveFrame()
            try await uncompressed.send(opcode: 0x1, try Self.compress("{}"), rsv: 0x40)
            #expect(try await uncompressed.receiveClose() == 1002)
        }
    }

    @Test func aCompressedBombIsTooLargeAndGarbageCloses1007() async throws {
        try await withDaemon(.custom({ $0.relay.maxFrameBytes = 4096 })) { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort, headers: [Self.offer]).0)
            _ = try await ws.receiveFrame()
            // 1 MB of spaces compresses to about a kilobyte but must never be inflated whole.
            let bomb = try Self.compress(String(repeating: " ", count: 1_000_000) + "{}")
            #expect(bomb.count < 4096)
            try await ws.send(opcode: 0x1, bomb, rsv: 0x40)
            #expect(errorCode(try await ws.receiveJSON()) == "frame_too_large")
            // The connection is still usable.
            try await ws.send(opcode: 0x1, try Self.compress(#"{"op":"ping","id":"after"}"#), rsv: 0x40)
            #expect(try await ws.receiveJSON()["re"] as? String == "after")
            // RSV1 on a continuation frame is a protocol violation…
            try await ws.send(opcode: 0x1, Array("{".utf8), fin: false)
            try await ws.send(opcode: 0x0, Array("}".utf8), rsv: 0x40)
            #expect(try await ws.receiveClose() == 1002)
        }
        try await withDaemon { daemon in
            // …and bytes that are not a deflate stream close with 1007.
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort, headers: [Self.offer]).0)
            _ = try await ws.receiveFrame()
            try await ws.send(opcode: 0x1, [0xFF, 0xFF, 0xFF, 0xFF, 0x13, 0x37], rsv: 0x40)
            #expect(try await ws.receiveClose() == 1007)
        }
    }

    /// A compressed message is as large as its inflated bytes: over the hard cap it closes
    /// 1009 as an uncompressed one would, however small it is on the wire; inflated only as far
    /// as the cap.
    @Test func aCompressedMessageOverTheHardCapCloses1009() async throws {
        try await withDaemon(.custom({ $0.relay.webSocketHardCapBytes = 100_000 })) { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort, headers: [Self.offer]).0)
            _ = try await ws.receiveFrame()
            // Over max_frame_bytes, under the cap: frame_too_large, the connection kept.
            try await ws.send(opcode: 0x1, try Self.compress(String(repeating: " ", count: 99_000) + "{}"), rsv: 0x40)
            #expect(errorCode(try await ws.receiveJSON()) == "frame_too_large")
            // Over the cap (10 MB inflated, a few KB sent): 1009.
            let bomb = try Self.compress(String(repeating: " ", count: 10_000_000) + "{}")
            #expect(bomb.count < 100_000)
            try await ws.send(opcode: 0x1, bomb, rsv: 0x40)
            #expect(try await ws.receiveClose() == 1009)
        }
    }

    /// A compressed message over `max_frame_bytes` on the wire is still inflated as far as the
    /// hard cap: over it 1009, not a deflate stream or not UTF-8 1007, else frame_too_large
    /// (it was answered frame_too_large unread, whatever it held).
    @Test(arguments: [
        ("inflates past the cap", 1009), ("not deflate data", 1007), ("not UTF-8", 1007), ("text", 0),
    ])
    func aCompressedMessageLargeOnTheWireIsStillJudgedByWhatItHolds(_ name: String, _ expected: Int) async throws {
        try await withDaemon(.custom({ $0.relay.webSocketHardCapBytes = 200_000 })) { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort, headers: [Self.offer]).0)
            _ = try await ws.receiveFrame()
            // Text that deflate hardly shrinks: more than max_frame_bytes (64 KiB) on the wire.
            var generator = SystemRandomNumberGenerator()
            let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)
            func noise(_ count: Int) -> [UInt8] {
                (0..<count).map { _ in letters.randomElement(using: &generator) ?? 0x61 }
            }
            let payload: [UInt8]
            switch name {
            case "inflates past the cap": payload = try Self.compress(bytes: noise(260_000))
            case "not deflate data": payload = [0xFF] + noise(80_000)
            case "not UTF-8": payload = try Self.compress(bytes: noise(90_000) + [0xFF] + noise(10))
            default: payload = try Self.compress(bytes: noise(100_000))
            }
            #expect(payload.count > 66_000 && payload.count < 200_000, "\(payload.count)")
            try await ws.send(opcode: 0x1, payload, rsv: 0x40)
            if expected == 0 {
                #expect(errorCode(try await ws.receiveJSON()) == "frame_too_large")
                try await ws.send(opcode: 0x1, Array(#"{"op":"ping","id":"after"}"#.utf8))
                #expect(try await ws.receiveJSON()["re"] as? String == "after")
            } else {
                #expect(try await ws.receiveClose() == expected)
            }
        }
    }

    @Test func compressionCanBeTurnedOffAndOffersAreCheckedStrictly() async throws {
        try await withDaemon(.custom({ $0.relay.webSocketCompression = false })) { daemon in
            let (_, status) = try await RawWebSocket.open(port: daemon.httpPort, headers: [Self.offer])
            #expect(status.contains(" 101 "))
            #expect(!status.lowercased().contains("permessage-deflate"))
        }
        func negotiated(_ header: String) -> PerMessageDeflate? {
            var headers = HTTPHeaders()
            headers.add(name: "Sec-WebSocket-Extensions", value: header)
            return PerMessageDeflate.negotiate(headers)
        }
        #expect(negotiated("permessage-deflate")?.serverWindowBits == 15)
        #expect(negotiated("permessage-deflate; server_max_window_bits=10")?.serverWindowBits == 10)
        #expect(negotiated("permessage-deflate; server_max_window_bits=8") == nil)
        #expect(negotiated("permessage-deflate; unknown_parameter") == nil)
        #expect(negotiated("permessage-deflate; server_no_context_takeover; server_no_context_takeover") == nil)
        #expect(negotiated("x-webkit-deflate-frame") == nil)
        // A later acceptable offer is taken when the first is not.
        #expect(negotiated("permessage-deflate; server_max_window_bits=8, permessage-deflate")?.serverWindowBits == 15)
    }
}
