import ArgumentParser
import EventStream
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Relay

/// A minimal NDJSON client for the `tap` and `replay` commands.
struct LineClient {
    let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>

    static func connect(_ address: String) async throws -> LineClient {
        guard let parsed = ListenerConfiguration.Address(parsing: address) else {
            throw ValidationError("--connect must be HOST:PORT, not \(address)")
        }
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: parsed.host, port: parsed.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
            return LineClient(channel: channel)
        } catch {
            fail("cannot connect to \(address): \(reason(error))")
        }
    }

    /// What went wrong, in the system's words (`connection refused`), not NIO's types.
    static func reason(_ error: any Error) -> String {
        if let connection = error as? NIOConnectionError, let first = connection.connectionErrors.first {
            return reason(first.error)
        }
        if let io = error as? IOError { return String(cString: strerror(io.errnoCode)).lowercased() }
        return "\(error)"
    }
}

/// Splits the inbound byte stream into lines.
struct Lines: AsyncSequence {
    typealias Element = String
    let inbound: NIOAsyncChannelInboundStream<ByteBuffer>

    struct AsyncIterator: AsyncIteratorProtocol {
        var source: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
        var pending: [UInt8] = []

        mutating func next() async throws -> String? {
            while true {
                if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = String(decoding: pending[..<newline], as: UTF8.self)
                    pending.removeFirst(newline + 1)
                    return line
                }
                guard let buffer = try await source.next() else {
                    if pending.isEmpty { return nil }
                    defer { pending = [] }
                    return String(decoding: pending, as: UTF8.self)
                }
                pending += buffer.readableBytesView
            }
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(source: inbound.makeAsyncIterator()) }
}

/// Reads the daemon's greeting: fails with a clear line when the other end is not todostreamd,
/// including one that sends nothing (the connection is closed after `within`).
func expectHello(
    _ lines: inout Lines.AsyncIterator,
    on channel: any Channel,
    from address: String,
    within: TimeAmount = .seconds(10)
) async throws -> [String: Any] {
    let giveUp = channel.eventLoop.scheduleTask(in: within) { channel.close(promise: nil) }
    let line = try? await lines.next()
    giveUp.cancel()
    guard let line, let hello = jsonObject(line), hello["op"] as? String == "hello" else {
        fail("\(address) did not greet like todostreamd")
    }
    return hello
}

/// Sends `auth` with `token` and reads its answer: fails with a clear line when the token is
/// refused, or when its role is not `role` (nil: any).
func authenticate(
    _ lines: inout Lines.AsyncIterator,
    _ outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>,
    token: String,
    as command: String,
    role: String? = nil
) async throws {
    let id = "\(command)-auth"
    try await outbound.write(ByteBuffer(string: jsonLine(["op": "auth", "token": token, "id": id]) + "\n"))
    while let line = try await lines.next() {
        guard let frame = jsonObject(line), frame["re"] as? String == id else { continue }
        if let error = frame["error"] as? [String: Any] {
            fail("\(command) refused: \(error["message"] as? String ?? "error")")
        }
        if let role, let given = frame["role"] as? String, given != role {
            fail("\(command) needs a \(role) token; this one has the \(given) role")
        }
        return
    }
    fail("\(command): the daemon closed the connection")
}

func jsonObject(_ line: String) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
}

func jsonLine(_ object: [String: Any]) -> String {
    guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return "{}" }
    return String(decoding: data, as: UTF8.self)
}

struct Tap: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print every event of a running daemon as NDJSON (the seed's log-every-event observer).",
        discussion: """
            Needs a monitor token: --token, or $TODOSTREAM_TAP_TOKEN. Runs until it is stopped; \
            exits 1 when the daemon closes the connection (a restart, a stop).
            """
    )

    @Option(help: "The daemon's NDJSON listener, HOST:PORT.")
    var connect: String = "127.0.0.1:7878"

    @Option(help: "A token with the monitor role.")
    var token: String?

    @Option(help: "Event types or patterns to print (repeatable).")
    var types: [String] = ["*"]

    func run() async throws {
        guard let token = token ?? ProcessInfo.processInfo.environment["TODOSTREAM_TAP_TOKEN"] else {
            throw ValidationError("tap needs a monitor token: --token or $TODOSTREAM_TAP_TOKEN")
        }
        let patterns = types.compactMap(TypePattern.init)
        let client = try await LineClient.connect(connect)
        let channel = client.channel.channel
        let address = connect
        try await client.channel.executeThenClose { inbound, outbound in
            var lines = Lines(inbound: inbound).makeAsyncIterator()
            _ = try await expectHello(&lines, on: channel, from: address)
            try await authenticate(&lines, outbound, token: token, as: "tap", role: "monitor")
            // A session starts subscribed to Response*: only the types asked for are wanted.
            try await outbound.write(
                ByteBuffer(string: jsonLine(["op": "unsubscribe", "types": ["Response*"], "id": "tap-unsub"]) + "\n")
            )
            try await outbound.write(
                ByteBuffer(string: jsonLine(["op": "subscribe", "types": types, "id": "tap-sub"]) + "\n")
            )
            while let line = try await lines.next() {
                let frame = jsonObject(line)
                if let re = frame?["re"] as? String, re == "tap-sub" || re == "tap-unsub" {
                    if let error = frame?["error"] as? [String: Any] {
                        fail("tap refused: \(error["message"] as? String ?? "error")")
                    }
                    continue
                }
                // Events of other types (one that came before the unsubscribe) are not printed.
                if let type = frame?["type"] as? String, !patterns.contains(where: { $0.matches(type) }) { continue }
                FileHandle.standardOutput.write(Data((line + "\n").utf8))
            }
            FileHandle.standardError.write(Data("tap: the daemon closed the connection\n".utf8))
            // The stream ended without being asked to: a script or a unit that runs the tap
            // sees a failure, as it would of `tail -f` whose file went away, and can start it
            // again.
            throw ExitCode(1)
        }
    }
}

struct Replay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Publish the view requests of a recorded NDJSON file in order, waiting for each answer, and report what differed.",
        discussion: """
            The file may be a tap recording or a saved nc session, with LF or CRLF line ends. \
            Lines that are not JSON (or not UTF-8), and requests a view may not publish, are \
            reported with their line numbers and skipped; answers, broadcasts and the model \
            layer's copies are read as recorded answers. A recorded answer (the next later line \
            whose re equals the request's id; in a tap recording, the next answer of the \
            request's session) is compared with the new one, ignoring times, seqs and sessions. \
            An error without re (frame_too_large) answers the request waiting. An error is an \
            answer like any other: the same error as recorded is no difference; with no recorded \
            answer, it is reported as refused. A request with \
            no answer within --timeout seconds is reported as refused and replay stops; when the \
            daemon closes the connection, every request not answered is reported as refused. \
            Exit status 2 when any answer differed or was refused.
            """
    )

    @Argument(help: "The recorded NDJSON file.")
    var file: String

    @Option(help: "The daemon's NDJSON listener, HOST:PORT.")
    var connect: String = "127.0.0.1:7878"

    @Option(help: "A view token, when the daemon requires one.")
    var token: String?

    @Option(help: "Seconds to wait for each answer before replay gives up.")
    var timeout: Double = 10

    static let viewRequests: Set<String> = [
        "RequestTodoViewModels", "RequestToggleCompleteTodoViewModel", "RequestDeleteTodoViewModel",
        "RequestNewTodoDetailViewModel", "RequestTodoDetailViewModel", "RequestUpdateDetailViewModel",
    ]

    func validate() throws {
        guard timeout > 0, timeout <= 86_400 else {
            throw ValidationError("--timeout must be more than 0 and at most 86400 seconds")
        }
    }

    func run() async throws {
        guard let data = FileManager.default.contents(atPath: file) else { fail("cannot read \(file)") }
        let lines = Self.lines(of: data)
        let frames = lines.map { $0.flatMap(jsonObject) }
        // Recorded answers by the line of the request they answer: in a saved session by id,
        // in a tap recording (whose copies carry no ids) by session.
        let recorded = Self.sessionAnswers(frames).merging(Self.tappedAnswers(frames)) { byID, _ in byID }
        let client = try await LineClient.connect(connect)
        let channel = client.channel.channel
        let address = connect
        let wait = TimeAmount.nanoseconds(Int64(timeout * 1e9))
        var published = 0
        var skipped = 0
        var differences = 0
        try await client.channel.executeThenClose { inbound, outbound in
            var replies = Lines(inbound: inbound).makeAsyncIterator()
            let hello = try await expectHello(&replies, on: channel, from: address)
            if let token {
                // A monitor may not publish: every request would be refused.
                try await authenticate(&replies, outbound, token: token, as: "replay", role: "view")
            } else if hello["auth"] as? String == "required" {
                fail("replay: the daemon requires a token: give a view token with --token")
            }
            var connection = Exchange(channel: channel, wait: wait, timeout: timeout)
            for (index, line) in lines.enumerated() {
                let number = index + 1
                guard let line else {
                    report("line \(number): not valid UTF-8; skipped")
                    skipped += 1
                    continue
                }
                if line.trimmingCharacters(in: .whitespaces).isEmpty { continue }
                guard var frame = frames[index] else {
                    report("line \(number): not a JSON object; skipped")
                    skipped += 1
                    continue
                }
                guard let type = frame["type"] as? String, type.hasPrefix("Request") else { continue }
                guard Self.viewRequests.contains(type) else {
                    if frame["session"] == nil {
                        report("line \(number): \(type) is not a view request; skipped")
                        skipped += 1
                    }
                    continue
                }
                if let reason = connection.stopped {
                    report("line \(number): \(type) refused: not sent: \(reason)")
                    differences += 1
                    continue
                }
                let id = "replay-\(number)"
                frame["id"] = id
                frame["session"] = nil
                frame["seq"] = nil
                frame["re"] = nil
                published += 1
                let answer: [String: Any]
                switch await connection.send(frame, id: id, type: type, &replies, outbound) {
                case .answered(let object): answer = object
                case .error(let object) where recorded[index] != nil:
                    // Compared with what was recorded, as any answer is.
                    answer = object
                case .error(let object):
                    report("line \(number): \(type) refused: \((object["error"] as? [String: Any])?["message"] ?? "")")
                    differences += 1
                    continue
                case .refused(let reason):
                    report("line \(number): \(type) refused: \(reason)")
                    differences += 1
                    continue
                }
                // A fresh todo is new by nature (its id is made up each time): nothing to compare,
                // unless one side is an error.
                func isError(_ frame: [String: Any]) -> Bool { frame["op"] as? String == "error" }
                if let before = recorded[index],
                    type != "RequestNewTodoDetailViewModel" || isError(before) || isError(answer),
                    jsonLine(Self.normalized(before)) != jsonLine(Self.normalized(answer))
                {
                    report(
                        "line \(number): \(type) answered differently\n  recorded: \(jsonLine(Self.normalized(before)))\n  now:      \(jsonLine(Self.normalized(answer)))"
                    )
                    differences += 1
                }
            }
        }
        func counted(_ count: Int, _ noun: String) -> String { "\(count) \(noun)\(count == 1 ? "" : "s")" }
        report(
            "replayed \(counted(published, "request")) from \(file); \(counted(skipped, "line")) skipped; "
                + "\(counted(differences, "difference"))"
        )
        if differences > 0 { throw ExitCode(2) }
    }

    /// The file's lines, split on the byte `\n` with a `\r` before it dropped (Swift would read
    /// `\r\n` as one character); nil for a line that is not UTF-8.
    static func lines(of data: Data) -> [String?] {
        data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
            let bytes = line.last == UInt8(ascii: "\r") ? line.dropLast() : line
            return String(validating: bytes, as: UTF8.self)
        }
    }

    /// How one request fared.
    enum Outcome {
        /// The daemon's answer (a save's reply, the first of its two answers).
        case answered([String: Any])
        /// The daemon's error frame.
        case error([String: Any])
        /// No answer at all: why.
        case refused(String)
    }

    /// Replay's side of the connection: sends one request at a time and reads its answer, and
    /// remembers why it stopped (the daemon closed the connection, or did not answer in time).
    struct Exchange {
        let channel: any Channel
        let wait: TimeAmount
        let timeout: Double
        var draining = false
        /// Set once no more answers can come: why.
        var stopped: String?

        mutating func send(
            _ frame: [String: Any],
            id: String,
            type: String,
            _ replies: inout Lines.AsyncIterator,
            _ outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
        ) async -> Outcome {
            let timedOut = NIOLockedValueBox(false)
            // No answer in time: the connection is closed, which ends the read below.
            let channel = self.channel
            let giveUp = channel.eventLoop.scheduleTask(in: wait) {
                timedOut.withLockedValue { $0 = true }
                channel.close(promise: nil)
            }
            defer { giveUp.cancel() }
            var answer: [String: Any]?
            do {
                try await outbound.write(ByteBuffer(string: jsonLine(frame) + "\n"))
                while let reply = try await replies.next() {
                    guard let object = jsonObject(reply) else { continue }
                    if object["op"] as? String == "draining" {
                        draining = true
                        continue
                    }
                    // Answers come in order: an error without re (frame_too_large) is this one's.
                    let isError = object["op"] as? String == "error"
                    guard object["re"] as? String == id || (isError && object["re"] == nil) else { continue }
                    if isError {
                        return .error(object)
                    }
                    // An update answers twice (the saved detail, then the broadcast): keep the reply.
                    if answer == nil { answer = object }
                    if type != "RequestUpdateDetailViewModel" || object["seq"] != nil || object["error"] != nil {
                        return .answered(answer ?? object)
                    }
                }
            } catch {
                // The connection was reset, or closed before the write: as a close.
            }
            let reason =
                timedOut.withLockedValue { $0 }
                ? "no answer within \(timeout == timeout.rounded() ? "\(Int(timeout))" : "\(timeout)") s"
                : draining ? "the daemon closed the connection (draining)" : "the daemon closed the connection"
            stopped = reason
            if let answer { return .answered(answer) }
            return .refused(reason)
        }
    }

    /// In a saved session, the recorded answer to each request, by the request's line: the next
    /// later line whose `re` is the request's id. A session may give many requests one id: each
    /// such line answers the oldest request of its id still waiting (a save's broadcast, its
    /// second line with a `seq`, is still its own); an error without `re` (`frame_too_large`)
    /// answers the oldest request still waiting, as a connection's answers come in order.
    static func sessionAnswers(_ frames: [[String: Any]?]) -> [Int: [String: Any]] {
        var answers: [Int: [String: Any]] = [:]
        var waiting: [String: [(line: Int, type: String)]] = [:]
        for (index, frame) in frames.enumerated() {
            guard let frame else { continue }
            if let type = frame["type"] as? String, viewRequests.contains(type), let id = frame["id"] {
                waiting["\(id)", default: []].append((index, type))
                continue
            }
            let re: String
            if let given = frame["re"] {
                re = "\(given)"
            } else if frame["op"] as? String == "error",
                let oldest = waiting.filter({ !$0.value.isEmpty }).min(by: { $0.value[0].line < $1.value[0].line })
            {
                re = oldest.key
            } else {
                continue
            }
            if let oldest = waiting[re]?.first, answers[oldest.line] != nil {
                // A save answered already: this is its broadcast, or the save has none recorded.
                waiting[re]?.removeFirst()
                if frame["seq"] != nil { continue }
            }
            guard let oldest = waiting[re]?.first else { continue }
            answers[oldest.line] = frame
            let awaitsItsBroadcast =
                oldest.type == "RequestUpdateDetailViewModel" && frame["type"] != nil && frame["error"] == nil
            if !awaitsItsBroadcast { waiting[re]?.removeFirst() }
        }
        return answers
    }

    static let viewResponses: Set<String> = [
        "ResponseTodoViewModels", "ResponseTodoViewModel", "ResponseTodoDetailViewModel",
        "ResponseUpdateDetailViewModel",
    ]

    /// In a tap recording, the answer to each request, by the request's line: a monitor gets a
    /// copy of every request and reply with the `session` that caused it, and a session's
    /// replies come in the order of its requests. A save's second copy (its broadcast) is still
    /// its own.
    static func tappedAnswers(_ frames: [[String: Any]?]) -> [Int: [String: Any]] {
        var answers: [Int: [String: Any]] = [:]
        // Per session, its requests not answered in full yet, oldest first.
        var waiting: [String: [(line: Int, type: String)]] = [:]
        for (index, frame) in frames.enumerated() {
            guard let frame, frame["id"] == nil, frame["re"] == nil,
                let session = frame["session"] as? String, let type = frame["type"] as? String
            else { continue }
            if viewRequests.contains(type) {
                waiting[session, default: []].append((index, type))
                continue
            }
            guard viewResponses.contains(type), let oldest = waiting[session]?.first else { continue }
            let first = answers[oldest.line] == nil
            if first { answers[oldest.line] = frame }
            let awaitsItsBroadcast =
                first && oldest.type == "RequestUpdateDetailViewModel" && frame["error"] == nil
            if !awaitsItsBroadcast { waiting[session]?.removeFirst() }
        }
        return answers
    }

    func report(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    /// The parts of an answer that must match: no times, seqs, sessions or correlation ids.
    static func normalized(_ frame: [String: Any]) -> [String: Any] {
        // `applied_seq`: the seq of the write a `mid` retry repeats.
        let ignored: Set<String> = ["createdAt", "completedAt", "seq", "applied_seq", "re", "session"]
        func strip(_ value: Any) -> Any {
            if let object = value as? [String: Any] {
                var result: [String: Any] = [:]
                for (key, item) in object where !ignored.contains(key) {
                    result[key] = strip(item)
                }
                return result
            }
            if let list = value as? [Any] { return list.map(strip) }
            return value
        }
        return strip(frame) as? [String: Any] ?? [:]
    }
}
