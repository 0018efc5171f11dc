import Foundation
import Logging
import NIOCore
import Relay
import Testing
import TodoStore

@testable import todostreamd

/// Runs the real daemon in-process on port 0 for the duration of `body`, then shuts it down
/// gracefully and checks that it stopped cleanly.
/// `storage` nil: as when nothing names an engine (SQLite, unless a PostgreSQL URL is given).
func withDaemon(
    storage: DaemonOptions.Storage? = .memory,
    dataDirectory: String? = nil,
    store: GroupCommitStore? = nil,
    _ setup: DaemonSetup = DaemonSetup(),
    _ body: (Daemon) async throws -> Void
) async throws {
    var options = DaemonOptions()
    options.storage = storage
    options.dataDirectory = dataDirectory ?? temporaryDirectory()
    options.listeners = ListenerConfiguration(
        tcp: .init(host: "127.0.0.1", port: 0),
        http: .init(host: "127.0.0.1", port: 0)
    )
    setup.apply(&options)
    var logger = Logger(label: "todostreamd.test")
    logger.logLevel = .critical
    let daemon = try await Daemon.start(options, logger: logger, store: store)
    // The daemon runs in a child task: nothing of it outlives this call.
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await daemon.run() }
        do {
            try await body(daemon)
        } catch {
            await daemon.shutdown()
            _ = try? await group.next()
            throw error
        }
        await daemon.shutdown()
        try await group.next()
    }
}

/// Changes a test makes to the daemon's default options.
struct DaemonSetup {
    var apply: (inout DaemonOptions) -> Void = { _ in }

    static func custom(_ apply: @escaping (inout DaemonOptions) -> Void) -> DaemonSetup {
        DaemonSetup(apply: apply)
    }

    /// TLS with the certificate `files` (no listener is added: set `listeners.tls` or
    /// `listeners.httpTLS` in `more`).
    static func tls(_ files: DevCertificate.Files, _ more: @escaping (inout DaemonOptions) -> Void) -> DaemonSetup {
        .custom({ options in
            options.tlsCertificatePath = files.certificatePath
            options.tlsKeyPath = files.keyPath
            more(&options)
        })
    }

    /// Room for a flood of broadcasts to a client that does not read (queues of 8 MiB and
    /// 100,000 frames, no rate limit to speak of) behind a 4 KiB send buffer, so that the flood
    /// fills the kernel's buffers and the channel without cutting the client.
    static var roomForAFlood: DaemonSetup {
        .custom({ options in
            options.relay.maxQueueBytes = 8 << 20
            options.relay.maxQueueFrames = 100_000
            options.relay.rateLimitPerSecond = 1_000_000
            options.relay.rateLimitBurst = 1_000_000
            options.relay.socketSendBufferBytes = 4096
        })
    }
}

extension DaemonSetup {
    /// A small outbound bound and a grace period (1 s) short beside a slow reader's backlog
    /// (several seconds at `TestConnection.trickle`'s pace) and long beside its pauses (50 ms,
    /// with room for a busy machine's delays), for clients cut as slow consumers.
    static var slowReaderCut: DaemonSetup {
        .custom({ options in
            roomForAFlood.apply(&options)
            options.relay.maxQueueBytes = 64 << 10
            options.relay.maxQueueFrames = 4096
            options.relay.slowConsumerGraceMs = 1000
        })
    }

    /// `slowReaderCut`, then `more`.
    static func slowReaderCut(_ more: @escaping (inout DaemonOptions) -> Void) -> DaemonSetup {
        .custom({ options in
            slowReaderCut.apply(&options)
            more(&options)
        })
    }
}

func temporaryDirectory() -> String {
    let path = NSTemporaryDirectory() + "todostream-it-" + UUID().uuidString
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

extension Daemon {
    var tcpPort: Int { addresses.tcp?.port ?? 0 }
    var httpPort: Int { addresses.http?.port ?? 0 }

    /// A connected NDJSON client whose hello has been read.
    func client() async throws -> (TestConnection, hello: [String: Any]) {
        let connection = try await TestConnection.connect(port: tcpPort)
        let hello = try await connection.json()
        return (connection, hello)
    }
}

extension TestConnection {
    /// Creates a todo through the detail flow; returns the broadcast the requester received.
    func createTodo(_ title: String, id: String = UUID().uuidString) async throws -> [String: Any] {
        try await send(["type": "RequestNewTodoDetailViewModel", "id": "new-\(id)"])
        let (fresh, _) = try await json { $0["re"] as? String == "new-\(id)" }
        var detail = try #require(fresh["payload"] as? [String: Any])
        detail["title"] = title
        try await send(["type": "RequestUpdateDetailViewModel", "id": "save-\(id)", "payload": detail])
        let (saved, _) = try await json {
            $0["re"] as? String == "save-\(id)" && $0["type"] as? String == "ResponseUpdateDetailViewModel"
        }
        #expect(saved["error"] == nil)
        let (broadcast, _) = try await json { $0["re"] as? String == "save-\(id)" && $0["seq"] != nil }
        return broadcast
    }
}

func todoID(_ frame: [String: Any]) -> String? {
    ((frame["payload"] as? [String: Any])?["todo"] as? [String: Any])?["id"] as? String
}

func errorCode(_ frame: [String: Any]) -> String? {
    (frame["error"] as? [String: Any])?["code"] as? String
}
