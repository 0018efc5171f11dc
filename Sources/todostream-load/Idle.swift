import ArgumentParser
import NIOCore
import NIOPosix

/// K idle connections: the server's RSS per connection.
struct Idle: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Hold K idle connections and report the server's RSS per connection.",
        discussion: """
            Each connection completes the protocol's handshake (todostreamd: the hello; nats: \
            CONNECT and PING/PONG; redis: PING) and then stays silent. Connections come from \
            127.0.0.2, 127.0.0.3, … (--per-address each). Needs --pid.

            """ + exitStatusNote
    )

    @OptionGroup var common: CommonOptions

    @Option(help: "Connections to hold.")
    var connections = 10_000

    @Option(help: "Seconds to wait after the last connection before reading the RSS.")
    var settle: Double = 1

    @Option(help: "Connections opened at once.")
    var batch = 500

    func validate() throws {
        guard (1...60_000).contains(connections) else { throw ValidationError("--connections must be 1…60000.") }
        guard common.pid != nil else { throw ValidationError("idle needs --pid (the server's).") }
        guard settle >= 0, settle <= 60 else { throw ValidationError("--settle must be 0…60 s.") }
    }

    func run() async throws {
        try await withEventLoopGroup(threads: common.threads) { try await measure(group: $0) }
    }

    private func mebibytes(_ kib: Int?) -> String { kib.map { grouped(Double($0) / 1_024) } ?? "unknown" }

    private func measure(group: MultiThreadedEventLoopGroup) async throws {
        let limit = SystemProbe.raiseFileLimit(to: connections + 1_024)
        let run = RunState(group: group, sendTimeCapacity: 1)
        let connector = try common.connector(group: group, run: run)
        let settings = common.settings()
        await sleep(seconds: 0.5)
        let before = common.residentKiB()
        let started = Clock.now()
        let (handles, failures) = await connector.connectMany(
            count: connections,
            batch: batch,
            mode: { _ in .idle },
            settings: { _ in settings }
        )
        let connectSeconds = Clock.seconds(Clock.now() - started)
        guard !handles.isEmpty else {
            throw LoadError("no connection could be set up: \(describe(setupFailures: failures))")
        }
        await sleep(seconds: settle)
        let after = common.residentKiB()
        let stats = try await run.stats.collect()
        await connector.closeAll(handles)

        let held = handles.count - stats.closedByPeer
        // Unknown when either RSS is: a failed read is no 0.
        var perConnection: Double?
        if let before, let after, held > 0 { perConnection = Double(after - before) * 1_024 / Double(held) }
        var report = common.report(scenario: "idle")
        report.set("connections", connections)
        report.set("held", held)
        report.set("connect_s", (connectSeconds * 1_000).rounded() / 1_000)
        report.set("rss_before_kib", before.map(Report.Value.int) ?? .null)
        report.set("rss_after_kib", after.map(Report.Value.int) ?? .null)
        report.set("rss_per_connection_bytes", perConnection.map { .double($0.rounded()) } ?? .null)
        report.set("closed_by_server", stats.closedByPeer)
        report.set("errors", counts: stats.errors)
        report.set("setup_failures", counts: failures)
        report.set("fd_limit", limit)
        let failureText =
            failures.isEmpty
            ? ""
            : "; setup failures: " + describe(setupFailures: failures)
        emit(
            report,
            human: "idle \(common.serverName) connections=\(held)/\(connections): RSS "
                + "\(mebibytes(before)) → \(mebibytes(after)) MiB, "
                + "\(perConnection.map(grouped) ?? "unknown") bytes per connection "
                + "(connected in \(decimals(connectSeconds, 1)) s)"
                + failureText
        )
        try failIfNothingMeasured(held == 0, "the server closed every connection")
        try failIfNothingMeasured(perConnection == nil, "the server's RSS could not be read")
    }
}
