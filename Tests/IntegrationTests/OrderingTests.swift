import Foundation
import Testing

@testable import todostreamd

/// Many sessions pipelining hundreds of mixed requests at once: every session's answers come in
/// request order, every broadcast in seq order without gaps, and a read sees the session's own
/// writes sent before it. Sessions that only listen get the same broadcasts, in the same order,
/// though each batch interleaves them with other sessions' replies.
@Suite struct OrderingTests {
    static let sessions = 8
    static let requestsPerSession = 250
    static let listeners = 3

    /// What request `index` of a session is: list, toggle, save, detail or ping, in turn.
    enum Kind: Int, CaseIterable {
        case list, toggle, save, detail, ping

        /// Frames it is answered with (for its own session).
        var answers: Int { self == .save ? 2 : 1 }
        var writes: Bool { self == .toggle || self == .save }
    }

    @Test(arguments: ["memory", "sqlite"])
    func pipelinedMixedRequestsFromManySessionsKeepEveryOrder(storage: String) async throws {
        try await withDaemon(storage: storage == "sqlite" ? .sqlite : .memory) { daemon in
            var listeners: [TestConnection] = []
            for _ in 0..<Self.listeners { listeners.append(try await daemon.client().0) }
            var clients: [TestConnection] = []
            var todos: [String] = []
            var seen: [Int] = []
            for session in 0..<Self.sessions {
                let (client, _) = try await daemon.client()
                let created = try await client.createTodo("s\(session)", id: "setup-\(session)")
                todos.append(try #require(todoID(created)))
                seen.append(try #require(created["seq"] as? Int))
                clients.append(client)
            }
            // Everyone has seen every creation before the burst starts.
            let startSeq = Self.sessions
            for (client, seq) in zip(clients, seen) where seq < startSeq {
                _ = try await client.json { ($0["seq"] as? Int) == startSeq }
            }
            for listener in listeners {
                _ = try await listener.json { ($0["seq"] as? Int) == startSeq }
            }
            // Each session sends its whole burst in one write: the daemon reads it all at once.
            for (session, client) in clients.enumerated() {
                var text = ""
                for index in 0..<Self.requestsPerSession {
                    let data = try JSONSerialization.data(
                        withJSONObject: Self.request(index, session: session, todo: todos[session])
                    )
                    text += String(decoding: data, as: UTF8.self) + "\n"
                }
                try await client.send(text)
            }
            let writesPerSession = (0..<Self.requestsPerSession).filter { Self.kind($0).writes }.count
            let finalSeq = startSeq + Self.sessions * writesPerSession
            let expectedAnswers = (0..<Self.requestsPerSession).map { Self.kind($0).answers }.reduce(0, +)
            for (session, client) in clients.enumerated() {
                var answered: [Int] = []
                var lastSeq = startSeq
                var lastSavedTitle = "s\(session)"
                while answered.count < expectedAnswers || lastSeq < finalSeq {
                    let frame = try await client.json()
                    if let seq = frame["seq"] as? Int {
                        #expect(seq == lastSeq + 1, "session \(session): seq \(seq) after \(lastSeq)")
                        lastSeq = seq
                    }
                    guard let re = frame["re"] as? String else { continue }
                    let index = try #require(Int(re.dropFirst("s\(session)-".count)), "\(re)")
                    #expect(answered.last.map { $0 <= index } ?? true, "session \(session): \(index) after \(answered)")
                    answered.append(index)
                    #expect(frame["error"] == nil, "\(frame)")
                    switch Self.kind(index) {
                    case .save where frame["seq"] == nil:
                        lastSavedTitle = "s\(session)-\(index)"
                    case .detail:
                        // The read sees the session's saves sent before it.
                        let title = (frame["payload"] as? [String: Any])?["title"] as? String
                        #expect(title == lastSavedTitle, "session \(session) detail \(index)")
                    default:
                        break
                    }
                }
                #expect(answered.count == expectedAnswers)
                #expect(lastSeq == finalSeq)
            }
            for (number, listener) in listeners.enumerated() {
                var lastSeq = startSeq
                while lastSeq < finalSeq {
                    let frame = try await listener.json()
                    let seq = try #require(frame["seq"] as? Int, "listener \(number): \(frame)")
                    #expect(seq == lastSeq + 1, "listener \(number): seq \(seq) after \(lastSeq)")
                    #expect(frame["re"] == nil && frame["type"] as? String == "ResponseTodoViewModel", "\(frame)")
                    lastSeq = seq
                }
            }
        }
    }

    static func kind(_ index: Int) -> Kind { Kind(rawValue: index % Kind.allCases.count) ?? .ping }

    static func request(_ index: Int, session: Int, todo: String) -> [String: Any] {
        let id = "s\(session)-\(index)"
        switch kind(index) {
        case .list:
            return ["type": "RequestTodoViewModels", "id": id]
        case .toggle:
            return ["type": "RequestToggleCompleteTodoViewModel", "id": id, "payload": ["todo": ["id": todo]]]
        case .save:
            return [
                "type": "RequestUpdateDetailViewModel", "id": id,
                "payload": ["todo": ["id": todo], "title": id, "subtitle": String(repeating: "x", count: 400)],
            ]
        case .detail:
            return ["type": "RequestTodoDetailViewModel", "id": id, "payload": ["todo": ["id": todo]]]
        case .ping:
            return ["op": "ping", "id": id]
        }
    }
}
