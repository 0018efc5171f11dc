import ArgumentParser
import NIOCore
import NIOPosix

/// Options every scenario takes.
struct CommonOptions: ParsableArguments {
    @Option(help: "The server: todostreamd, nats or redis.")
    var target: Target

    @Option(help: "The server's address (loopback only).")
    var host = "127.0.0.1"

    @Option(help: "The server's TCP port (todostreamd: its NDJSON listener, or its HTTP listener with --transport ws).")
    var port: Int

    @Option(
        help: ArgumentHelp(
            "tcp; todostreamd also ws (WebSocket at /events), tls (NDJSON over TLS: the --tls-listen port) or "
                + "wss (WebSocket over TLS: the HTTP listener with --http-tls); redis also tls (its --tls-port)."
        )
    )
    var transport: Transport = .tcp

    @Option(
        name: .customLong("tls-ca"),
        help: ArgumentHelp(
            "With --transport tls|wss: a PEM file of the certificates to trust (the daemon's --dev-tls writes "
                + "<data dir>/dev-tls/cert.pem), checked with the name in --host. Without it the server's "
                + "certificate is not checked (loopback only)."
        )
    )
    var tlsCA: String?

    @Option(help: "The server's PID, to read its RSS (/proc/PID/status) and CPU time (/proc/PID/stat).")
    var pid: Int32?

    @Option(help: "Event-loop threads of the load tool.")
    var threads = 2

    @Option(
        name: .customLong("per-address"),
        help: "Connections per loopback source address (127.0.0.2, 127.0.0.3, …); 0 lets the kernel choose."
    )
    var perAddress = 500

    @Option(name: .customLong("first-address"), help: "Last octet of the first source address.")
    var firstAddress = 2

    @Option(
        name: .customLong("payload-bytes"),
        help: ArgumentHelp(
            "Bytes of each peer message, of each redis --durable SET value, and of the subtitle each todostreamd "
                + "edit saves (--publish edit|mixed; todostreamd's frames are what the daemon sends)."
        )
    )
    var payloadBytes = 400

    @Option(
        name: .customLong("setup-timeout"),
        help: "Seconds a connection may take to connect and finish its protocol's setup (hello, subscription, …)."
    )
    var setupTimeout: Double = 30

    @Option(help: "A label copied into the JSON result.")
    var label: String?

    func validate() throws {
        guard host.hasPrefix("127.") || host == "localhost" || host == "::1" else {
            throw ValidationError("--host must be a loopback address: the load tool never leaves this machine.")
        }
        switch (transport, target) {
        case (.tcp, _), (_, .todostreamd), (.tls, .redis): break
        case (.tls, _): throw ValidationError("--transport tls applies to todostreamd and redis only.")
        default: throw ValidationError("--transport \(transport.rawValue) applies to todostreamd only.")
        }
        guard tlsCA == nil || transport.isTLS else {
            throw ValidationError("--tls-ca applies to --transport tls and wss only.")
        }
        if let pid {
            guard SystemProbe.processExists(pid: pid) else {
                throw ValidationError("--pid \(pid): there is no such process.")
            }
            if SystemProbe.listens(pid: pid, port: port) == false {
                warn("process \(pid) (--pid) has no socket listening on port \(port) (--port): is it the server?")
            }
        }
        guard setupTimeout > 0, setupTimeout <= 600 else {
            throw ValidationError("--setup-timeout must be more than 0 and at most 600 s.")
        }
        guard (1...64).contains(threads) else { throw ValidationError("--threads must be 1…64.") }
        guard payloadBytes >= PeerPayload.headerBytes, payloadBytes <= 65_536 else {
            throw ValidationError("--payload-bytes must be \(PeerPayload.headerBytes)…65536.")
        }
    }

    /// The server as results name it: "todostreamd (ws)" over WebSocket.
    var serverName: String { transport == .tcp ? target.rawValue : "\(target.rawValue) (\(transport.rawValue))" }

    /// A connector to `endpoint` (by default --host and --port) with these options.
    func connector(group: MultiThreadedEventLoopGroup, run: RunState, endpoint: Endpoint? = nil) throws -> Connector {
        try Connector(
            group: group,
            endpoint: endpoint ?? self.endpoint,
            run: run,
            perAddress: perAddress,
            firstAddress: firstAddress,
            setupTimeout: .nanoseconds(Int64((setupTimeout * 1e9).rounded()))
        )
    }

    var endpoint: Endpoint { Endpoint(target: target, host: host, port: port, transport: transport, tlsCA: tlsCA) }

    func settings(todoIDs: [String] = [], subject: String = "bench") -> ConnectionSettings {
        ConnectionSettings(payloadBytes: payloadBytes, subject: subject, todoIDs: todoIDs)
    }

    /// The report's opening fields.
    func report(scenario: String) -> Report {
        var report = Report()
        report.set("scenario", scenario)
        report.set("target", target.rawValue)
        if target == .todostreamd || transport != .tcp { report.set("transport", transport.rawValue) }
        if let label { report.set("label", label) }
        report.set("threads", threads)
        return report
    }

    /// The server's RSS (with --pid); nil, with a warning, when /proc could not be read.
    func residentKiB() -> Int? {
        guard let pid else { return nil }
        guard let kib = SystemProbe.residentKiB(pid: pid) else {
            warn("could not read the RSS of process \(pid) from /proc/\(pid)/status: it is reported as unknown")
            return nil
        }
        return kib
    }
}

/// Samples a process's RSS every 100 ms and keeps the peak.
struct PeakSampler {
    private let task: Task<Int?, Never>?

    init(pid: Int32?) {
        guard let pid else {
            task = nil
            return
        }
        task = Task {
            var peak: Int?
            while !Task.isCancelled {
                if let current = SystemProbe.residentKiB(pid: pid) { peak = max(peak ?? 0, current) }
                try? await Task.sleep(for: .milliseconds(100))
            }
            if let current = SystemProbe.residentKiB(pid: pid) { peak = max(peak ?? 0, current) }
            return peak
        }
    }

    /// The peak; nil without --pid or when the RSS could never be read.
    func stop() async -> Int? {
        guard let task else { return nil }
        task.cancel()
        return await task.value
    }
}

/// Prints a result: JSON on standard output, the human line on standard error.
func emit(_ report: Report, human: String) {
    print(report.jsonLine)
    var standardError = StandardError()
    print(human, to: &standardError)
}

/// The exit statuses of the scenarios, for their help.
let exitStatusNote = """
    Exit status: 0 when the run measured something; 1 when it failed or could not be set up \
    (no client, subscriber or connection came up, the publisher could not set up, a setup \
    timed out); 2 when it ran but measured nothing (no request answered, nothing delivered, \
    no idle connection held or the server's RSS unknown) — its result is printed all the \
    same; 64 on a usage error.
    """

/// Ends the run with exit status 2 (after its result was printed) when `nothing` holds.
func failIfNothingMeasured(_ nothing: Bool, _ what: String) throws {
    guard nothing else { return }
    var standardError = StandardError()
    print("error: nothing was measured: \(what)", to: &standardError)
    throw ExitCode(2)
}

/// A warning on standard error.
func warn(_ text: String) {
    var standardError = StandardError()
    print("warning: " + text, to: &standardError)
}

struct StandardError: TextOutputStream {
    mutating func write(_ string: String) {
        var text = string
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = writeToStandardError(bytes.baseAddress! + offset, bytes.count - offset)
                if written <= 0 { return }
                offset += written
            }
        }
    }
}

func sleep(seconds: Double) async {
    try? await Task.sleep(for: .milliseconds(Int((seconds * 1_000).rounded())))
}

/// Runs `body` with a fresh event-loop group and shuts the group down afterwards.
func withEventLoopGroup<T>(
    threads: Int,
    _ body: (MultiThreadedEventLoopGroup) async throws -> T
) async throws -> T {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
    do {
        let result = try await body(group)
        try? await group.shutdownGracefully()
        return result
    } catch {
        try? await group.shutdownGracefully()
        throw error
    }
}
