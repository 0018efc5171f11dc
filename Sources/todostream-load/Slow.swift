import ArgumentParser

/// A share of the subscribers never read: do the others keep their throughput, and does the
/// server's memory stay within its bounds?
struct Slow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fan-out where a share of subscribers never read: the others' throughput and the server's RSS.",
        discussion: """
            Runs twice: first the reading subscribers alone (the baseline), then the same with \
            the non-reading ones added. Reports both throughputs, their ratio, the server's RSS \
            growth and how many non-reading subscribers the server closed.

            """ + exitStatusNote
    )

    @OptionGroup var common: CommonOptions

    @Option(help: "Subscribers in all, readers and non-readers.")
    var subscribers = 1_000

    @Option(name: .customLong("slow-share"), help: "Share of the subscribers that never read (0…0.9).")
    var slowShare = 0.1

    @Option(name: .customLong("slow-rcvbuf"), help: "SO_RCVBUF of the non-readers, in bytes.")
    var slowReceiveBuffer = 4_096

    @Option(help: "Publishes per second; 0 publishes as fast as the window allows.")
    var rate: Double = 0

    @Option(help: "Seconds measured per phase.")
    var duration: Double = 5

    @Option(help: "Seconds of publishing before measuring.")
    var warmup: Double = 1

    @Option(help: "Unthrottled: messages published but not yet delivered to every reader.")
    var window = 256

    @Option(
        name: .customLong("queue-bytes"),
        help: "The server's configured outbound bound per connection (for the report), bytes."
    )
    var queueBytes: Int?

    func validate() throws {
        guard (2...60_000).contains(subscribers) else { throw ValidationError("--subscribers must be 2…60000.") }
        guard slowShare > 0, slowShare <= 0.9 else { throw ValidationError("--slow-share must be in (0, 0.9].") }
        guard duration > 0, duration <= 600, warmup >= 0, warmup <= 60 else {
            throw ValidationError("--duration ≤ 600 s and --warmup ≤ 60 s.")
        }
    }

    func run() async throws {
        SystemProbe.raiseFileLimit(to: subscribers + 1_024)
        let slow = max(1, Int((Double(subscribers) * slowShare).rounded()))
        let readers = subscribers - slow
        var base = FanoutRun(
            common: common,
            subscribers: readers,
            rate: rate,
            duration: duration,
            warmup: warmup,
            window: window,
            drain: 2
        )
        let baseline = try await base.execute()
        await sleep(seconds: 1)
        base.subscribers = subscribers
        base.slowSubscribers = slow
        base.slowReceiveBufferBytes = slowReceiveBuffer
        let mixed = try await base.execute()

        var report = common.report(scenario: "slow")
        report.set("rate", rate > 0 ? .double(rate) : .string("max"))
        mixed.fill(&report)
        report.set("baseline_delivered_per_s", baseline.deliveredPerSecond.rounded())
        let ratio = baseline.deliveredPerSecond > 0 ? mixed.deliveredPerSecond / baseline.deliveredPerSecond : 0
        report.set("throughput_vs_baseline", (ratio * 1_000).rounded() / 1_000)
        report.set("baseline_p99_ms", Report.quantile(baseline.stats.latency, 0.99))
        var memoryText = ""
        if let before = mixed.rssBeforeKiB, let peak = mixed.rssPeakKiB {
            let growth = peak - before
            report.set("rss_growth_kib", growth)
            memoryText = "; server RSS +\(grouped(Double(growth) / 1_024)) MiB at peak"
            if let queueBytes, common.target == .todostreamd {
                let bound = slow * queueBytes / 1_024
                report.set("queue_bound_kib", bound)
                memoryText += " (non-readers × queue bound = \(grouped(Double(bound) / 1_024)) MiB)"
            }
        }
        emit(
            report,
            human:
                "slow \(common.serverName) readers=\(mixed.fastSubscribers) non-readers=\(mixed.slowSubscribers): "
                + "\(grouped(mixed.deliveredPerSecond)) msg/s to readers vs \(grouped(baseline.deliveredPerSecond)) alone "
                + "(×\(decimals(ratio, 2))); \(latencyText(mixed.stats.latency)); non-readers closed by server "
                + "\(mixed.slowClosedByServer)\(memoryText); \(mixed.problemsText)"
        )
        try failIfNothingMeasured(mixed.deliveredInWindow == 0, "nothing was delivered to the readers")
    }
}
