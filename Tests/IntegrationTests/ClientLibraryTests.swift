import Foundation
import Testing
import TodoApp
import TodostreamClient

@testable import todostreamd

/// The client library against the real daemon, over TCP and WebSocket, with connections cut
/// on purpose.
@Suite struct ClientLibraryTests {
    @Test(arguments: TestTransport.allCases)
    func listAnswersAndLiveEvents(_ transport: TestTransport) async throws {
        try await withDaemon { daemon in
            try await withTestClient(try testConfiguration(transport.url(port: transport.port(of: daemon)))) {
                client,
                log in
                try await log.wait(for: "the connection") { events, _ in events.contains(.connected(resumed: false)) }
                #expect(try await client.list().isEmpty)
                // Another client's write reaches this one live.
                let (writer, _) = try await daemon.client()
                let broadcast = try await writer.createTodo("from elsewhere")
                let id = try #require(todoID(broadcast).flatMap(UUID.init(uuidString:)))
                try await log.wait(for: "the live broadcast") { _, list in list.todos[id]?.title == "from elsewhere" }
                // A request and its answer.
                let toggled = try await client.toggle(id)
                #expect(toggled.complete)
                #expect(toggled.todo.version == 2)
                let created = try await client.create(title: "  mine  ", priority: .high)
                #expect(created.todo.title == "mine")
                #expect(created.todo.version == 1)
                #expect(Set(try await client.list().map(\.title)) == ["mine", "from elsewhere"])
                // App errors come back as themselves.
                await #expect(throws: AppError.self) { try await client.toggle(UUID()) }
                do {
                    _ = try await client.create(title: "   ")
                    Issue.record("an empty title was saved")
                } catch let error as AppError {
                    #expect(error.code == .validationFailed)
                    #expect(error.field == "title")
                }
                try await log.wait(for: "the view") { _, list in
                    Set(list.rows.map(\.title)) == ["mine", "from elsewhere"]
                }
            }
        }
    }

    /// Writes whose connections are cut at random byte positions (inside the request, between
    /// the request and its answer, inside the answer, during the greeting or the resume) are
    /// sent again from the outbox with their mids: every one is applied exactly once — each
    /// todo's version counts its writes — and the client's view converges to the daemon's list.
    @Test(arguments: TestTransport.allCases)
    func cutConnectionsApplyEveryWriteExactlyOnce(_ transport: TestTransport) async throws {
        let seed = UInt64.random(in: 0...UInt64.max)
        var random = SplitMix(seed: seed)
        try await withDaemon { daemon in
            let proxy = try await CutProxy.start(to: transport.port(of: daemon))
            defer { Task { await proxy.stop() } }
            try await withTestClient(try testConfiguration(transport.url(port: proxy.port))) { client, log in
                try await log.wait(for: "the connection") { events, _ in events.contains(.connected(resumed: false)) }
                var expected: [UUID: (writes: Int, toggles: Int, title: String)] = [:]
                for index in 0..<3 {
                    let created = try await client.create(title: "todo \(index)")
                    expected[created.todo.id] = (1, 0, "todo \(index)")
                }
                let ids = expected.keys.sorted { $0.uuidString < $1.uuidString }
                for round in 0..<30 {
                    if !proxy.isArmed {
                        let up = random.next() % 2 == 0
                        proxy.arm(up ? .up : .down, afterBytes: Int(random.next() % (up ? 400 : 1500)))
                    }
                    let id = ids[Int(random.next() % UInt64(ids.count))]
                    if random.next() % 3 == 0 {
                        let title = "edit \(round)"
                        let saved = try await client.edit(id, TodoEdit(title: title))
                        #expect(saved.todo.title == title, "seed \(seed)")
                        expected[id]?.title = title
                    } else {
                        _ = try await client.toggle(id)
                        expected[id]?.toggles += 1
                    }
                    expected[id]?.writes += 1
                }
                #expect(proxy.cuts >= 5, "seed \(seed): the test cut too seldom to mean anything")
                let stored = try await daemonList(daemon)
                #expect(stored.count == 3)
                for row in stored {
                    let want = try #require(expected[row.todo.id])
                    // Exactly once: one version per write, and the toggles' parity.
                    #expect(row.todo.version == want.writes, "seed \(seed)")
                    #expect(row.complete == (want.toggles % 2 == 1), "seed \(seed)")
                    #expect(row.title == want.title, "seed \(seed)")
                }
                let final = Dictionary(uniqueKeysWithValues: stored.map { ($0.todo.id, $0) })
                try await log.wait(for: "the view to converge (seed \(seed))") { _, list in list.todos == final }
                #expect(await client.outboxCount == 0)
                let resumed = await log.number { $0 == .connected(resumed: true) }
                #expect(resumed >= 1, "seed \(seed): no connection was resumed")
            }
        }
    }

    /// A client away while the journal dropped what it missed is told so (`gap`): its
    /// events carry `.reset`, it refetches, and its view converges.
    @Test func gapSurfacesAsAReset() async throws {
        try await withDaemon(
            storage: .sqlite,
            .custom({ options in
                options.retention = .init(maxEntries: 5, maxAgeSeconds: 0)
                options.maxBatch = 1
            })
        ) { daemon in
            let (writer, _) = try await daemon.client()
            let created = try await writer.createTodo("churn")
            let id = try #require(todoID(created).flatMap(UUID.init(uuidString:)))
            let proxy = try await CutProxy.start(to: daemon.tcpPort)
            defer { Task { await proxy.stop() } }
            try await withTestClient(try testConfiguration("tcp://127.0.0.1:\(proxy.port)")) { client, log in
                try await log.wait(for: "the list") { _, list in list.todos[id] != nil }
                proxy.refuse(true)
                try await log.wait(for: "the disconnect") { events, _ in events.contains(.disconnected) }
                for index in 0..<70 {
                    try await writer.send([
                        "type": "RequestToggleCompleteTodoViewModel", "id": "t\(index)",
                        "payload": ["todo": ["id": id.uuidString]],
                    ])
                    _ = try await writer.json { $0["re"] as? String == "t\(index)" }
                }
                proxy.refuse(false)
                try await log.wait(for: "the reset") { events, _ in events.contains(.reset(seq: 71)) }
                try await log.wait(for: "the refetched list") { _, list in list.todos[id]?.todo.version == 71 }
                #expect(await log.number { $0 == .connected(resumed: true) } == 1)
                _ = client
            }
        }
    }

    /// Writes made while disconnected wait in the outbox up to its bound; past it `send` and
    /// `request` throw `outboxFull`. Once connected again each waiting write is applied once.
    @Test func theOutboxIsBoundedAndDrainsOnReconnect() async throws {
        try await withDaemon { daemon in
            let proxy = try await CutProxy.start(to: daemon.tcpPort)
            defer { Task { await proxy.stop() } }
            let configuration = try testConfiguration("tcp://127.0.0.1:\(proxy.port)", outboxCapacity: 3)
            try await withTestClient(configuration) { client, log in
                try await log.wait(for: "the connection") { events, _ in events.contains(.connected(resumed: false)) }
                let id = try await client.create(title: "offline edits").todo.id
                proxy.refuse(true)
                try await log.wait(for: "the disconnect") { events, _ in events.contains(.disconnected) }
                for _ in 0..<3 {
                    try await client.send(.requestToggleCompleteTodoViewModel(TodoReference(id: id)))
                }
                #expect(await client.outboxCount == 3)
                do {
                    try await client.send(.requestDeleteTodoViewModel(TodoReference(id: id)))
                    Issue.record("a fourth write was accepted")
                } catch let error as ClientError {
                    #expect(error.code == .outboxFull)
                }
                do {
                    _ = try await client.list()
                    Issue.record("a request past the bound was accepted")
                } catch let error as ClientError {
                    #expect(error.code == .outboxFull)
                }
                proxy.refuse(false)
                try await log.wait(for: "the offline writes") { _, list in list.todos[id]?.todo.version == 4 }
                #expect(await client.outboxCount == 0)
                let stored = try await daemonList(daemon)
                #expect(stored.first?.todo.version == 4)
                #expect(stored.first?.complete == true)
                #expect(stored.first?.deleted == false)
            }
        }
    }
}

/// The daemon restarts (graceful: `draining`, then closed) on the same data: writes made
/// meanwhile wait in the outbox, the client reconnects and resumes in the same epoch, and
/// each write is applied once.
@Suite struct ClientRestartTests {
    @Test func writesMadeWhileTheDaemonRestartsAreAppliedOnceAfterIt() async throws {
        let directory = temporaryDirectory()
        let fastDrain = DaemonSetup.custom { $0.relay.drainReconnectAfterMs = 20 }
        let proxy = try await CutProxy.start(to: 1)
        defer { Task { await proxy.stop() } }
        try await withTestClient(try testConfiguration("tcp://127.0.0.1:\(proxy.port)")) { client, log in
            var id: UUID?
            try await withDaemon(storage: .sqlite, dataDirectory: directory, fastDrain) { daemon in
                proxy.retarget(to: daemon.tcpPort)
                id = try await client.create(title: "survives a restart").todo.id
            }
            let todo = try #require(id)
            try await log.wait(for: "the disconnect") { events, _ in events.contains(.disconnected) }
            try await client.send(.requestToggleCompleteTodoViewModel(TodoReference(id: todo)))
            try await client.send(
                .requestUpdateDetailViewModel(
                    TodoDetailInput(todo: TodoReference(id: todo), edit: TodoEdit(title: "edited offline"))
                )
            )
            try await withDaemon(storage: .sqlite, dataDirectory: directory, fastDrain) { daemon in
                proxy.retarget(to: daemon.tcpPort)
                try await log.wait(for: "the offline writes") { _, list in list.todos[todo]?.todo.version == 3 }
                let stored = try await daemonList(daemon)
                #expect(stored.first?.todo.version == 3)
                #expect(stored.first?.complete == true)
                #expect(stored.first?.title == "edited offline")
                #expect(await log.number { $0 == .connected(resumed: true) } >= 1)
                #expect(await log.number { if case .reset = $0 { return true } else { return false } } == 0)
                #expect(await client.outboxCount == 0)
            }
        }
    }
}

/// With view tokens configured, the client authenticates (`auth` on TCP, `Authorization:
/// Bearer` on the WebSocket upgrade) on every connection, before it resumes.
@Suite struct ClientTokenTests {
    let tokens = DaemonSetup.custom { $0.tokens = [TokenEntry(sha256: TokenEntry.digest("view-secret"), role: .view)] }

    @Test(arguments: TestTransport.allCases)
    func aGoodTokenIsSentOnEveryConnection(_ transport: TestTransport) async throws {
        try await withDaemon(tokens) { daemon in
            let proxy = try await CutProxy.start(to: transport.port(of: daemon))
            defer { Task { await proxy.stop() } }
            var configuration = try testConfiguration(transport.url(port: proxy.port))
            configuration.token = "view-secret"
            try await withTestClient(configuration) { client, log in
                let id = try await client.create(title: "authorised").todo.id
                proxy.cutAll()
                #expect(try await client.toggle(id).todo.version == 2)
                try await log.wait(for: "the resumed connection") { events, _ in
                    events.contains(.connected(resumed: true))
                }
            }
        }
    }

    /// An edit is of a stored todo: one the daemon does not know is `not_found`, and nothing is
    /// created (a save of an unknown id would be taken as a new todo's first save).
    @Test func editingATodoThatIsNotStoredIsNotFoundAndCreatesNothing() async throws {
        try await withDaemon { daemon in
            try await withTestClient(try testConfiguration(TestTransport.tcp.url(port: daemon.tcpPort))) { client, _ in
                let unknown = UUID()
                for edit in [TodoEdit(title: "ghost"), TodoEdit(subtitle: "x")] {
                    let error = await #expect(throws: AppError.self) { _ = try await client.edit(unknown, edit) }
                    #expect(error?.code == .notFound)
                }
                #expect(try await client.list().isEmpty)
                let id = try await client.create(title: "kept").todo.id
                #expect(try await client.edit(id, TodoEdit(subtitle: "changed")).subtitle == "changed")
            }
        }
    }

    /// A bad token is refused alike on every transport: on WebSocket the upgrade's token is
    /// not taken without a word (protocol §3), and the client's `auth` is answered. A daemon
    /// without view tokens (`withTokens` false) takes no token but a monitor's, so there too.
    @Test(arguments: TestTransport.allCases, [true, false])
    func aBadTokenFailsWhatWaitsAndStopsTheClient(_ transport: TestTransport, withTokens: Bool) async throws {
        try await withDaemon(withTokens ? tokens : DaemonSetup()) { daemon in
            var configuration = try testConfiguration(transport.url(port: transport.port(of: daemon)))
            configuration.token = "whatever1"
            configuration.requestTimeout = .seconds(10)
            try await withTestClient(configuration) { client, _ in
                let error = await #expect(throws: ClientError.self) { _ = try await client.list() }
                #expect(error?.code == .unauthorized)
                #expect(error?.message == "The token is not valid.")
                #expect(await client.stoppedBecause?.message == "The token is not valid.")
            }
        }
    }

    /// The daemon comes back with other tokens: the client's token is refused on the next
    /// connection and the client stops, instead of reconnecting for ever.
    @Test(arguments: TestTransport.allCases)
    func aTokenRefusedAfterARestartStopsTheClient(_ transport: TestTransport) async throws {
        let fastDrain: (inout DaemonOptions) -> Void = { $0.relay.drainReconnectAfterMs = 20 }
        let before = DaemonSetup.custom {
            fastDrain(&$0)
            $0.tokens = [TokenEntry(sha256: TokenEntry.digest("view-secret"), role: .view)]
        }
        let after = DaemonSetup.custom {
            fastDrain(&$0)
            $0.tokens = [TokenEntry(sha256: TokenEntry.digest("another-secret"), role: .view)]
        }
        let proxy = try await CutProxy.start(to: 1)
        defer { Task { await proxy.stop() } }
        var configuration = try testConfiguration(transport.url(port: proxy.port))
        configuration.token = "view-secret"
        configuration.requestTimeout = .seconds(10)
        try await withTestClient(configuration) { client, log in
            try await withDaemon(before) { daemon in
                proxy.retarget(to: transport.port(of: daemon))
                _ = try await client.create(title: "before the restart")
            }
            try await log.wait(for: "the disconnect") { events, _ in events.contains(.disconnected) }
            try await withDaemon(after) { daemon in
                proxy.retarget(to: transport.port(of: daemon))
                let error = await #expect(throws: ClientError.self) { _ = try await client.list() }
                #expect(error?.code == .unauthorized)
                #expect(await client.stoppedBecause?.message == "The token is not valid.")
            }
        }
    }
}

/// A request under the client's limit but over the daemon's `limits.max_frame_bytes` is
/// answered `frame_too_large` without `re`: the client matches it by order to the request it
/// answers, which fails at once; the requests around it are answered as usual.
@Suite struct ClientFrameLimitTests {
    @Test(arguments: TestTransport.allCases)
    func aRequestOverTheDaemonsFrameLimitFailsWithItsRefusal(_ transport: TestTransport) async throws {
        try await withDaemon(.custom({ $0.relay.maxFrameBytes = 1000 })) { daemon in
            var configuration = try testConfiguration(transport.url(port: transport.port(of: daemon)))
            configuration.requestTimeout = .seconds(10)
            try await withTestClient(configuration) { client, _ in
                // In flight together, so that the refusal has to be told from the answers around it.
                let small = Task { try await client.create(title: "fits") }
                let big = Task { try await client.create(title: String(repeating: "a", count: 900)) }
                let after = Task { try await client.create(title: "fits too") }
                let error = await #expect(throws: ClientError.self) { _ = try await big.value }
                #expect(error?.code == .rejected)
                #expect(error?.serverCode == "frame_too_large")
                #expect(error?.message.contains("Nothing was applied.") == true)
                let (first, last) = (try await small.value, try await after.value)
                #expect(first.todo.title == "fits")
                #expect(last.todo.title == "fits too")
                let stored = try await client.list()
                #expect(Set(stored.map(\.title)) == ["fits", "fits too"])
            }
        }
    }
}

/// An answer over the client's `maxFrameBytes` fails its request (`responseTooLarge`), which
/// leaves the outbox, instead of dropping the connection and asking again on every new one.
/// Over NDJSON the line is skipped and the connection goes on; over WebSocket the message
/// closes it, and the client resumes on the next.
@Suite struct ClientLargeAnswerTests {
    @Test(arguments: TestTransport.allCases)
    func anAnswerOverMaxFrameBytesFailsItsRequestOnly(_ transport: TestTransport) async throws {
        try await withDaemon { daemon in
            var configuration = try testConfiguration(transport.url(port: transport.port(of: daemon)))
            configuration.maxFrameBytes = 3000
            configuration.requestTimeout = .seconds(10)
            try await withTestClient(configuration) { client, log in
                // Each todo fits; the list of them does not.
                for index in 0..<4 {
                    _ = try await client.create(title: String(repeating: "\(index)", count: 900))
                }
                let error = await #expect(throws: ClientError.self) { _ = try await client.list() }
                #expect(error?.code == .responseTooLarge)
                #expect(await client.outboxCount == 0)
                let small = try await client.create(title: "small")
                #expect(small.todo.title == "small")
                #expect(await client.outboxCount == 0)
                if transport == .tcp {
                    #expect(await log.number { $0 == .disconnected } == 0)
                } else {
                    try await log.wait(for: "the resumed connection") { events, _ in
                        events.contains(.connected(resumed: true))
                    }
                }
                #expect(await log.number { if case .requestFailed = $0 { true } else { false } } == 1)
            }
        }
    }
}

/// A reader of `events` that falls behind by more than `eventBufferCapacity` is not fed an
/// unbounded buffer: what did not fit is dropped and the reader gets `.reset` before the
/// next event, so that it refetches.
@Suite struct ClientSlowReaderTests {
    @Test func aReaderTooFarBehindGetsAReset() async throws {
        try await withDaemon { daemon in
            var configuration = try testConfiguration("tcp://127.0.0.1:\(daemon.tcpPort)")
            configuration.eventBufferCapacity = 4
            let client = try TodostreamClient(configuration)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                var events = client.events.makeAsyncIterator()
                #expect(await events.next() == .connected(resumed: false))
                let (writer, _) = try await daemon.client()
                for index in 0..<6 { _ = try await writer.createTodo("flood \(index)") }
                // Answered after the six broadcasts: they have all reached the client.
                #expect(try await client.list().count == 6)
                var seqs: [UInt64?] = []
                for _ in 0..<4 {
                    if case .event(_, let seq) = await events.next() { seqs.append(seq) }
                }
                #expect(seqs == [1, 2, 3, 4])
                _ = try await writer.createTodo("after the flood")
                guard case .reset = await events.next() else {
                    Issue.record("the reader was not told that it missed events")
                    await client.close()
                    return
                }
                guard case .event(_, let seq) = await events.next() else {
                    Issue.record("no event after the reset")
                    await client.close()
                    return
                }
                #expect(seq == 7)
                await client.close()
                try await group.waitForAll()
            }
        }
    }
}

/// The library over TLS (`tls://`) and WebSocket over TLS (`wss://`), trusting the daemon's
/// certificate by a CA file.
@Suite struct ClientTLSTests {
    @Test(arguments: ["tls", "wss"])
    func listAndWritesOverTLS(_ scheme: String) async throws {
        let directory = temporaryDirectory()
        let files = try DevCertificate.ensure(in: directory)
        let setup = DaemonSetup.tls(files) { options in
            options.listeners.tls = .init(host: "127.0.0.1", port: 0)
            options.listeners.httpTLS = true
        }
        try await withDaemon(setup) { daemon in
            let url =
                scheme == "tls"
                ? "tls://localhost:\(try #require(daemon.addresses.tls?.port))"
                : "wss://localhost:\(daemon.httpPort)/events"
            var configuration = try testConfiguration(url)
            configuration.tls.caFile = files.certificatePath
            try await withTestClient(configuration) { client, log in
                let saved = try await client.create(title: "encrypted")
                #expect(try await client.list().map(\.todo.id) == [saved.todo.id])
                #expect(try await client.toggle(saved.todo.id).complete)
                try await log.wait(for: "the broadcast") { _, list in list.todos[saved.todo.id]?.complete == true }
            }
            // Without the CA the handshake fails and nothing is answered. The timeout leaves a
            // busy machine time for a first attempt to fail, whose reason the error names (2 s
            // was once too short, with the whole suite and other builds sharing two cores).
            var untrusting = try testConfiguration(url)
            untrusting.requestTimeout = .seconds(5)
            try await withTestClient(untrusting) { client, log in
                do {
                    _ = try await client.list()
                    Issue.record("an untrusted daemon answered")
                } catch let error as ClientError {
                    #expect(error.code == .timeout)
                    // And says why, not only that nothing came.
                    let why = "the last connection attempt failed: the daemon's certificate is not trusted"
                    #expect(error.message.contains(why), "\(error.message)")
                }
                // Each failed attempt is an event, with the same reason.
                try await log.wait(for: "the failed attempts") { events, _ in
                    events.contains(.unreachable(reason: "the daemon's certificate is not trusted (see --ca-file)"))
                }
                #expect(await log.number { $0 == .connected(resumed: false) } == 0)
            }
        }
    }
}

/// A small seeded generator, so that a failing run can be told by its seed.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
