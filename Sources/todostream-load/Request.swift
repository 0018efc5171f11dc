import ArgumentParser
import NIOCore
import NIOPosix

/// C clients, each sending a state-changing request and waiting for its own broadcast before
/// the next.
struct Request: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "C clients each sending a request and waiting for its broadcast: requests/s and latency.",
        discussion: """
            todostreamd: each client toggles a todo of its own (a durable write) and waits for \
            its copy of the broadcast (the one with `re`). By default the clients unsubscribe \
            from Response* first, so each receives only its own copies; --subscribed keeps them \
            subscribed, and every toggle then also goes to the other C-1 clients. Peers: each \
            client publishes to a subject/channel of its own and waits for the message to come \
            back through the server (redis: on a second connection; nothing is durable there).
            """
    )

    @OptionGroup var common: CommonOptions

    @Option(help: "Clients.")
    var clients = 16

    @Option(help: "Seconds measured (after the warm-up).")
    var duration: Double = 5

    @Option(help: "Seconds of requests before measuring.")
    var warmup: Double = 1

    @Flag(help: "todostreamd: keep the clients subscribed to every broadcast.")
    var subscribed = false

    func validate() throws {
        guard (1...10_000).contains(clients) else { throw ValidationError("--clients must be 1…10000.") }
        guard duration > 0, duration <= 600, warmup >= 0, warmup <= 60 else {
            throw ValidationError("--duration ≤ 600 s and --warmup ≤ 60 s.")
        }
    }

    func run() async throws {
        try await withEventLoopGroup(threads: common.threads) { try await measure(group: $0) }
    }

    private func measure(group: MultiThreadedEventLoopGroup) async throws {
        SystemProbe.raiseFileLimit(to: 2 * clients + 1_024)
        let run = RunState(group: group, sendTimeCapacity: 1)
        let connector = try Connector(
            group: group,
            endpoint: common.endpoint,
            run: run,
            perAddress: common.perAddress,
            firstAddress: common.firstAddress
        )
        var handles: [ConnectionHandle] = []
        var failures: [String: Int] = [:]
        var requesters: [ConnectionHandle] = []
        let subscribed = self.subscribed
        for client in 0..<clients {
            let loop = group.next()
            var settings = common.settings(todoID: randomUUID(), subject: "r.\(client)")
            settings.requestersSubscribed = subscribed
            do {
                switch common.target {
                case .todostreamd:
                    let handle = try await connector.connect(
                        index: client,
                        mode: .requester,
                        settings: settings,
                        on: loop
                    ).get()
                    requesters.append(handle)
                    handles.append(handle)
                case .nats:
                    let subject = settings.subject
                    let handle = try await connector.connect(
                        index: client,
                        mode: .requester,
                        settings: settings,
                        on: loop,
                        configure: { ($0 as? NatsConnection)?.requestSubject = subject }
                    ).get()
                    requesters.append(handle)
                    handles.append(handle)
                case .redis:
                    let publisher = try await connector.connect(
                        index: 2 * client,
                        mode: .requestPublisher,
                        settings: settings,
                        on: loop
                    ).get()
                    handles.append(publisher)
                    let box = publisher.box
                    let channel = settings.subject
                    let handle = try await connector.connect(
                        index: 2 * client + 1,
                        mode: .requester,
                        settings: settings,
                        on: loop,
                        configure: { connection in
                            guard let redis = connection as? RedisConnection else { return }
                            redis.requestChannel = channel
                            redis.partner = box.value as? RedisConnection
                        }
                    ).get()
                    requesters.append(handle)
                    handles.append(handle)
                }
            } catch {
                failures["\(error)", default: 0] += 1
            }
        }
        guard !requesters.isEmpty else {
            await connector.closeAll(handles)
            throw LoadError("no client came up: \(failures)")
        }
        let rssBefore = common.residentKiB()
        let sampler = PeakSampler(pid: common.pid)
        run.running.store(true, ordering: .relaxed)
        for handle in requesters { _ = handle.withConnection { $0.startRequests() } }

        await sleep(seconds: warmup)
        let start = Clock.now()
        run.measureStart.store(start, ordering: .relaxed)
        let doneAtStart = run.progress.load(ordering: .relaxed)
        await sleep(seconds: duration)
        let end = Clock.now()
        run.measureEnd.store(end, ordering: .relaxed)
        let doneAtEnd = run.progress.load(ordering: .relaxed)
        run.running.store(false, ordering: .relaxed)
        await sleep(seconds: 0.5)
        let rssPeak = await sampler.stop()
        let stats = try await run.stats.collect()
        await connector.closeAll(handles)

        let seconds = Clock.seconds(end - start)
        let perSecond = seconds > 0 ? Double(doneAtEnd - doneAtStart) / seconds : 0
        var report = common.report(scenario: "request")
        report.set("clients", requesters.count)
        if common.target == .todostreamd { report.set("subscribed", subscribed) }
        report.set("duration_s", (seconds * 1_000).rounded() / 1_000)
        report.set("requests", doneAtEnd - doneAtStart)
        report.set("requests_per_s", perSecond.rounded())
        report.setLatency(stats.latency)
        report.set("closed_by_server", stats.closedByPeer)
        report.set("errors", counts: stats.errors)
        report.set("setup_failures", counts: failures)
        if let rssBefore { report.set("rss_before_kib", rssBefore) }
        if let rssPeak { report.set("rss_peak_kib", rssPeak) }
        var problems: [String] = []
        if stats.closedByPeer > 0 { problems.append("closed by server \(stats.closedByPeer)") }
        if !stats.errors.isEmpty {
            problems.append(
                "errors "
                    + stats.errors.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            )
        }
        if !failures.isEmpty { problems.append("setup failures \(failures.values.reduce(0, +))") }
        let h = stats.latency
        emit(
            report,
            human: "request \(common.serverName) clients=\(requesters.count): \(grouped(perSecond)) req/s; "
                + "p50 \(decimals(Report.milliseconds(h.value(atQuantile: 0.5)), 3)) ms, "
                + "p99 \(decimals(Report.milliseconds(h.value(atQuantile: 0.99)), 3)) ms, "
                + "p99.9 \(decimals(Report.milliseconds(h.value(atQuantile: 0.999)), 3)) ms; "
                + (problems.isEmpty ? "no errors" : problems.joined(separator: "; "))
        )
    }
}
