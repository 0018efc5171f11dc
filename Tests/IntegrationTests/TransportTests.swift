import Foundation
import NIOCore
import NIOEmbedded
import NIOSSL
import Relay
import Testing

@testable import Relay
@testable import todostreamd

/// A WebSocket client made of raw RFC 6455 frames over a `TestConnection`.
struct RawWebSocket {
    let connection: TestConnection

    static func open(
        port: Int,
        host: String? = nil,
        origin: String? = nil,
        headers: [String] = [],
        receiveBuffer: Int? = nil
    ) async throws -> (
        RawWebSocket?, status: String
    ) {
        let connection = try await TestConnection.connect(port: port, receiveBuffer: receiveBuffer)
        var request =
            "GET /events HTTP/1.1\r\nHost: \(host ?? "127.0.0.1:\(port)")\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        request += "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        if let origin { request += "Origin: \(origin)\r\n" }
        for header in headers { request += header + "\r\n" }
        try await connection.send(request + "\r\n")
        let head = String(decoding: try await connection.bytes(through: Array("\r\n\r\n".utf8)), as: UTF8.self)
        let status = head.replacingOccurrences(of: "\r\n\r\n", with: "")
        guard status.contains(" 101 ") else { return (nil, status) }
        return (RawWebSocket(connection: connection), status)
    }

    func send(opcode: UInt8, _ payload: [UInt8], fin: Bool = true, masked: Bool = true, rsv: UInt8 = 0) async throws {
        try await connection.sendBytes(Self.frame(opcode: opcode, payload, fin: fin, masked: masked, rsv: rsv))
    }

    static func frame(
        opcode: UInt8,
        _ payload: [UInt8],
        fin: Bool = true,
        masked: Bool = true,
        rsv: UInt8 = 0
    )
        -> [UInt8]
    {
        var frame: [UInt8] = [(fin ? 0x80 : 0) | rsv | opcode]
        let maskBit: UInt8 = masked ? 0x80 : 0
        if payload.count < 126 {
            frame.append(maskBit | UInt8(payload.count))
        } else if payload.count <= 0xFFFF {
            frame.append(maskBit | 126)
            frame += [UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        } else {
            frame.append(maskBit | 127)
            frame += (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xFF) }
        }
        if masked {
            let key: [UInt8] = [0x11, 0x22, 0x33, 0x44]
            frame += key
            frame += payload.enumerated().map { $0.element ^ key[$0.offset % 4] }
        } else {
            frame += payload
        }
        return frame
    }

    func sendText(_ text: String) async throws { try await send(opcode: 0x1, Array(text.utf8)) }

    /// The next frame from the daemon: (opcode, payload).
    func receive() async throws -> (UInt8, [UInt8]) {
        let frame = try await receiveFrame()
        return (frame.opcode, frame.payload)
    }

    /// The next frame from the daemon, with its RSV1 bit (set on compressed messages).
    func receiveFrame() async throws -> (opcode: UInt8, rsv1: Bool, payload: [UInt8]) {
        let head = try await connection.bytes(2)
        #expect(head[1] & 0x80 == 0, "server frames are never masked")
        var length = Int(head[1] & 0x7F)
        if length == 126 {
            let extended = try await connection.bytes(2)
            length = Int(extended[0]) << 8 | Int(extended[1])
        } else if length == 127 {
            length = try await connection.bytes(8).reduce(0) { $0 << 8 | Int($1) }
        }
        return (head[0] & 0x0F, head[0] & 0x40 != 0, length == 0 ? [] : try await connection.bytes(length))
    }

    /// The next frame, which must be a text frame holding a whole JSON object.
    func receiveWholeTextFrame() async throws -> [String: Any] {
        let (opcode, payload) = try await receive()
        #expect(opcode == 0x1, "a text frame")
        return try #require(
            try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any],
            "a whole frame, not \(String(decoding: payload.prefix(80), as: UTF8.self))"
        )
    }

    func receiveJSON() async throws -> [String: Any] {
        let (opcode, payload) = try await receive()
        #expect(opcode == 0x1)
        return try #require(try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
    }

    func receiveClose() async throws -> Int {
        while true {
            let (opcode, payload) = try await receive()
            if opcode == 0x8 { return payload.count >= 2 ? Int(payload[0]) << 8 | Int(payload[1]) : 1005 }
        }
    }
}

@Suite(.timeLimit(.minutes(2))) struct WebSocketTests {
    @Test func oneStreamAcrossTCPAndWebSocket() async throws {
        try await withDaemon { daemon in
            let (socket, status) = try await RawWebSocket.open(port: daemon.httpPort)
            let ws = try #require(socket, "upgrade refused: \(status)")
            let hello = try await ws.receiveJSON()
            #expect(hello["op"] as? String == "hello")
            let (tcp, _) = try await daemon.client()
            let created = try await tcp.createTodo("from nc")
            let seen = try await ws.receiveJSON()
            #expect(seen["seq"] as? Int == created["seq"] as? Int)
            #expect(todoID(seen) == todoID(created))
            try await ws.sendText("{\"op\":\"ping\",\"id\":\"w\"}\n")
            #expect(try await ws.receiveJSON()["re"] as? String == "w")
        }
    }

    /// A WebSocket session writes the hub's runs to its socket itself; a client that stops
    /// reading makes it hand them to the channel, and once caught up it writes them itself
    /// again. Every broadcast arrives whole and in order throughout, and a pong the transport
    /// writes in between is a whole frame of its own.
    @Test func aWebSocketClientThatPausesGetsEveryBroadcastInOrder() async throws {
        try await withDaemon(.roomForAFlood) { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort, receiveBuffer: 4096).0)
            #expect(try await ws.receiveJSON()["op"] as? String == "hello")
            try await ws.connection.channel.setOption(.autoRead, value: false).get()
            let (writer, _) = try await daemon.client()
            let created = try await writer.createTodo("Paused")
            let id = try #require(todoID(created))
            var seq = try #require(created["seq"] as? Int)
            /// Toggles the todo `count` times, the writer reading its own answers as it goes.
            func toggle(_ count: Int) async throws {
                for index in 0..<count {
                    try await writer.send([
                        "type": "RequestToggleCompleteTodoViewModel", "id": index, "payload": ["todo": ["id": id]],
                    ])
                    if index % 100 == 99 || index == count - 1 {
                        _ = try await writer.json(until: { ($0["re"] as? Int) == index }, timeout: .seconds(30))
                    }
                }
            }
            // About 1,500 × 330 bytes: several times what the kernel's buffers and the channel
            // hold together.
            try await toggle(1500)
            ws.connection.startReading()
            #expect(try await ws.receiveJSON()["seq"] as? Int == seq)
            for _ in 0..<1500 {
                let frame = try await ws.receiveJSON()
                #expect(frame["seq"] as? Int == seq + 1, "broadcasts in order, no gaps")
                seq += 1
            }
            try await ws.send(opcode: 0x9, Array("between".utf8))
            try await toggle(300)
            var pongs = 0
            var broadcasts = 0
            while broadcasts < 300 {
                let (opcode, payload) = try await ws.receive()
                if opcode == 0xA {
                    #expect(payload == Array("between".utf8))
                    pongs += 1
                    continue
                }
                let frame = try #require(try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
                #expect(frame["seq"] as? Int == seq + 1, "broadcasts in order, no gaps")
                seq += 1
                broadcasts += 1
            }
            #expect(pongs == 1)
            try await ws.sendText(#"{"op":"ping","id":"end"}"#)
            #expect(try await ws.receiveJSON()["re"] as? String == "end")
        }
    }

    /// A session writes runs of frames to its socket itself; when the kernel takes only part
    /// of one, the rest (cut anywhere, mostly inside a frame) must reach the client unchanged.
    /// Each round starts with a client that has read everything (so the session writes to its
    /// socket again), then pauses while whole batches of 150 broadcasts, framed as one run,
    /// fill its socket.
    @Test func runsCutByTheKernelMidFrameReachAWebSocketClientWhole() async throws {
        try await withDaemon(.roomForAFlood) { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort, receiveBuffer: 4096).0)
            #expect(try await ws.receiveJSON()["op"] as? String == "hello")
            let (writer, _) = try await daemon.client()
            let created = try await writer.createTodo(String(repeating: "Cut ", count: 40))
            let id = try #require(todoID(created))
            var seq = try #require(created["seq"] as? Int)
            #expect(try await ws.receiveJSON()["seq"] as? Int == seq)
            func toggle(_ index: Int) throws -> [UInt8] {
                let object: [String: Any] = [
                    "type": "RequestToggleCompleteTodoViewModel", "id": index, "payload": ["todo": ["id": id]],
                ]
                return Array(try JSONSerialization.data(withJSONObject: object)) + [UInt8(ascii: "\n")]
            }
            for round in 0..<6 {
                try await ws.connection.channel.setOption(.autoRead, value: false).get()
                // 150 requests in one write: one batch, so one run of 150 frames (about 60 KB)
                // for the client, several times what its socket holds.
                var lines: [UInt8] = []
                for index in 0..<150 { lines += try toggle(index) }
                try await writer.sendBytes(lines)
                _ = try await writer.json(until: { ($0["re"] as? Int) == 149 }, timeout: .seconds(30))
                ws.connection.startReading()
                for _ in 0..<150 {
                    let (opcode, payload) = try await ws.receive()
                    #expect(opcode == 0x1, "round \(round): a text frame")
                    let frame = try #require(
                        try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any],
                        "round \(round): a whole frame, not \(payload.prefix(40))"
                    )
                    #expect(frame["seq"] as? Int == seq + 1, "round \(round): in order, no gaps")
                    seq += 1
                }
            }
            try await ws.sendText(#"{"op":"ping","id":"end"}"#)
            #expect(try await ws.receiveJSON()["re"] as? String == "end")
        }
    }

    /// A WebSocket client cut as a slow consumer while it still reads gets whole frames, the
    /// notice, then the close frame (1001), not a connection broken off mid-frame.
    @Test func aSlowReaderThatIsCutGetsTheNoticeThenACloseFrame() async throws {
        try await withDaemon(.slowReaderCut) { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort, receiveBuffer: 4096).0)
            #expect(try await ws.receiveJSON()["op"] as? String == "hello")
            let (writer, _) = try await daemon.client()
            let created = try await writer.createTodo(String(repeating: "Slow ", count: 180))
            let id = try #require(todoID(created))
            var seq = try #require(created["seq"] as? Int)
            #expect(try await ws.receiveJSON()["seq"] as? Int == seq)
            try await ws.connection.readSlowly()
            let reading = ws.connection.trickle()
            defer { reading.cancel() }
            try await toggle(id, times: 400, from: writer)
            while true {
                let frame = try await ws.receiveWholeTextFrame()
                if let error = frame["error"] as? [String: Any] {
                    #expect(error["code"] as? String == "slow_consumer")
                    break
                }
                #expect(frame["seq"] as? Int == seq + 1, "in order, no gaps before the cut")
                seq += 1
            }
            let (opcode, payload) = try await ws.receive()
            #expect(opcode == 0x8, "the close frame follows the notice")
            #expect(payload.count >= 2 && (Int(payload[0]) << 8 | Int(payload[1])) == 1001)
            _ = try await ws.connection.waitForClose(timeout: .seconds(30))
        }
    }

    /// A large list answer goes to a WebSocket client as one text frame made of parts (the
    /// frame's header with its head, the rows every answer of the list shares, its end); a
    /// client cut while the rows are on their way gets that frame whole, the notice, then the
    /// close frame.
    @Test func aWebSocketClientCutInTheMiddleOfALargeListGetsItWholeThenTheNotice() async throws {
        try await withDaemon(.slowReaderCut) { daemon in
            let (writer, _) = try await daemon.client()
            // 40 rows of about 2,500 bytes: a list over the 64 KiB from which rows are shared.
            try await saveLongTodos(40, subtitleBytes: 2_400, from: writer)
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort, receiveBuffer: 4096).0)
            #expect(try await ws.receiveJSON()["op"] as? String == "hello")
            let created = try await writer.createTodo(String(repeating: "Cut ", count: 200))
            let id = try #require(todoID(created))
            #expect(try await ws.receiveJSON()["seq"] as? Int == created["seq"] as? Int)
            try await ws.connection.readSlowly()
            try await ws.sendText(#"{"type":"RequestTodoViewModels","id":"list"}"#)
            try await eventually("the list is answered") {
                let body = try await httpGet(port: daemon.httpPort, path: "/metrics").body
                return body.contains(#"todostream_requests_total{type="RequestTodoViewModels"} 1"#)
            }
            // A reader, but a slow one (about 50 KB/s): the flood cuts it with the list on its way.
            let reading = ws.connection.trickle(every: .milliseconds(20))
            defer { reading.cancel() }
            try await toggle(id, times: 400, from: writer)
            var listed = false
            while true {
                let frame = try await ws.receiveWholeTextFrame()
                if frame["re"] as? String == "list" {
                    #expect((frame["payload"] as? [Any])?.count == 41)
                    listed = true
                }
                if let error = frame["error"] as? [String: Any] {
                    #expect(error["code"] as? String == "slow_consumer")
                    break
                }
            }
            #expect(listed, "the list came before the notice")
            let (opcode, payload) = try await ws.receive()
            #expect(opcode == 0x8, "the close frame follows the notice")
            #expect(payload.count >= 2 && (Int(payload[0]) << 8 | Int(payload[1])) == 1001)
        }
    }

    /// A ping that arrives while a large list answer is on its way (its end waiting in the
    /// session's queue) is answered after that frame, never inside it: the pong and the text
    /// frame arrive whole, one after the other.
    @Test func aPingDuringALargeListIsAnsweredAfterItsFrame() async throws {
        // The rows go out on their own (over the 64 KiB bound, nothing more is gathered with
        // them) and fill the channel, so the frame's end waits in the session's queue.
        try await withDaemon(.slowReaderCut({ $0.relay.slowConsumerCheckMs = 60_000 })) { daemon in
            let (writer, _) = try await daemon.client()
            // 40 rows of about 2,500 bytes: a list over the 64 KiB from which rows are shared.
            try await saveLongTodos(40, subtitleBytes: 2_400, from: writer)
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort, receiveBuffer: 4096).0)
            #expect(try await ws.receiveJSON()["op"] as? String == "hello")
            try await ws.connection.channel.setOption(.autoRead, value: false).get()
            try await ws.sendText(#"{"type":"RequestTodoViewModels","id":"list"}"#)
            try await eventually("the list is answered") {
                let body = try await httpGet(port: daemon.httpPort, path: "/metrics").body
                return body.contains(#"todostream_requests_total{type="RequestTodoViewModels"} 1"#)
            }
            try await ws.send(opcode: 0x9, Array("mid-list".utf8))
            ws.connection.startReading()
            let list = try await ws.receiveWholeTextFrame()
            #expect(list["re"] as? String == "list")
            #expect((list["payload"] as? [Any])?.count == 40)
            let (opcode, payload) = try await ws.receive()
            #expect(opcode == 0xA, "the pong follows the list's frame")
            #expect(payload == Array("mid-list".utf8))
        }
    }

    /// A client that sends pings and reads nothing does not make the daemon queue a pong for
    /// each: while one is not out yet, only the most recent ping waits to be answered (RFC 6455
    /// §5.5.3). Once the client reads, the last ping's pong arrives, after a few hundred, not
    /// one per ping.
    @Test func pingsFromAClientThatDoesNotReadAreAnsweredWithTheMostRecentPongOnly() async throws {
        try await withDaemon(.custom({ $0.relay.socketSendBufferBytes = 16 << 10 })) { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort, receiveBuffer: 4096).0)
            #expect(try await ws.receiveJSON()["op"] as? String == "hello")
            try await ws.connection.channel.setOption(.autoRead, value: false).get()
            let pings = 20_000
            let payload = { (index: Int) in Array(String(format: "%-125d", index).utf8) }
            for start in stride(from: 0, to: pings, by: 1_000) {
                try await ws.connection.sendBytes(
                    (start..<start + 1_000).flatMap { RawWebSocket.frame(opcode: 0x9, payload($0)) }
                )
            }
            try await ws.send(opcode: 0x9, Array("last".utf8))
            ws.connection.startReading()
            var pongs = 0
            var previous = -1
            while true {
                let (opcode, body) = try await ws.receive()
                #expect(opcode == 0xA, "only pongs were asked for")
                pongs += 1
                if body == Array("last".utf8) { break }
                let index = try #require(
                    Int(String(decoding: body, as: UTF8.self).trimmingCharacters(in: .whitespaces))
                )
                #expect(index > previous, "each pong answers a later ping")
                previous = index
            }
            #expect(pongs < pings / 10, "\(pongs) pongs for \(pings + 1) pings")
            try await ws.sendText(#"{"op":"ping","id":"after"}"#)
            #expect(try await ws.receiveJSON()["re"] as? String == "after")
        }
    }

    @Test func binaryAndOversizedMessagesAreErrorsAndFragmentsAreReassembled() async throws {
        try await withDaemon(.custom({ $0.relay.maxFrameBytes = 1024 })) { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort).0)
            _ = try await ws.receiveJSON()
            try await ws.send(opcode: 0x2, [1, 2, 3])
            #expect(errorCode(try await ws.receiveJSON()) == "unsupported_frame")
            try await ws.sendText(String(repeating: " ", count: 2000) + "{}")
            #expect(errorCode(try await ws.receiveJSON()) == "frame_too_large")
            let ping = Array(#"{"op":"ping","id":"frag"}"#.utf8)
            try await ws.send(opcode: 0x1, Array(ping[..<5]), fin: false)
            try await ws.send(opcode: 0x9, Array("interleaved".utf8))
            let (pongCode, pongData) = try await ws.receive()
            #expect(pongCode == 0xA)
            #expect(pongData == Array("interleaved".utf8))
            try await ws.send(opcode: 0x0, Array(ping[5...]))
            #expect(try await ws.receiveJSON()["re"] as? String == "frag")
        }
    }

    /// A close frame right behind requests is a half-close: every request before it is
    /// answered (a read's reply; a save's reply and its broadcast), then the close is echoed.
    @Test func requestsBeforeAClientsCloseAreAnsweredThenTheCloseEchoed() async throws {
        try await withDaemon { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort).0)
            _ = try await ws.receiveJSON()
            let save = try JSONSerialization.data(withJSONObject: [
                "type": "RequestUpdateDetailViewModel", "id": "save",
                "payload": ["todo": ["id": UUID().uuidString, "version": 0], "title": "before the close"],
            ])
            var bytes = RawWebSocket.frame(opcode: 0x1, Array(#"{"type":"RequestTodoViewModels","id":"list"}"#.utf8))
            bytes += RawWebSocket.frame(opcode: 0x1, Array(save))
            bytes += RawWebSocket.frame(opcode: 0x8, [0x03, 0xE8])
            bytes += RawWebSocket.frame(opcode: 0x1, Array(#"{"op":"ping","id":"after the close"}"#.utf8))
            try await ws.connection.sendBytes(bytes)
            #expect(try await ws.receiveJSON()["re"] as? String == "list")
            let saved = try await ws.receiveJSON()
            #expect(saved["type"] as? String == "ResponseUpdateDetailViewModel")
            #expect(saved["re"] as? String == "save")
            let broadcast = try await ws.receiveJSON()
            #expect(broadcast["type"] as? String == "ResponseTodoViewModel")
            #expect(broadcast["seq"] as? Int == 1)
            // Nothing for the frame after the close; the echo, then the end.
            #expect(try await ws.receiveClose() == 1000)
            _ = try await ws.connection.waitForClose()
            #expect(try await daemonList(daemon).map(\.title) == ["before the close"])
        }
    }

    /// The limit counts a message as TCP counts a line: a trailing `\n` (or `\r\n`) is not part
    /// of the frame, whether the message comes in one frame or several.
    @Test func aTrailingLineEndIsNotCountedAgainstTheLimit() async throws {
        try await withDaemon(.custom({ $0.relay.maxFrameBytes = 1024 })) { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort).0)
            _ = try await ws.receiveJSON()
            func ping(_ id: String, length: Int) -> [UInt8] {
                let frame = #"{"op":"ping","id":"\#(id)"}"#
                return Array((String(repeating: " ", count: length - frame.utf8.count) + frame).utf8)
            }
            try await ws.send(opcode: 0x1, ping("exact", length: 1024) + [0x0A])
            #expect(try await ws.receiveJSON()["re"] as? String == "exact")
            try await ws.send(opcode: 0x1, ping("crlf", length: 1024) + [0x0D, 0x0A])
            #expect(try await ws.receiveJSON()["re"] as? String == "crlf")
            let split = ping("split", length: 1024) + [0x0A]
            try await ws.send(opcode: 0x1, Array(split[..<1000]), fin: false)
            try await ws.send(opcode: 0x0, Array(split[1000...]))
            #expect(try await ws.receiveJSON()["re"] as? String == "split")
            try await ws.send(opcode: 0x1, ping("over", length: 1025) + [0x0A])
            #expect(errorCode(try await ws.receiveJSON()) == "frame_too_large")
            try await ws.send(opcode: 0x1, ping("spaces", length: 1024) + [0x20, 0x0A])
            #expect(errorCode(try await ws.receiveJSON()) == "frame_too_large")
            try await ws.send(opcode: 0x1, ping("after", length: 1024))
            #expect(try await ws.receiveJSON()["re"] as? String == "after")
        }
    }

    @Test(arguments: [
        ("unmasked", 1002), ("invalid UTF-8", 1007), ("continuation first", 1002), ("reserved bits", 1002),
        ("bad close code", 1002), ("close", 1000), ("over the hard cap", 1009), ("close reason not UTF-8", 1007),
        ("length's top bit", 1002), ("one frame over the hard cap", 1009),
        ("one frame over max_frame_bytes, not UTF-8", 1007), ("fragments over max_frame_bytes, not UTF-8", 1007),
        ("fragments over max_frame_bytes, a character across two", 0),
    ])
    func protocolViolationsCloseWithTheRightCode(_ violation: String, _ expected: Int) async throws {
        try await withDaemon { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort).0)
            _ = try await ws.receiveJSON()
            switch violation {
            case "unmasked": try await ws.send(opcode: 0x1, Array("{}".utf8), masked: false)
            case "invalid UTF-8": try await ws.send(opcode: 0x1, [0x7B, 0xFF, 0x7D])
            case "continuation first": try await ws.send(opcode: 0x0, Array("{}".utf8))
            case "reserved bits": try await ws.send(opcode: 0x1, Array("{}".utf8), rsv: 0x40)
            case "bad close code": try await ws.send(opcode: 0x8, [0x03, 0xEC])  // 1004
            case "close": try await ws.send(opcode: 0x8, [0x03, 0xE8])
            case "close reason not UTF-8": try await ws.send(opcode: 0x8, [0x03, 0xE8, 0x61, 0xFF])
            case "one frame over the hard cap":
                // Sent whole: the daemon reads on after its close frame, so the client's unread
                // bytes do not reset the connection before the close frame is read.
                try await ws.send(opcode: 0x1, [UInt8](repeating: 0x20, count: (1 << 20) + 1000))
            case "one frame over max_frame_bytes, not UTF-8":
                try await ws.send(opcode: 0x1, [UInt8](repeating: 0x20, count: 70_000) + [0xFF, 0x7D])
            case "fragments over max_frame_bytes, not UTF-8":
                try await ws.send(opcode: 0x1, [UInt8](repeating: 0x20, count: 40_000), fin: false)
                try await ws.send(opcode: 0x0, [UInt8](repeating: 0x20, count: 40_000) + [0xE2, 0x82], fin: false)
                try await ws.send(opcode: 0x0, [0x20] + [UInt8](repeating: 0x20, count: 1_000))
            case "fragments over max_frame_bytes, a character across two":
                // "€" cut between two fragments is UTF-8: frame_too_large, the connection kept.
                try await ws.send(opcode: 0x1, [UInt8](repeating: 0x20, count: 40_000), fin: false)
                try await ws.send(opcode: 0x0, [UInt8](repeating: 0x20, count: 40_000) + [0xE2, 0x82], fin: false)
                try await ws.send(opcode: 0x0, [0xAC] + [UInt8](repeating: 0x20, count: 1_000))
                #expect(errorCode(try await ws.receiveJSON()) == "frame_too_large")
                try await ws.send(opcode: 0x1, Array(#"{"op":"ping","id":"after"}"#.utf8))
                #expect(try await ws.receiveJSON()["re"] as? String == "after")
                return
            case "length's top bit":
                try await ws.connection.sendBytes([0x81, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 2, 1, 2, 3, 4, 0x7A, 0x7F])
            default:
                try await ws.send(opcode: 0x1, [UInt8](repeating: 0x20, count: 600_000), fin: false)
                try await ws.send(opcode: 0x0, [UInt8](repeating: 0x20, count: 600_000), fin: false)
            }
            #expect(try await ws.receiveClose() == expected)
            _ = try await ws.connection.waitForClose()
        }
    }

    @Test func aTokenInTheUpgradeAuthenticatesTheSession() async throws {
        let token = "upgrade-token-1"
        try await withDaemon(.custom({ $0.tokens = [TokenEntry(sha256: TokenEntry.digest(token), role: .view)] })) {
            daemon in
            for header in ["Authorization: Bearer \(token)", "Sec-WebSocket-Protocol: \(token)"] {
                let (socket, status) = try await RawWebSocket.open(port: daemon.httpPort, headers: [header])
                let ws = try #require(socket)
                if header.hasPrefix("Sec-WebSocket-Protocol") {
                    #expect(status.contains("Sec-WebSocket-Protocol: \(token)"))
                }
                // Authenticated already: nothing more is required of it.
                #expect(try await ws.receiveJSON()["auth"] as? String == "none")
                try await ws.sendText(#"{"type":"RequestTodoViewModels","id":"l"}"#)
                #expect(try await ws.receiveJSON()["type"] as? String == "ResponseTodoViewModels")
            }
            for header in ["Authorization: Bearer wrong-token", "Sec-WebSocket-Protocol: wrong-token"] {
                let (socket, status) = try await RawWebSocket.open(port: daemon.httpPort, headers: [header])
                let ws = try #require(socket)
                if header.hasPrefix("Sec-WebSocket-Protocol") {
                    // Echoed all the same, or a browser drops the connection unexplained.
                    #expect(status.contains("Sec-WebSocket-Protocol: wrong-token"))
                }
                #expect(try await ws.receiveJSON()["auth"] as? String == "required")
                try await ws.sendText(#"{"type":"RequestTodoViewModels","id":"l"}"#)
                #expect(errorCode(try await ws.receiveJSON()) == "unauthorized")
            }
        }
    }

    /// With every connection `max_connections` allows taken, in all or from one address,
    /// `/healthz` and `/metrics` still answer (HTTP's reserve), and a WebSocket upgrade on the
    /// reserve gets 503. (Past `max_connections_per_ip` the reserve once did not apply: a proxy
    /// or a host holding its every connection made monitoring from it blind.)
    @Test(arguments: ["max_connections", "max_connections_per_ip"])
    func monitoringAnswersWhenEveryConnectionIsTaken(_ limit: String) async throws {
        let setup = DaemonSetup.custom { options in
            if limit == "max_connections" {
                options.relay.maxConnections = 2
            } else {
                options.relay.maxConnectionsPerIP = 2
            }
        }
        try await withDaemon(setup) { daemon in
            let (first, _) = try await daemon.client()
            let (second, _) = try await daemon.client()
            let health = try await httpGet(port: daemon.httpPort, path: "/healthz")
            #expect(health.status == 200)
            #expect(try await httpGet(port: daemon.httpPort, path: "/metrics").status == 200)
            let (socket, status) = try await RawWebSocket.open(port: daemon.httpPort)
            #expect(socket == nil)
            #expect(status.contains(" 503 "), "\(status)")
            // A third NDJSON client is refused as before, counted by the limit it was over.
            let third = try await TestConnection.connect(port: daemon.tcpPort)
            #expect(try await third.waitForClose().isEmpty)
            let metrics = try await httpGet(port: daemon.httpPort, path: "/metrics").body
            #expect(metrics.contains("\ntodostream_connections_refused_total{limit=\"\(limit)\"} 1\n"), "\(metrics)")
            await first.close()
            await second.close()
        }
    }

    @Test func aForeignOriginIsRefused() async throws {
        try await withDaemon { daemon in
            let (socket, status) = try await RawWebSocket.open(port: daemon.httpPort, origin: "http://evil.example")
            #expect(socket == nil)
            #expect(status.contains(" 403 "))
            let (allowed, _) = try await RawWebSocket.open(
                port: daemon.httpPort,
                origin: "http://127.0.0.1:\(daemon.httpPort)"
            )
            #expect(allowed != nil)
        }
    }

    /// An upgrade after another request on a kept-alive connection is not silently refused as
    /// a plain request would be: 426 says to open a new connection, and this one closes.
    @Test func anUpgradeAfterAnotherRequestIsToldToUseANewConnection() async throws {
        try await withDaemon { daemon in
            let connection = try await TestConnection.connect(port: daemon.httpPort)
            try await connection.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            let first = String(decoding: try await connection.bytes(through: Array("\r\n\r\n".utf8)), as: UTF8.self)
            #expect(first.contains(" 200 "))
            let length = try #require(
                first.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
            )
            _ = try await connection.bytes(length)
            try await connection.send(
                "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            let rest = String(decoding: try await connection.waitForClose(), as: UTF8.self)
            #expect(rest.contains(" 426 "), "\(rest)")
            #expect(rest.contains("first request on its connection"), "\(rest)")
            #expect(rest.lowercased().contains("connection: upgrade, close"), "\(rest)")
        }
    }

    /// RFC 9112 §3.2: an HTTP/1.1 request without Host, or one with two, is a bad request; an
    /// HTTP/1.0 request may leave it out.
    @Test func aRequestNeedsExactlyOneHost() async throws {
        try await withDaemon { daemon in
            for (request, expected) in [
                ("GET /healthz HTTP/1.1\r\n\r\n", " 400 "),
                ("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", " 400 "),
                ("GET /healthz HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", " 400 "),
                ("GET /healthz HTTP/1.0\r\n\r\n", " 200 "),
                ("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", " 200 "),
                // A value that is no host and port (RFC 3986 §3.2.2).
                ("GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n", " 400 "),
                ("GET /healthz HTTP/1.1\r\nHost: x, y\r\n\r\n", " 400 "),
                ("GET /healthz HTTP/1.1\r\nHost: a\"b\r\n\r\n", " 400 "),
                ("GET /healthz HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n", " 200 "),
                ("GET /healthz HTTP/1.1\r\nHost: my-host.example_1:80\r\nConnection: close\r\n\r\n", " 200 "),
            ] {
                let answer = try await httpExchange(port: daemon.httpPort, request)
                #expect(answer.contains(expected), "\(request.debugDescription): \(answer)")
                if expected == " 400 " { #expect(answer.contains("one Host header"), "\(answer)") }
            }
        }
    }

    /// RFC 9112 §6.1: an HTTP/1.0 request with Transfer-Encoding has faulty framing: it is
    /// answered, and the connection closes after the answer (the next request is not read).
    @Test func anHTTP10RequestWithTransferEncodingClosesAfterItsAnswer() async throws {
        try await withDaemon { daemon in
            let answer = try await httpExchange(
                port: daemon.httpPort,
                "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                    + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            #expect(answer.components(separatedBy: " 200 OK").count == 2, "\(answer)")
            #expect(answer.lowercased().contains("connection: close"), "\(answer)")
        }
    }

    /// RFC 9110 §6.2: an HTTP/1.0 request is answered as HTTP/1.1 (the highest version the
    /// daemon speaks); kept alive only when it asked, and then told so, else closed after it.
    @Test func anHTTP10RequestIsAnsweredAsHTTP11AndToldWhetherItMayAskAgain() async throws {
        try await withDaemon { daemon in
            let kept = try await TestConnection.connect(port: daemon.httpPort)
            try await kept.send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            let first = String(decoding: try await kept.bytes(through: Array("\r\n\r\n".utf8)), as: UTF8.self)
            #expect(first.hasPrefix("HTTP/1.1 200 "), "\(first)")
            #expect(first.lowercased().contains("\r\nconnection: keep-alive\r\n"), "\(first)")
            try await kept.send("GET /nothing HTTP/1.0\r\n\r\n")
            let rest = String(decoding: try await kept.waitForClose(), as: UTF8.self)
            #expect(rest.contains("HTTP/1.1 404 "), "\(rest)")
            #expect(rest.lowercased().contains("\r\nconnection: close\r\n"), "\(rest)")
        }
    }

    /// The client module may be imported by a page on another origin: it carries
    /// `Access-Control-Allow-Origin: *`; the page itself does not.
    @Test func theClientModuleMayBeImportedFromAnotherOrigin() async throws {
        try await withDaemon { daemon in
            for (path, shared) in [("/todostream.js", true), ("/", false), ("/healthz", false)] {
                let answer = try await httpExchange(
                    port: daemon.httpPort,
                    "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://elsewhere.example\r\nConnection: close\r\n\r\n"
                )
                let header = answer.lowercased().contains("\r\naccess-control-allow-origin: *\r\n")
                #expect(header == shared, "\(path): \(answer.prefix(600))")
            }
        }
    }

    /// DNS rebinding: a page on a name its owner pointed at 127.0.0.1 sends that name as both
    /// Origin and Host. On a loopback listener the default check wants a name that only means
    /// loopback (or an IP address); an allowed origin named in the config still gets in.
    @Test func aRenamedHostOnLoopbackIsRefused() async throws {
        try await withDaemon { daemon in
            let port = daemon.httpPort
            for (host, expected) in [
                ("evil.example:\(port)", " 403 "), ("localhost:\(port)", " 101 "), ("app.localhost:\(port)", " 101 "),
                ("127.0.0.1:\(port)", " 101 "), ("[::1]:\(port)", " 101 "),
            ] {
                let (_, status) = try await RawWebSocket.open(port: port, host: host, origin: "http://\(host)")
                #expect(status.contains(expected), "\(host): \(status)")
            }
            // No Origin: not a browser, which DNS rebinding needs.
            #expect(try await RawWebSocket.open(port: port, host: "evil.example:\(port)").0 != nil)
        }
        try await withDaemon(.custom({ $0.relay.allowedOrigins = ["http://todo.example:1"] })) { daemon in
            let (socket, status) = try await RawWebSocket.open(
                port: daemon.httpPort,
                host: "todo.example:1",
                origin: "http://todo.example:1"
            )
            #expect(socket != nil, "\(status)")
        }
    }
}

@Suite(.timeLimit(.minutes(2))) struct HTTPTests {
    @Test func healthzMetricsPageAndErrors() async throws {
        try await withDaemon { daemon in
            let health = try await httpGet(port: daemon.httpPort, path: "/healthz")
            #expect(health.status == 200)
            let status = try #require(try JSONSerialization.jsonObject(with: Data(health.body.utf8)) as? [String: Any])
            #expect(status["storage"] as? String == "ok")
            #expect(status["seq"] as? Int == 0)
            #expect(try await httpGet(port: daemon.httpPort, path: "/").body.contains("<"))
            #expect(try await httpGet(port: daemon.httpPort, path: "/nope").status == 404)
            #expect(try await httpGet(port: daemon.httpPort, path: "/../../etc/passwd").status == 404)
            #expect(try await httpGet(port: daemon.httpPort, path: "/events").status == 426)
            let metrics = try await httpGet(port: daemon.httpPort, path: "/metrics")
            #expect(metrics.status == 200)
            #expect(metrics.body.contains("todostream_connections"))
            // The absolute form of a request target (RFC 9112 §3.2.2) names the same routes.
            #expect(try await httpGet(port: daemon.httpPort, path: "http://127.0.0.1/healthz?x=1").status == 200)
            #expect(try await httpGet(port: daemon.httpPort, path: "HTTP://localhost:1").body.contains("<"))
            // CONNECT is refused, and the connection ends with the answer (nothing else can
            // follow a CONNECT on it).
            let connect = try await TestConnection.connect(port: daemon.httpPort)
            try await connect.send("CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
            let answer = String(decoding: try await connect.waitForClose(timeout: .seconds(10)), as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 405 "), "\(answer)")
        }
    }

    /// The kernel's timer on the daemon's end of a connection from `client` to `port`, from
    /// `/proc/net/tcp`, once no retransmission timer is running (until the client acknowledges
    /// what it was sent, that one shows; asked again every 10 ms, for at most 2 s): its kind
    /// (`tr`: 2 is keepalive, 0 none) and the seconds until it fires.
    private func serverTimer(port: Int, client: TestConnection) async throws -> (kind: Int, seconds: Double) {
        var timer = try readServerTimer(port: port, client: client)
        for _ in 0..<200 where timer.kind == 1 {
            try await Task.sleep(for: .milliseconds(10))
            timer = try readServerTimer(port: port, client: client)
        }
        return timer
    }

    private func readServerTimer(port: Int, client: TestConnection) throws -> (kind: Int, seconds: Double) {
        // Read to its end (a /proc file has no size to read up to; the table is long while the
        // rest of the suite runs).
        let file = try #require(FileHandle(forReadingAtPath: "/proc/net/tcp"))
        defer { try? file.close() }
        let table = String(decoding: file.readDataToEndOfFile(), as: UTF8.self)
        let clientPort = try #require(client.channel.localAddress?.port)
        let local = String(format: ":%04X", port)
        let remote = String(format: ":%04X", clientPort)
        let fields = try #require(
            table.split(separator: "\n").map { $0.split(separator: " ") }.first { fields in
                fields.count > 5 && fields[1].hasSuffix(local) && fields[2].hasSuffix(remote)
            },
            "the daemon's end of the connection in /proc/net/tcp"
        )
        let timer = fields[5].split(separator: ":")
        let kind = try #require(Int(timer[0], radix: 16))
        let jiffies = try #require(Int(timer[1], radix: 16))
        return (kind, Double(jiffies) / Double(sysconf(Int32(_SC_CLK_TCK))))
    }

    /// Accepted connections have TCP keepalive (`limits.tcp_keepalive_seconds`), so that a
    /// client gone without a close (powered off, dropped by a NAT) does not hold its slot
    /// forever; 0 turns it off. (They had none: an idle stream from a vanished client stayed
    /// open for good.)
    @Test func acceptedConnectionsHaveTCPKeepalive() async throws {
        try await withDaemon(.custom({ $0.relay.tcpKeepaliveSeconds = 120 })) { daemon in
            let (client, _) = try await daemon.client()
            let timer = try await serverTimer(port: daemon.tcpPort, client: client)
            #expect(timer.kind == 2, "a keepalive timer")
            #expect(timer.seconds > 60 && timer.seconds <= 121, "\(timer.seconds) s")
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort).0)
            _ = try await ws.receiveJSON()
            #expect(try await serverTimer(port: daemon.httpPort, client: ws.connection).kind == 2)
        }
        try await withDaemon(.custom({ $0.relay.tcpKeepaliveSeconds = nil })) { daemon in
            let (client, _) = try await daemon.client()
            #expect(try await serverTimer(port: daemon.tcpPort, client: client).kind == 0, "no timer")
        }
    }

    /// RFC 9110/9112 details a client can rely on: every answer has a `Date`; `Expect:
    /// 100-continue` gets `100 Continue` on a GET and the final `405` at once on a POST (no
    /// route takes a body); an unknown method is `501` with `Allow`; and nothing is answered
    /// after an answer that closed the connection (a pipelined request behind
    /// `Connection: close` once got an unasked `400`).
    @Test func datesExpectationsUnknownMethodsAndNothingAfterAClose() async throws {
        try await withDaemon { daemon in
            let plain = try await TestConnection.connect(port: daemon.httpPort)
            try await plain.send(
                "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            let closed = String(decoding: try await plain.waitForClose(timeout: .seconds(10)), as: UTF8.self)
            #expect(closed.hasPrefix("HTTP/1.1 200 "), "\(closed)")
            #expect(closed.components(separatedBy: "HTTP/1.1 ").count == 2, "one answer only: \(closed)")
            let date = try #require(closed.split(separator: "\r\n").first { $0.lowercased().hasPrefix("date: ") })
            #expect(date.hasSuffix(" GMT") && date.count == "date: Sun, 06 Nov 1994 08:49:37 GMT".count, "\(date)")

            let continued = try await TestConnection.connect(port: daemon.httpPort)
            try await continued.send(
                "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
            )
            #expect(try await continued.line().hasPrefix("HTTP/1.1 100 "))
            try await continued.send("{}")
            let final = String(decoding: try await continued.bytes(through: Array("\r\n\r\n".utf8)), as: UTF8.self)
            #expect(final.contains("HTTP/1.1 200 "), "\(final)")

            // HTTP/1.0 has no 100 Continue (RFC 9110 §10.1.1): the expectation is ignored.
            let old = try await TestConnection.connect(port: daemon.httpPort)
            try await old.send("GET /healthz HTTP/1.0\r\nContent-Length: 0\r\nExpect: 100-continue\r\n\r\n")
            #expect(try await old.line().hasPrefix("HTTP/1.1 200 "))

            let post = try await TestConnection.connect(port: daemon.httpPort)
            try await post.send(
                "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n"
            )
            let refused = String(decoding: try await post.waitForClose(timeout: .seconds(5)), as: UTF8.self)
            #expect(refused.hasPrefix("HTTP/1.1 405 "), "at once, without the body: \(refused)")

            let unknown = try await TestConnection.connect(port: daemon.httpPort)
            try await unknown.send("FOO / HTTP/1.1\r\nHost: x\r\n\r\n")
            let notImplemented = String(decoding: try await unknown.waitForClose(timeout: .seconds(5)), as: UTF8.self)
            #expect(notImplemented.hasPrefix("HTTP/1.1 501 "), "\(notImplemented)")
            #expect(notImplemented.contains("Allow: GET, HEAD"))
        }
    }

    @Test func httpDatesAreIMFFixdates() {
        #expect(HTTPDate.format(secondsSince1970: 784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.format(secondsSince1970: 0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(secondsSince1970: 1_709_164_800) == "Thu, 29 Feb 2024 00:00:00 GMT")
        #expect(HTTPDate.format(secondsSince1970: 1_795_910_399) == "Sat, 28 Nov 2026 23:59:59 GMT")
    }

    /// An HTTP connection has `limits.handshake_timeout_ms` for each whole request: one that
    /// sends half a request, and one kept alive after its answer, are closed; a WebSocket
    /// opened before them has no deadline once upgraded.
    @Test func slowOrIdleHTTPConnectionsAreClosedAndUpgradedOnesAreNot() async throws {
        try await withDaemon(.custom({ $0.relay.handshakeTimeoutMs = 2_000 })) { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort).0)
            _ = try await ws.receiveJSON()
            let half = try await TestConnection.connect(port: daemon.httpPort)
            try await half.send("GET /healthz HTTP/1.1\r\nHost: x\r\n")
            let kept = try await TestConnection.connect(port: daemon.httpPort)
            try await kept.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await half.waitForClose(timeout: .seconds(10)).isEmpty)
            let answered = String(decoding: try await kept.waitForClose(timeout: .seconds(10)), as: UTF8.self)
            #expect(answered.hasPrefix("HTTP/1.1 200 "), "answered, then closed: \(answered)")
            try await ws.sendText(#"{"op":"ping","id":"ws"}"#)
            #expect(try await ws.receiveJSON()["re"] as? String == "ws")
        }
    }

    @Test func requestTargetsAreReadAsPaths() {
        #expect(HTTPHandler.path(of: "/healthz?x") == "/healthz")
        #expect(HTTPHandler.path(of: "http://h:80/events?token=1") == "/events")
        #expect(HTTPHandler.path(of: "https://h") == "/")
        #expect(HTTPHandler.path(of: "?q") == "/")
        #expect(HTTPHandler.path(of: "/a?b?c") == "/a")
        // RFC 3986 §6.2.2.2: an escaped unreserved character is that character; other escapes,
        // and malformed ones, stay as they are.
        #expect(HTTPHandler.path(of: "/%68ealthz") == "/healthz")
        #expect(HTTPHandler.path(of: "/todostream%2Ejs?x=%41") == "/todostream.js")
        #expect(HTTPHandler.path(of: "/a%2Fb%20c%zz%4") == "/a%2Fb%20c%zz%4")
        #expect(HTTPHandler.path(of: "/%7e%5F") == "/~_")
    }

    /// The WebSocket handshake is a GET (RFC 6455 §4.1): any other method is no upgrade. A
    /// request NIO cannot parse is answered 400 and the connection closed, as the answer says.
    @Test func onlyAGetUpgradesAndAnUnparsableRequestIsClosed() async throws {
        try await withDaemon { daemon in
            let post = try await TestConnection.connect(port: daemon.httpPort)
            try await post.send(
                "POST /events HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                    + "Content-Length: 0\r\n\r\n"
            )
            #expect(try await post.line().hasPrefix("HTTP/1.1 405 "))
            // HEAD is served, but is no handshake either: 400 says so. It was once told that it
            // came too late, as if another request had come before it on its connection.
            let head = try await TestConnection.connect(port: daemon.httpPort)
            try await head.send(
                "HEAD /events HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            let headAnswer = String(decoding: try await head.bytes(through: Array("\r\n\r\n".utf8)), as: UTF8.self)
            #expect(headAnswer.hasPrefix("HTTP/1.1 400 "), "\(headAnswer)")
            let garbled = try await TestConnection.connect(port: daemon.httpPort)
            try await garbled.send("GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
            let answer = String(decoding: try await garbled.waitForClose(), as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 400 "))
            #expect(answer.lowercased().contains("connection: close"))
        }
    }

    /// RFC 6455 §4.2: a handshake the daemon does not accept is answered, never upgraded: an
    /// unknown version is 426 naming the one it speaks, a malformed handshake 400 saying why.
    @Test(arguments: [
        ("version 8", "Sec-WebSocket-Version: 8", 426),
        ("no version", "", 426),
        ("short key", "Sec-WebSocket-Key: abc", 400),
        ("20-byte key", "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAAAAAAA=", 400),
        ("no Connection", "-Connection", 400),
        ("no Host", "-Host", 400),
        ("HTTP/1.0", "-HTTP/1.1", 400),
        ("valid", "", 101),
        // RFC 9110 §5.5: the whitespace around a field's value is not part of it.
        ("key, a space after", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ== ", 101),
        ("version, a tab after", "Sec-WebSocket-Version: 13\t", 101),
    ])
    func handshakesThatRFC6455RefusesAreAnswered(_ name: String, _ change: String, _ expected: Int) async throws {
        try await withDaemon { daemon in
            var lines = [
                "GET /events HTTP/1.1", "Host: 127.0.0.1", "Upgrade: websocket", "Connection: Upgrade",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
            ]
            if name == "no version" { lines.removeAll { $0.hasPrefix("Sec-WebSocket-Version") } }
            if change.hasPrefix("Sec-WebSocket-") {
                let field = change.prefix { $0 != ":" }
                lines = lines.map { $0.hasPrefix(field + ":") ? change : $0 }
            }
            if change == "-Connection" { lines.removeAll { $0.hasPrefix("Connection:") } }
            if change == "-Host" { lines.removeAll { $0.hasPrefix("Host:") } }
            if change == "-HTTP/1.1" { lines[0] = "GET /events HTTP/1.0" }
            let connection = try await TestConnection.connect(port: daemon.httpPort)
            try await connection.send(lines.joined(separator: "\r\n") + "\r\n\r\n")
            let head = String(decoding: try await connection.bytes(through: Array("\r\n\r\n".utf8)), as: UTF8.self)
            #expect(head.contains(" \(expected) "), "\(name): \(head)")
            if expected == 426 {
                #expect(head.contains("Sec-WebSocket-Version: 13"), "\(head)")
                // RFC 9110 §7.8: Upgrade goes with `Connection: upgrade`.
                #expect(head.lowercased().contains("connection: upgrade"), "\(head)")
            }
        }
    }

    /// Close codes registered after RFC 6455 (1012–1014) are echoed like any valid one.
    @Test(arguments: [1012, 1013, 1014, 3000, 4999])
    func aRegisteredCloseCodeIsEchoed(_ code: Int) async throws {
        try await withDaemon { daemon in
            let ws = try #require(try await RawWebSocket.open(port: daemon.httpPort).0)
            _ = try await ws.receiveJSON()
            try await ws.send(opcode: 0x8, [UInt8(code >> 8), UInt8(code & 0xFF)])
            #expect(try await ws.receiveClose() == code)
        }
    }

    /// Every file of the web page (Sources/TodoWeb/web, embedded by SwiftPM) is served at its
    /// path, byte for byte; `/` is the index.
    @Test func everyFileOfTheWebPageIsServedAsIs() async throws {
        let web = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Sources/TodoWeb/web").standardizedFileURL
        let names = try FileManager.default.contentsOfDirectory(atPath: web.path).filter { !$0.hasPrefix(".") }
        #expect(names.contains("index.html"))
        try await withDaemon { daemon in
            for name in names.sorted() {
                let expected = try String(contentsOf: web.appendingPathComponent(name), encoding: .utf8)
                let served = try await httpGet(port: daemon.httpPort, path: "/\(name)")
                #expect(served.status == 200, "/\(name)")
                #expect(served.body == expected, "/\(name)")
            }
            let index = try String(contentsOf: web.appendingPathComponent("index.html"), encoding: .utf8)
            #expect(try await httpGet(port: daemon.httpPort, path: "/").body == index)
        }
    }

    @Test func metricsCountFramesOutFanOutLatencyCommitsAndQueues() async throws {
        try await withDaemon { daemon in
            let (a, _) = try await daemon.client()
            let (b, _) = try await daemon.client()
            let created = try await a.createTodo("counted")
            _ = try await b.json { $0["seq"] as? Int == created["seq"] as? Int }
            // The app's failures are counted with the relay's errors, by code.
            try await a.send([
                "type": "RequestToggleCompleteTodoViewModel", "id": "nf",
                "payload": ["todo": ["id": UUID().uuidString]],
            ])
            _ = try await a.json { $0["re"] as? String == "nf" }
            try await a.sendLine("not json")
            _ = try await a.json { ($0["error"] as? [String: Any])?["code"] as? String == "invalid_json" }
            let body = try await httpGet(port: daemon.httpPort, path: "/metrics").body
            func value(_ series: String) -> Double? {
                body.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap {
                    Double($0.dropFirst(series.count + 1))
                }
            }
            // One broadcast to two clients, and the failed toggle's reply; the detail replies
            // went to the requester only.
            #expect(value(#"todostream_frames_out_total{type="ResponseTodoViewModel"}"#) == 3)
            #expect(value(#"todostream_frames_out_total{type="ResponseTodoDetailViewModel"}"#) == 1)
            #expect((value("todostream_fanout_seconds_count") ?? 0) >= 1)
            #expect(value(#"todostream_fanout_seconds_bucket{le="+Inf"}"#) == value("todostream_fanout_seconds_count"))
            #expect(value("todostream_store_commit_seconds_count") == 1)
            #expect(value("todostream_store_pending_writes") == 0)
            #expect(value("todostream_queued_bytes") != nil)
            #expect(value("todostream_broadcasts_held_back") == 0)
            #expect(value(#"todostream_errors_total{code="not_found"}"#) == 1)
            #expect(value(#"todostream_errors_total{code="invalid_json"}"#) == 1)
        }
    }
}

@Suite(.timeLimit(.minutes(2))) struct TLSTests {
    @Test func theHelloIsTheFirstThingAfterTheHandshakeAndCertificatesReload() async throws {
        let directory = temporaryDirectory()
        let files = try DevCertificate.ensure(in: directory)
        try await withDaemon(.tls(files, { $0.listeners.tls = .init(host: "127.0.0.1", port: 0) })) { daemon in
            let port = try #require(daemon.addresses.tls?.port)
            func connect(trusting path: String) async throws -> TestConnection {
                try await TestConnection.connectTLS(port: port, trusting: path)
            }
            let kept = try await connect(trusting: files.certificatePath)
            #expect(try await kept.json()["op"] as? String == "hello")

            // A plaintext client is refused without harming the listener.
            let plain = try await TestConnection.connect(port: port)
            try await plain.sendLine(#"{"op":"ping"}"#)
            let leftover = try await plain.waitForClose()
            #expect(!String(decoding: leftover, as: UTF8.self).contains("hello"))

            // A bad replacement is refused; a good one is used for new connections only.
            try Data("not a certificate".utf8).write(to: URL(fileURLWithPath: files.certificatePath + ".bad"))
            let good = try DevCertificate.generate()
            try Data(good.certificate.utf8).write(to: URL(fileURLWithPath: files.certificatePath))
            try Data(good.key.utf8).write(to: URL(fileURLWithPath: files.keyPath))
            #expect(daemon.reload())
            let fresh = try await connect(trusting: files.certificatePath)
            #expect(try await fresh.json()["op"] as? String == "hello")
            try await kept.sendLine(#"{"op":"ping","id":"still here"}"#)
            #expect(try await kept.json()["re"] as? String == "still here")
            try Data("garbage".utf8).write(to: URL(fileURLWithPath: files.certificatePath))
            #expect(daemon.reload() == false)
            // So is an expired one, which every client would refuse.
            let expired = try DevCertificate.generate(now: Date().addingTimeInterval(-400 * 86_400))
            try Data(expired.certificate.utf8).write(to: URL(fileURLWithPath: files.certificatePath))
            try Data(expired.key.utf8).write(to: URL(fileURLWithPath: files.keyPath))
            #expect(daemon.reload() == false)
            try Data(good.key.utf8).write(to: URL(fileURLWithPath: files.keyPath))
            // The good certificate stays in use after the bad one was refused.
            try Data(good.certificate.utf8).write(to: URL(fileURLWithPath: files.certificatePath))
            let afterBad = try await connect(trusting: files.certificatePath)
            #expect(try await afterBad.json()["op"] as? String == "hello")
        }
    }
}

/// A daemon that started with an expired certificate (served, with an error logged) still
/// reloads the rest of its settings while that certificate stays: a token must be revocable
/// before the certificate is replaced. Another expired certificate is still refused.
@Test func aReloadKeepsAnExpiredCertificateThatIsInUseAndAppliesTheRest() async throws {
    let directory = temporaryDirectory()
    let expired = try DevCertificate.generate(now: Date().addingTimeInterval(-400 * 86_400))
    let files = DevCertificate.Files(
        certificatePath: directory + "/cert.pem",
        keyPath: directory + "/key.pem",
        fingerprint: ""
    )
    try Data(expired.certificate.utf8).write(to: URL(fileURLWithPath: files.certificatePath))
    try Data(expired.key.utf8).write(to: URL(fileURLWithPath: files.keyPath))
    try await withDaemon(.tls(files, { $0.listeners.tls = .init(host: "127.0.0.1", port: 0) })) { daemon in
        #expect(daemon.reload())
        let other = try DevCertificate.generate(now: Date().addingTimeInterval(-500 * 86_400))
        try Data(other.certificate.utf8).write(to: URL(fileURLWithPath: files.certificatePath))
        try Data(other.key.utf8).write(to: URL(fileURLWithPath: files.keyPath))
        #expect(daemon.reload() == false)
    }
}

/// A TLS connection that never finishes its handshake is closed after
/// `limits.handshake_timeout_ms`; one that finished it may then stay idle: it still answers
/// once the stalled one (opened after it) has been closed.
@Test func aStalledTLSHandshakeIsClosedAndAnIdleSessionIsNot() async throws {
    let files = try DevCertificate.ensure(in: temporaryDirectory())
    let setup = DaemonSetup.tls(files) { options in
        options.listeners.tls = .init(host: "127.0.0.1", port: 0)
        options.relay.handshakeTimeoutMs = 2_000
    }
    try await withDaemon(setup) { daemon in
        let port = try #require(daemon.addresses.tls?.port)
        let idle = try await TestConnection.connectTLS(port: port, trusting: files.certificatePath)
        #expect(try await idle.json()["op"] as? String == "hello")
        let stalled = try await TestConnection.connect(port: port)
        try await stalled.sendBytes([0x16, 0x03, 0x01])  // the start of a ClientHello, no more
        #expect(try await stalled.waitForClose(timeout: .seconds(10)).isEmpty)
        try await idle.sendLine(#"{"op":"ping","id":"still"}"#)
        #expect(try await idle.json()["re"] as? String == "still")
    }
}

extension TLSTests {
    /// A stop closes every connection at once: TLS clients that never answer the daemon's
    /// close_notify cost it one `tls.close_timeout_ms`, not one each (six of them, one after
    /// another, took six).
    @Test func aStopDoesNotWaitForTLSClientsOneAfterAnother() async throws {
        let files = try DevCertificate.ensure(in: temporaryDirectory())
        var clients: [TestConnection] = []
        var stopping = ContinuousClock.now
        let setup = DaemonSetup.tls(files) { options in
            options.listeners.tls = .init(host: "127.0.0.1", port: 0)
            options.tlsCloseTimeout = .seconds(1)
        }
        try await withDaemon(setup) { daemon in
            let port = try #require(daemon.addresses.tls?.port)
            for _ in 0..<6 {
                let client = try await TestConnection.connectTLS(port: port, trusting: files.certificatePath)
                #expect(try await client.json()["op"] as? String == "hello")
                // From here on the client reads nothing, so it never answers a close_notify.
                try await client.channel.setOption(.autoRead, value: false).get()
                clients.append(client)
            }
            // `withDaemon` stops the daemon when this returns, and returns once it has stopped.
            stopping = ContinuousClock.now
        }
        let took = ContinuousClock.now - stopping
        #expect(took < .seconds(4), "the stop took \(took)")
        for client in clients { await client.close() }
    }

    /// The TLS and HTTPS listeners refuse connections over `max_connections` as the plain one
    /// does: closed before any byte, the listener and the admitted connections unharmed.
    @Test(arguments: ["tls", "https"])
    func connectionsOverTheLimitAreClosedOnTheTLSListeners(_ listener: String) async throws {
        let directory = temporaryDirectory()
        let files = try DevCertificate.ensure(in: directory)
        let setup = DaemonSetup.tls(files) { options in
            if listener == "tls" {
                options.listeners.tls = .init(host: "127.0.0.1", port: 0)
            } else {
                options.listeners.httpTLS = true
            }
            options.relay.maxConnections = 2
            // No reserve for plain HTTP requests here: the limit itself is what is tested.
            options.relay.httpReserveConnections = 0
        }
        try await withDaemon(setup) { daemon in
            let port = try #require(listener == "tls" ? daemon.addresses.tls?.port : daemon.httpPort)
            func connect() async throws -> TestConnection {
                try await TestConnection.connectTLS(port: port, trusting: files.certificatePath)
            }
            /// A request and its answer: the hello and a pong over TLS, or the health page
            /// over HTTPS.
            func served(_ connection: TestConnection) async throws -> Bool {
                if listener == "tls" {
                    try await connection.sendLine(#"{"op":"ping","id":"p"}"#)
                    return try await connection.json(until: { $0["re"] as? String == "p" }).0["op"] as? String == "pong"
                }
                try await connection.send("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                let head = String(decoding: try await connection.bytes(through: Array("\r\n\r\n".utf8)), as: UTF8.self)
                let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
                let body = try await connection.bytes(length ?? 0)
                return head.hasPrefix("HTTP/1.1 200") && String(decoding: body, as: UTF8.self).contains("storage")
            }
            let admitted = [try await connect(), try await connect()]
            for connection in admitted { #expect(try await served(connection)) }
            // The third is closed by the daemon: its handshake never completes.
            let refused = try await TestConnection.connect(port: port)
            #expect(try await refused.waitForClose().isEmpty)
            for connection in admitted { #expect(try await served(connection)) }
            await admitted[0].close()
            // The slot is released when the daemon sees the close: retry until it has.
            var servedAgain = false
            for _ in 0..<200 where !servedAgain {
                let next = try await connect()
                servedAgain = (try? await served(next)) ?? false
                await next.close()
            }
            #expect(servedAgain)
            await admitted[1].close()
        }
    }
}

@Suite struct LineFrameDecoderTests {
    func decode(_ chunks: [[UInt8]], max: Int = 16) throws -> [String] {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(LineFrameDecoder(maxFrameBytes: max)))
        for chunk in chunks { try channel.writeInbound(ByteBuffer(bytes: chunk)) }
        var out: [String] = []
        while let event = try channel.readInbound(as: FrameEvent.self) {
            switch event {
            case .frame(let buffer): out.append(String(buffer: buffer))
            case .tooLarge: out.append("<too large>")
            case .binary: out.append("<binary>")
            }
        }
        return out
    }

    @Test func byteByByte() throws {
        let input = Array("{\"a\":1}\r\n\n  \n{\"b\":2}\n".utf8)
        #expect(try decode(input.map { [$0] }) == ["{\"a\":1}", "{\"b\":2}"])
    }

    @Test func anOverlongLineIsReportedOnceAndDiscardedUpToItsNewline() throws {
        let long = [UInt8](repeating: UInt8(ascii: "x"), count: 40)
        #expect(try decode([long, long, Array("x\n{}\n".utf8)]) == ["<too large>", "{}"])
        #expect(try decode((long + [10] + Array("{}\n".utf8)).map { [$0] }) == ["<too large>", "{}"])
    }

    /// A line over the limit is refused whatever it holds, blank too, however its bytes arrive.
    @Test func anOverlongBlankLineIsReportedAsAnyOtherWhateverItsChunks() throws {
        let blank = [UInt8](repeating: UInt8(ascii: " "), count: 17)
        let input = blank + Array("\n{}\n".utf8)
        #expect(try decode([input]) == ["<too large>", "{}"])
        #expect(try decode([Array(blank[..<10]), Array(input[10...])]) == ["<too large>", "{}"])
        #expect(try decode(input.map { [$0] }) == ["<too large>", "{}"])
        #expect(try decode([Array(repeating: UInt8(ascii: " "), count: 16) + [10]]) == [])
    }

    @Test func aLineOfExactlyTheLimitPasses() throws {
        let exact = String(repeating: "y", count: 16)
        #expect(try decode([Array((exact + "\r\n").utf8)]) == [exact])
    }
}
