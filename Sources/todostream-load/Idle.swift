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
            """
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

    private func measure(group: MultiThreadedEventLoopGroup) async throws {
        let limit = SystemProbe.raiseFileLimit(to: connections + 1_024)
        let run = RunState(group: group, sendTimeCapacity: 1)
        let connector = try Connector(
            group: group,
            endpoint: common.endpoint,
            run: run,
            perAddress: common.perAddress,
            firstAddress: common.firstAddress
        )
        let settings = common.settings()
        await sleep(seconds: 0.5)
        let before = common.residentKiB() ?? 0
        let started = Clock.now()
        let (handles, failures) = await connector.connectMany(
            count: connections,
            batch: batch,
            mode: { _ in .idle },
            settings: { _ in settings }
        )
        let connectSeconds = Clock.seconds(Clock.now() - started)
        await sleep(seconds: settle)
        let after = common.residentKiB() ?? 0
        let stats = try await run.stats.collect()
        await connector.closeAll(handles)

        let held = handles.count - stats.closedByPeer
        let perConnection = held > 0 ? Double(after - before) * 1_024 / Double(held) : 0
        var report = common.report(scenario: "idle")
        report.set("connections", connections)
        report.set("held", held)
        report.set("connect_s", (connectSeconds * 1_000).rounded() / 1_000)
        report.set("rss_before_kib", before)
        report.set("rss_after_kib", after)
        report.set("rss_per_connection_bytes", perConnection.rounded())
        report.set("closed_by_server", stats.closedByPeer)
        report.set("errors", counts: stats.errors)
        report.set("setup_failures", counts: failures)
        report.set("fd_limit", limit)
        let failureText =
            failures.isEmpty
            ? ""
            : "; setup failures: " + failures.map { "\($0.value)× \($0.key)" }.joined(separator: ", ")
        emit(
            report,
            human: "idle \(common.serverName) connections=\(held)/\(connections): RSS "
                + "\(grouped(Double(before) / 1_024)) → \(grouped(Double(after) / 1_024)) MiB, "
                + "\(grouped(perConnection)) bytes per connection (connected in \(decimals(connectSeconds, 1)) s)"
                + failureText
        )
    }
}
