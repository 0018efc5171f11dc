import ArgumentParser

/// N subscribers, one publisher: delivered messages/s and publish→receive latency.
struct Fanout: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "N subscribers and one publisher: delivered messages/s, publish→receive latency.",
        discussion: [overview, PublishKind.discussion, exitStatusNote].joined(separator: "\n\n")
    )

    private static let overview = """
        todostreamd: the publisher toggles one todo it created (each toggle a durable state \
        change broadcast to every client as ResponseTodoViewModel), or with --publish edit \
        saves it with a subtitle of --payload-bytes (each save broadcast as a \
        ResponseTodoViewModel carrying the whole todo); latency runs from the send of the \
        request to the receipt of the broadcast with its seq. With --publish mixed the \
        publisher's reads go between the broadcasting requests (only those are messages). \
        Unthrottled, at most --pipeline requests are unanswered (a request is answered once \
        every frame it causes for the publisher arrived). Peers: the publisher sends \
        --payload-bytes messages carrying their send time, whatever --publish says. With \
        --subscriber-port (several daemons on one PostgreSQL), the subscribers are spread over \
        those daemons while the publisher stays on --port: the latency of a subscriber on \
        another daemon is that of the cross-daemon path. With --pid, the server's CPU time \
        over the measured window (/proc/PID/stat) is reported per delivered message.
        """

    @OptionGroup var common: CommonOptions

    @Option(help: "Subscribers.")
    var subscribers = 100

    @Option(help: PublishKind.helpText)
    var publish = PublishKind.toggle

    @Option(
        name: .customLong("subscriber-port"),
        help: ArgumentHelp(
            "todostreamd: a port the subscribers connect to instead of --port; repeat it to spread them evenly "
                + "over several daemons (the publisher stays on --port)."
        )
    )
    var subscriberPorts: [Int] = []

    @Option(help: "Publishes per second; 0 publishes as fast as the window allows.")
    var rate: Double = 0

    @Option(help: "Seconds measured (after the warm-up).")
    var duration: Double = 5

    @Option(help: "Seconds of publishing before measuring.")
    var warmup: Double = 1

    @Option(help: "Unthrottled: messages published but not yet delivered to every subscriber.")
    var window = 256

    @Option(help: "todostreamd: requests in flight at most (the daemon reads ahead 64 by default).")
    var pipeline = 64

    @Option(
        help: "Seconds at most to wait for the last messages after publishing stops (or until 2 s pass without any)."
    )
    var drain: Double = 15

    func validate() throws {
        guard (1...60_000).contains(subscribers) else { throw ValidationError("--subscribers must be 1…60000.") }
        guard rate >= 0, rate <= 1_000_000 else { throw ValidationError("--rate must be 0…1000000.") }
        guard duration > 0, duration <= 600, warmup >= 0, warmup <= 60, drain >= 0, drain <= 60 else {
            throw ValidationError("--duration ≤ 600 s, --warmup ≤ 60 s and --drain ≤ 60 s.")
        }
        guard window >= 1 else { throw ValidationError("--window must be at least 1.") }
        guard pipeline >= 1 else { throw ValidationError("--pipeline must be at least 1.") }
        guard subscriberPorts.isEmpty || common.target == .todostreamd else {
            throw ValidationError("--subscriber-port applies to todostreamd only.")
        }
        guard publish != .ping else {
            throw ValidationError("--publish ping applies to request only (a pong is no broadcast).")
        }
        guard publish != .mixed || common.target == .todostreamd else {
            throw ValidationError("--publish mixed applies to todostreamd only.")
        }
        guard publish == .toggle || common.target != .todostreamd || common.payloadBytes <= 10_000 else {
            throw ValidationError("--publish \(publish.rawValue): --payload-bytes is a subtitle, at most 10000.")
        }
        guard subscriberPorts.allSatisfy({ (1...65_535).contains($0) }) else {
            throw ValidationError("--subscriber-port must be 1…65535.")
        }
    }

    func run() async throws {
        SystemProbe.raiseFileLimit(to: subscribers + 1_024)
        let outcome = try await FanoutRun(
            common: common,
            subscribers: subscribers,
            subscriberPorts: subscriberPorts,
            rate: rate,
            duration: duration,
            warmup: warmup,
            window: window,
            drain: drain,
            pipeline: pipeline,
            publish: publish
        ).execute()
        var report = common.report(scenario: "fanout")
        report.set("rate", rate > 0 ? .double(rate) : .string("max"))
        report.set("publish", publish.rawValue)
        report.set("payload_bytes", common.payloadBytes)
        if !subscriberPorts.isEmpty {
            report.set("subscriber_ports", subscriberPorts.map(String.init).joined(separator: ","))
        }
        if rate == 0 {
            report.set("window", window)
            if common.target == .todostreamd { report.set("pipeline", pipeline) }
        }
        outcome.fill(&report)
        let mode = (rate > 0 ? "\(grouped(rate)) pub/s" : "unthrottled") + ", \(publish.rawValue)"
        let spread =
            subscriberPorts.isEmpty
            ? ""
            : " (publisher on \(common.port), subscribers on \(subscriberPorts.map(String.init).joined(separator: "+")))"
        emit(
            report,
            human: "fanout \(common.serverName) subscribers=\(outcome.fastSubscribers)\(spread) \(mode): "
                + "\(grouped(outcome.deliveredPerSecond)) msg/s delivered "
                + "(\(grouped(outcome.publishesPerSecond)) pub/s); \(latencyText(outcome.stats.latency))"
                + outcome.cpu.text(count: outcome.deliveredInWindow, unit: "message") + "; \(outcome.problemsText)"
        )
        try failIfNothingMeasured(outcome.deliveredInWindow == 0, "nothing was delivered in the measured window")
    }
}
