import ArgumentParser
import NIOCore
import NIOPosix

/// C clients, each sending a request and waiting for its answer before the next.
struct Request: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "C clients each sending a request and waiting for its answer: requests/s and latency.",
        discussion: [overview, PublishKind.discussion, cpuNote, exitStatusNote].joined(separator: "\n\n")
    )

    private static let overview = """
        todostreamd: each client sends requests about a todo of its own, or about \
        --todos-per-client todos of its own in turn (--publish; by default it toggles it, a \
        durable write) and waits for each one's answer before the next: for a \
        toggle its copy of the broadcast (the one with `re`). By default the clients \
        unsubscribe from Response* first, so each receives only its own replies and copies; \
        --subscribed keeps them subscribed, and every broadcast then also goes to the other \
        C-1 clients. Latency runs from the send of a request to the last frame answering it. \
        `requests`, requests/s and the latencies are of one set: the requests sent within the \
        measured window and answered without an error (by 0.5 s after it); those sent within \
        it and answered with an error are reported as `failed` (and by code under `errors`).

        Peers: each client publishes --payload-bytes to a subject/channel of its own and waits \
        for the message to come back through the server (redis: on a second connection; \
        nothing is durable there). redis with --durable: each client sends \
        `SET key:<client> <--payload-bytes value>` on one connection and waits for its `+OK` — \
        durable only when redis-server runs with `--appendonly yes --appendfsync always` \
        (the result records what the server reports for both, from CONFIG GET). Compare it \
        with todostreamd's `--publish edit`, whose every save is committed before its answer.
        """

    private static let cpuNote = """
        With --pid, the server's CPU time over the measured window (/proc/PID/stat, utime + \
        stime) is reported per request answered.
        """

    @OptionGroup var common: CommonOptions

    @Option(help: "Clients.")
    var clients = 16

    @Option(help: "Seconds measured (after the warm-up).")
    var duration: Double = 5

    @Option(help: "Seconds of requests before measuring.")
    var warmup: Double = 1

    @Flag(help: "todostreamd: keep the clients subscribed to every broadcast.")
    var subscribed = false

    @Option(help: PublishKind.helpText)
    var publish = PublishKind.toggle

    @Flag(help: "redis: SET key:<client> <--payload-bytes value> and wait for +OK (use --appendfsync always).")
    var durable = false

    @Option(
        help: """
            todostreamd: todos each client creates before the measured run and sends its requests \
            about, one after another (a delete's restore goes to the todo it deleted).
            """
    )
    var todosPerClient = 1

    func validate() throws {
        guard (1...10_000).contains(clients) else { throw ValidationError("--clients must be 1…10000.") }
        guard duration > 0, duration <= 600, warmup >= 0, warmup <= 60 else {
            throw ValidationError("--duration ≤ 600 s and --warmup ≤ 60 s.")
        }
        guard !durable || publish != .ping else {
            throw ValidationError("--durable and --publish ping exclude each other.")
        }
        guard !durable || common.target == .redis else {
            throw ValidationError("--durable applies to redis only (todostreamd's writes are always durable).")
        }
        guard (1...10_000).contains(todosPerClient) else {
            throw ValidationError("--todos-per-client must be 1…10000.")
        }
        guard todosPerClient == 1 || common.target == .todostreamd else {
            throw ValidationError("--todos-per-client applies to todostreamd only.")
        }
        guard publish != .mixed || common.target == .todostreamd else {
            throw ValidationError("--publish mixed applies to todostreamd only.")
        }
        guard publish == .toggle || common.target != .todostreamd || common.payloadBytes <= 10_000 else {
            throw ValidationError("--publish \(publish.rawValue): --payload-bytes is a subtitle, at most 10000.")
        }
    }

    func run() async throws {
        try await withEventLoopGroup(threads: common.threads) { try await measure(group: $0) }
    }

    private func measure(group: MultiThreadedEventLoopGroup) async throws {
        SystemProbe.raiseFileLimit(to: 2 * clients + 1_024)
        let run = RunState(group: group, sendTimeCapacity: 1)
        let connector = try common.connector(group: group, run: run)
        var handles: [ConnectionHandle] = []
        var failures: [String: Int] = [:]
        var requesters: [ConnectionHandle] = []
        // A batch of clients at a time, each batch's setups under way together: a server that
        // never answers costs one --setup-timeout, not one per client.
        var next = 0
        while next < clients {
            let end = min(next + 256, clients)
            let futures = (next..<end).map { connectClient($0, connector: connector, on: group.next()) }
            for future in futures {
                do {
                    let (requester, all) = try await future.get()
                    requesters.append(requester)
                    handles += all
                } catch {
                    failures["\(error)", default: 0] += 1
                }
            }
            // Not one client came up: the next ones would not either.
            guard !requesters.isEmpty else { break }
            next = end
        }
        guard !requesters.isEmpty else {
            await connector.closeAll(handles)
            throw LoadError("no client could be set up: \(describe(setupFailures: failures))")
        }
        // What redis says about its durability (from the first client's CONFIG GET).
        var redisSettings: (appendOnly: String?, appendFsync: String?) = (nil, nil)
        if durable, let first = requesters.first {
            redisSettings =
                try await first.withConnection { connection -> (String?, String?) in
                    let redis = connection as? RedisConnection
                    return (redis?.appendOnly, redis?.appendFsync)
                }.get() ?? (nil, nil)
        }
        let rssBefore = common.residentKiB()
        let sampler = PeakSampler(pid: common.pid)
        var cpu = ServerCPUWindow(pid: common.pid)
        run.running.store(true, ordering: .relaxed)
        for handle in requesters { _ = handle.withConnection { $0.startRequests() } }

        await sleep(seconds: warmup)
        cpu.start()
        let start = Clock.now()
        run.measureStart.store(start, ordering: .relaxed)
        await sleep(seconds: duration)
        let end = Clock.now()
        run.measureEnd.store(end, ordering: .relaxed)
        cpu.stop()
        run.running.store(false, ordering: .relaxed)
        await sleep(seconds: 0.5)
        let rssPeak = await sampler.stop()
        let stats = try await run.stats.collect()
        await connector.closeAll(handles)

        let seconds = Clock.seconds(end - start)
        // The requests sent within the window and answered without an error (by the time the
        // answers stopped coming): the same set the latencies are of.
        let done = Int(stats.latency.count)
        let perSecond = seconds > 0 ? Double(done) / seconds : 0
        var report = common.report(scenario: "request")
        report.set("clients", requesters.count)
        if durable {
            report.set("durable", true)
            report.set("command", "SET")
            report.set("appendonly", redisSettings.appendOnly.map(Report.Value.string) ?? .null)
            report.set("appendfsync", redisSettings.appendFsync.map(Report.Value.string) ?? .null)
        } else {
            report.set("publish", publish.rawValue)
        }
        report.set("payload_bytes", common.payloadBytes)
        if common.target == .todostreamd {
            report.set("subscribed", subscribed)
            report.set("todos_per_client", todosPerClient)
        }
        report.set("duration_s", (seconds * 1_000).rounded() / 1_000)
        report.set("requests", done)
        report.set("requests_per_s", perSecond.rounded())
        report.setLatency(stats.latency)
        report.set("failed", stats.failedRequests)
        report.set("failed_per_s", seconds > 0 ? (Double(stats.failedRequests) / seconds).rounded() : 0)
        if !stats.kinds.isEmpty, publish == .mixed { report.set("by_kind", Self.byKind(stats, seconds: seconds)) }
        cpu.fill(&report, count: done + stats.failedRequests, unit: "request")
        report.set("closed_by_server", stats.closedByPeer)
        report.set("errors", counts: stats.errors)
        report.set("setup_failures", counts: failures)
        if let rssBefore { report.set("rss_before_kib", rssBefore) }
        if let rssPeak { report.set("rss_peak_kib", rssPeak) }
        var problems: [String] = []
        if stats.failedRequests > 0 { problems.append("failed \(stats.failedRequests)") }
        if stats.closedByPeer > 0 { problems.append("closed by server \(stats.closedByPeer)") }
        if !stats.errors.isEmpty {
            problems.append(
                "errors "
                    + stats.errors.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            )
        }
        if !failures.isEmpty { problems.append("setup failures \(failures.values.reduce(0, +))") }
        if durable, redisSettings.appendFsync != "always" || redisSettings.appendOnly != "yes" {
            problems.append(
                "NOT durable: appendonly \(redisSettings.appendOnly ?? "?"), appendfsync \(redisSettings.appendFsync ?? "?")"
            )
        }
        let what: String
        if durable {
            what = "durable SET, appendfsync \(redisSettings.appendFsync ?? "?")"
        } else if publish == .ping {
            what = "ping"
        } else if common.target == .todostreamd {
            what = todosPerClient == 1 ? publish.rawValue : "\(publish.rawValue), \(todosPerClient) todos each"
        } else {
            what = "echo"
        }
        var human =
            "request \(common.serverName) (\(what)) clients=\(requesters.count): \(grouped(perSecond)) req/s; "
            + latencyText(stats.latency) + cpu.text(count: done + stats.failedRequests, unit: "request") + "; "
            + (problems.isEmpty ? "no errors" : problems.joined(separator: "; "))
        if publish == .mixed {
            for kind in RequestKind.allCases where !stats.kinds.isEmpty {
                let counts = stats.kinds[kind.rawValue]
                guard counts.answered + counts.failed > 0 else { continue }
                human += "\n  \(kind.name): \(grouped(Double(counts.answered) / max(seconds, 1e-9))) req/s; "
                human += latencyText(counts.latency) + (counts.failed > 0 ? "; failed \(counts.failed)" : "")
            }
        }
        emit(report, human: human)
        try failIfNothingMeasured(done == 0, "no request sent within the measured window was answered without an error")
    }

    /// Connects client `client`: its requester, and the connections it is made of (redis
    /// without --durable: a publisher, then the requester receiving through it).
    private func connectClient(
        _ client: Int,
        connector: Connector,
        on loop: any EventLoop
    ) -> EventLoopFuture<(requester: ConnectionHandle, all: [ConnectionHandle])> {
        var settings = common.settings(
            todoIDs: (0..<todosPerClient).map { _ in randomUUID() },
            subject: "r.\(client)"
        )
        settings.requestersSubscribed = subscribed
        settings.publish = publish
        settings.client = client
        let configure: (@Sendable (LineConnection) -> Void)?
        switch common.target {
        case .todostreamd:
            configure = nil
        case .nats:
            let subject = settings.subject
            configure = { ($0 as? NatsConnection)?.requestSubject = subject }
        case .redis where durable || publish == .ping:
            // One connection: a SET key, or pings.
            let key = durable ? "key:\(client)" : nil
            configure = { ($0 as? RedisConnection)?.durableKey = key }
        case .redis:
            let requesterSettings = settings
            return connector.connect(index: 2 * client, mode: .requestPublisher, settings: settings, on: loop)
                .flatMap { publisher in
                    let box = publisher.box
                    let channel = requesterSettings.subject
                    return connector.connect(
                        index: 2 * client + 1,
                        mode: .requester,
                        settings: requesterSettings,
                        on: loop,
                        configure: { connection in
                            guard let redis = connection as? RedisConnection else { return }
                            redis.requestChannel = channel
                            redis.partner = box.value as? RedisConnection
                        }
                    ).map { (requester: $0, all: [publisher, $0]) }.flatMapErrorThrowing { error in
                        publisher.channel.close(promise: nil)
                        throw error
                    }
                }
        }
        return connector.connect(index: client, mode: .requester, settings: settings, on: loop, configure: configure)
            .map { (requester: $0, all: [$0]) }
    }

    /// `by_kind`: per request kind, answers in the window, their share, rate and latencies.
    static func byKind(_ stats: LoopSnapshot, seconds: Double) -> Report.Value {
        let total = stats.kinds.reduce(0) { $0 + $1.answered + $1.failed }
        var kinds: [(String, Report.Value)] = []
        for kind in RequestKind.allCases where RequestKind.mix.contains(kind) {
            let counts = stats.kinds[kind.rawValue]
            let h = counts.latency
            let share = total > 0 ? Double(counts.answered + counts.failed) / Double(total) : 0
            kinds.append(
                (
                    kind.name,
                    .object([
                        ("requests", .int(counts.answered)),
                        ("failed", .int(counts.failed)),
                        ("share", .double((share * 1_000).rounded() / 1_000)),
                        ("requests_per_s", .double(seconds > 0 ? (Double(counts.answered) / seconds).rounded() : 0)),
                        ("p50_ms", Report.quantile(h, 0.5)),
                        ("p99_ms", Report.quantile(h, 0.99)),
                        ("p999_ms", Report.quantile(h, 0.999)),
                    ])
                )
            )
        }
        return .object(kinds)
    }
}
