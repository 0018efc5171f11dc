import NIOCore
import NIOPosix

/// One fan-out run: a publisher and N subscribers (some of which may never read).
struct FanoutRun {
    var common: CommonOptions
    var subscribers: Int
    /// todostreamd: ports the subscribers are spread over evenly (empty: the publisher's).
    var subscriberPorts: [Int] = []
    var slowSubscribers = 0
    var slowReceiveBufferBytes = 4_096
    /// Publishes per second; 0 = as fast as the window allows.
    var rate: Double
    var duration: Double
    var warmup: Double
    var window: Int
    var drain: Double
    /// todostreamd: requests sent but not yet answered (its `max_pipelined_frames` is 64).
    var pipeline = 64
    /// todostreamd: what the publisher sends.
    var publish = PublishKind.toggle

    struct Outcome {
        var fastSubscribers = 0
        var slowSubscribers = 0
        var setupFailures: [String: Int] = [:]
        var publishedTotal = 0
        var publishedInWindow = 0
        var deliveredInWindow = 0
        var seconds = 0.0
        var deliveredAfterDrain = 0
        var expectedAfterDrain = 0
        var rssBeforeKiB: Int?
        var rssPeakKiB: Int?
        var rssAfterKiB: Int?
        var stats = LoopSnapshot()
        /// Non-readers whose socket the server closed (by the kernel's TCP state).
        var slowClosedByServer = 0
        /// The server's CPU time over the measured window.
        var cpu = ServerCPUWindow(pid: nil)

        var deliveredPerSecond: Double { seconds > 0 ? Double(deliveredInWindow) / seconds : 0 }
        var publishesPerSecond: Double { seconds > 0 ? Double(publishedInWindow) / seconds : 0 }
    }

    func execute() async throws -> Outcome {
        try await withEventLoopGroup(threads: common.threads) { try await execute(group: $0) }
    }

    private func execute(group: MultiThreadedEventLoopGroup) async throws -> Outcome {
        let target = common.target
        // todostreamd: one send time per toggle, looked up by seq. Sized for the run.
        let capacity: Int
        if target == .todostreamd {
            capacity = rate > 0 ? Int(rate * (warmup + duration + 2)) + 16 : 4_000_000
        } else {
            capacity = 1
        }
        let run = RunState(group: group, sendTimeCapacity: capacity)
        let connector = try common.connector(group: group, run: run)
        var outcome = Outcome()

        // The publisher first: for todostreamd it creates the todo it will toggle, and the
        // seq of that broadcast is the base every later seq is counted from.
        var publisherSettings = common.settings(todoIDs: [randomUUID()])
        publisherSettings.publish = publish
        let publisher: ConnectionHandle
        do {
            publisher = try await connector.connect(
                index: 0,
                mode: .publisher,
                settings: publisherSettings,
                on: run.stats.loops[0]
            ).get()
        } catch {
            throw LoadError("the publisher could not be set up: \(error)")
        }

        let fast = subscribers - slowSubscribers
        let slowEvery = slowSubscribers > 0 ? max(subscribers / slowSubscribers, 1) : 0
        let settings = common.settings()
        let slowCount = slowSubscribers
        let slowBuffer = slowReceiveBufferBytes
        let isSlow: @Sendable (Int) -> Bool = { index in
            slowEvery > 0 && index % slowEvery == slowEvery - 1 && index / slowEvery < slowCount
        }
        // Several daemons: one connector per subscriber port, each taking an even share of the
        // subscribers (and its own range of source addresses).
        let subscriberConnectors =
            try subscriberPorts.isEmpty
            ? [connector]
            : subscriberPorts.map { port in
                var endpoint = common.endpoint
                endpoint.port = port
                return try common.connector(group: group, run: run, endpoint: endpoint)
            }
        var handles: [ConnectionHandle] = []
        var first = 0
        for (position, subscriberConnector) in subscriberConnectors.enumerated() {
            let count = subscriberConnectors.count
            let share = subscribers / count + (position < subscribers % count ? 1 : 0)
            let base = first
            let (some, failures) = await subscriberConnector.connectMany(
                count: share,
                startIndex: 1 + base,
                mode: { isSlow(base + $0) ? .slowSubscriber : .subscriber },
                settings: { _ in settings },
                receiveBufferBytes: { isSlow(base + $0) ? slowBuffer : nil }
            )
            handles += some
            outcome.setupFailures.merge(failures, uniquingKeysWith: +)
            first += share
        }
        let fastUp = try await withThrowingTaskGroup(of: Bool.self) { tasks in
            for handle in handles {
                tasks.addTask { try await handle.withConnection { $0.mode == .subscriber }.get() ?? false }
            }
            var count = 0
            for try await isFast in tasks where isFast { count += 1 }
            return count
        }
        outcome.fastSubscribers = fastUp
        outcome.slowSubscribers = handles.count - fastUp
        guard fastUp > 0 else {
            await connector.closeAll(handles + [publisher])
            throw LoadError("no subscriber could be set up: \(describe(setupFailures: outcome.setupFailures))")
        }
        _ = fast

        await sleep(seconds: 0.2)
        outcome.rssBeforeKiB = common.residentKiB()
        let sampler = PeakSampler(pid: common.pid)
        outcome.cpu = ServerCPUWindow(pid: common.pid)

        let box = publisher.box
        run.waker.set { box.eventLoop.execute { box.value?.pump() } }
        let pipeline = target == .todostreamd ? self.pipeline : 0
        let window = self.window
        let rate = self.rate
        let limit = target == .todostreamd ? capacity - 1 : Int.max
        _ = try await publisher.withConnection {
            $0.startPublishing(rate: rate, window: window, subscribers: fastUp, maxPipeline: pipeline, limit: limit)
        }.get()

        await sleep(seconds: warmup)
        outcome.cpu.start()
        let start = Clock.now()
        run.measureStart.store(start, ordering: .relaxed)
        let deliveredAtStart = run.progress.load(ordering: .relaxed)
        let publishedAtStart = run.published.load(ordering: .relaxed)
        await sleep(seconds: duration)
        let end = Clock.now()
        run.measureEnd.store(end, ordering: .relaxed)
        let deliveredAtEnd = run.progress.load(ordering: .relaxed)
        let publishedAtEnd = run.published.load(ordering: .relaxed)
        outcome.cpu.stop()
        let published =
            try await publisher.withConnection { connection -> Int in
                connection.stopPublishing()
                return connection.publishedCount
            }.get() ?? publishedAtEnd

        // Let what was published arrive, so the tail of the latency is not cut off.
        // Stops at `drain` seconds, or once nothing arrived for 2 s.
        let expected = published * fastUp
        let drainUntil = Clock.now() + UInt64(drain * 1e9)
        var lastProgress = run.progress.load(ordering: .relaxed)
        var lastChange = Clock.now()
        while lastProgress < expected, Clock.now() < drainUntil, Clock.now() - lastChange < 2_000_000_000 {
            await sleep(seconds: 0.02)
            let progress = run.progress.load(ordering: .relaxed)
            if progress != lastProgress {
                lastProgress = progress
                lastChange = Clock.now()
            }
        }
        outcome.rssPeakKiB = await sampler.stop()
        outcome.rssAfterKiB = common.residentKiB()
        outcome.publishedTotal = published
        outcome.publishedInWindow = publishedAtEnd - publishedAtStart
        outcome.deliveredInWindow = deliveredAtEnd - deliveredAtStart
        outcome.seconds = Clock.seconds(end - start)
        outcome.deliveredAfterDrain = run.progress.load(ordering: .relaxed)
        outcome.expectedAfterDrain = expected
        outcome.stats = try await run.stats.collect()
        if slowSubscribers > 0 {
            // Non-readers do not read, so they never notice the server closing them (its FIN
            // waits behind the unread data): ask the kernel about both ends.
            let states = SystemProbe.tcpSocketStates()
            for handle in handles {
                let isSlow = try await handle.withConnection { $0.mode == .slowSubscriber }.get() ?? false
                guard isSlow else { continue }
                let clientState = await handle.tcpState()
                let serverGone = handle.serverSideClosed(in: states) ?? false
                if serverGone || (clientState.map { $0 != 1 } ?? !handle.channel.isActive) {
                    outcome.slowClosedByServer += 1
                }
            }
        }
        await connector.closeAll(handles + [publisher])
        return outcome
    }
}

extension FanoutRun.Outcome {
    /// Adds the run's results to `report`.
    func fill(_ report: inout Report) {
        report.set("subscribers", fastSubscribers)
        if slowSubscribers > 0 { report.set("slow_subscribers", slowSubscribers) }
        report.set("duration_s", (seconds * 1_000).rounded() / 1_000)
        report.set("published", publishedInWindow)
        report.set("publishes_per_s", publishesPerSecond.rounded())
        report.set("delivered", deliveredInWindow)
        report.set("delivered_per_s", deliveredPerSecond.rounded())
        report.setLatency(stats.latency)
        report.set("undelivered", max(expectedAfterDrain - deliveredAfterDrain, 0))
        report.set("gaps", stats.gaps)
        report.set("duplicates", stats.duplicates)
        report.set("unmatched", stats.unmatched)
        report.set("seq_mismatches", stats.seqMismatches)
        report.set("closed_by_server", stats.closedByPeer)
        if slowSubscribers > 0 { report.set("slow_closed_by_server", slowClosedByServer) }
        if stats.deliveries > 0 {
            report.set("bytes_per_message", (Double(stats.receivedBytes) / Double(stats.deliveries)).rounded())
        }
        cpu.fill(&report, count: deliveredInWindow, unit: "message")
        report.set("errors", counts: stats.errors)
        report.set("setup_failures", counts: setupFailures)
        if let rssBeforeKiB { report.set("rss_before_kib", rssBeforeKiB) }
        if let rssPeakKiB { report.set("rss_peak_kib", rssPeakKiB) }
        if let rssAfterKiB { report.set("rss_after_kib", rssAfterKiB) }
    }

    var problemsText: String {
        var parts: [String] = []
        if deliveredInWindow == 0 { parts.append("nothing delivered in the measured window") }
        let lost = max(expectedAfterDrain - deliveredAfterDrain, 0)
        if lost > 0 { parts.append("undelivered after drain \(lost)") }
        if stats.gaps > 0 { parts.append("gaps \(stats.gaps)") }
        if stats.duplicates > 0 { parts.append("duplicates \(stats.duplicates)") }
        if stats.unmatched > 0 { parts.append("unmatched \(stats.unmatched)") }
        if stats.seqMismatches > 0 { parts.append("seq mismatches \(stats.seqMismatches)") }
        if stats.closedByPeer > 0 { parts.append("closed by server \(stats.closedByPeer)") }
        if !stats.errors.isEmpty {
            parts.append(
                "errors "
                    + stats.errors.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            )
        }
        if !setupFailures.isEmpty { parts.append("setup failures \(setupFailures.values.reduce(0, +))") }
        return parts.isEmpty ? "no loss, no errors" : parts.joined(separator: "; ")
    }
}
