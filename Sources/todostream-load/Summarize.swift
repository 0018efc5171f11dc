import ArgumentParser
import Foundation

/// Turns the JSON lines of a benchmark run into the results table (Markdown) and one JSON
/// document, with the ratio of todostreamd to each peer.
struct Summarize: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write the results table (Markdown and JSON) from the JSON lines of a run."
    )

    @Option(help: "The run's JSON lines (one result per line).")
    var results: String

    @Option(help: "The exact commands of the run, one per line.")
    var commands: String?

    @Option(name: .customLong("meta"), help: "KEY=VALUE about the machine and the run; repeatable.")
    var meta: [String] = []

    @Option(help: "Where to write the Markdown table.")
    var markdown: String

    @Option(help: "Where to write the JSON document.")
    var json: String

    typealias Row = [String: Any]

    func run() throws {
        let text = try String(contentsOfFile: results, encoding: .utf8)
        var rows: [Row] = []
        for line in text.split(separator: "\n") where line.hasPrefix("{") {
            if let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? Row { rows.append(object) }
        }
        var metadata: [(String, String)] = []
        for entry in meta {
            let parts = entry.split(separator: "=", maxSplits: 1).map(String.init)
            metadata.append((parts[0], parts.count > 1 ? parts[1] : ""))
        }
        let commandLines =
            try commands.map { try String(contentsOfFile: $0, encoding: .utf8) }?
            .split(separator: "\n").map(String.init) ?? []

        var ratios: [Row] = []
        var md = "# Benchmark results\n\n"
        for (key, value) in metadata { md += "- **\(key)**: \(value)\n" }
        md += "\nRatios are todostreamd (over TCP) ÷ the peer, measured on the same machine in the same run: "
        md += "above 1 means todostreamd delivers more (throughput) or takes more (latency, memory). "
        md += "Latency runs from the publish (todostreamd: the send of the request) to the receipt; "
        md += "unthrottled latency mostly measures the load tool's window of messages in flight. "
        md += "A todostreamd publisher toggles a todo, or with \"edits\" saves it with a subtitle of the payload "
        md += "size (the peers publish that payload size either way).\n"

        let fanout = rows.filter { $0["scenario"] as? String == "fanout" }
        md += section(
            "Fan-out, unthrottled: delivered messages/s and publish→receive latency",
            rows: fanout.filter { $0["rate"] as? String == "max" },
            configTitle: "subscribers",
            config: { row in
                guard let n = int(row["subscribers"]) else { return nil }
                return Config(order: [n, publishOrder(row)], label: "\(n)\(publishSuffix(row))")
            },
            metric: ("delivered_per_s", "delivered msg/s"),
            extra: latencyColumns,
            ratioFields: ["subscribers", "rate", "publish"],
            ratios: &ratios
        )
        let rated = fanout.filter { $0["rate"] is NSNumber }
        md += section(
            "Fan-out at a fixed rate (\(rateText(rated))): delivered messages/s and latency",
            rows: rated,
            configTitle: "subscribers",
            config: { row in
                guard let n = int(row["subscribers"]), let rate = int(row["rate"]) else { return nil }
                return Config(
                    order: [n, rate, publishOrder(row)],
                    label: "\(n) at \(grouped(Double(rate)))/s\(publishSuffix(row))"
                )
            },
            metric: ("delivered_per_s", "delivered msg/s"),
            extra: latencyColumns,
            ratioFields: ["subscribers", "rate", "publish"],
            ratios: &ratios,
            ratioOnMetric: false,
            ratioMetrics: ["p99_ms"]
        )
        let requests = rows.filter { $0["scenario"] as? String == "request" }
        md += section(
            "Request path: each client sends a state change and waits for its broadcast",
            rows: requests.filter { publish($0) == "toggle" && !isDurable($0) },
            configTitle: "clients",
            config: byInteger("clients"),
            metric: ("requests_per_s", "requests/s"),
            extra: latencyColumns,
            ratioFields: ["clients"],
            ratios: &ratios
        )
        md += clientsSection(
            "Pings: each client sends a ping and waits for its pong",
            rows: requests.filter { publish($0) == "ping" },
            ratioFields: ["clients", "publish"],
            ratios: &ratios,
            preface: "todostreamd's `ping` operation and the peers' `PING`: a connection's own path (read, parse, "
                + "answer, write), which on todostreamd never reaches the sequencer. The floor under every request.\n"
        )
        md += clientsSection(
            "Durable requests: todostreamd edits (reply + own broadcast copy) against redis SET with appendfsync always",
            rows: requests.filter {
                isDurable($0) || (serverName($0).hasPrefix("todostreamd") && publish($0) == "edit")
            },
            ratioFields: ["clients", "publish", "durable"],
            ratios: &ratios,
            ratioMetrics: ["p99_ms", "p999_ms"],
            preface: "Each client waits for its answer before its next request: todostreamd's is the reply "
                + "ResponseUpdateDetailViewModel and its own copy of the ResponseTodoViewModel broadcast, sent "
                + "after the save is committed; redis's is `+OK`, sent after the AOF is fsynced "
                + "(`--appendonly yes --appendfsync always`). 1 client: sequential requests.\n"
        )
        let mixed = requests.filter { publish($0) == "mixed" }
        md += clientsSection(
            "Mixed view requests: each client sends a frontend's mix of the six view requests",
            rows: mixed,
            ratioFields: ["clients", "publish"],
            ratios: &ratios,
            preface: "Per 100 requests: 40 list, 10 detail, 5 new, 30 update (3 of them restores right after a "
                + "delete), 12 toggle, 3 delete. A request is answered when every frame it causes for its sender "
                + "arrived. todostreamd only: the peers have no equivalent.\n"
        )
        md += kindTable(mixed)
        md += section(
            "Idle connections: server RSS per connection",
            rows: rows.filter { $0["scenario"] as? String == "idle" },
            configTitle: "connections",
            config: byInteger("connections"),
            metric: ("rss_per_connection_bytes", "bytes/connection"),
            extra: [
                ("held", "held", { number($0["held"]) }),
                ("rss_before_kib", "RSS before MiB", { mebibytes($0["rss_before_kib"]) }),
                ("rss_after_kib", "RSS after MiB", { mebibytes($0["rss_after_kib"]) }),
            ],
            ratioFields: ["connections"],
            ratios: &ratios
        )
        md += section(
            "Slow consumers: readers' throughput with non-readers present",
            rows: rows.filter { $0["scenario"] as? String == "slow" },
            configTitle: "readers",
            config: byInteger("subscribers"),
            metric: ("delivered_per_s", "readers' msg/s"),
            extra: [
                ("slow_subscribers", "non-readers", { number($0["slow_subscribers"]) }),
                ("baseline_delivered_per_s", "readers alone msg/s", { number($0["baseline_delivered_per_s"]) }),
                ("throughput_vs_baseline", "× alone", { decimal($0["throughput_vs_baseline"], 2) }),
                ("rss_growth_kib", "RSS growth MiB", { mebibytes($0["rss_growth_kib"]) }),
                ("queue_bound_kib", "bound MiB", { mebibytes($0["queue_bound_kib"]) }),
                ("slow_closed_by_server", "non-readers closed", { number($0["slow_closed_by_server"]) }),
            ],
            ratioFields: ["subscribers"],
            ratios: &ratios
        )
        if !commandLines.isEmpty {
            md += "\n## Commands\n\n```\n" + commandLines.joined(separator: "\n") + "\n```\n"
        }
        try md.write(toFile: markdown, atomically: true, encoding: .utf8)

        var machine: Row = [:]
        for (key, value) in metadata { machine[key] = value }
        let document: Row = ["machine": machine, "results": rows, "ratios": ratios, "commands": commandLines]
        let data = try JSONSerialization.data(
            withJSONObject: document,
            options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        )
        try data.write(to: URL(fileURLWithPath: json))
    }

    typealias Column = (key: String, title: String, format: (Row) -> String)

    /// A table row's configuration: what the rows are sorted by and their first cell.
    struct Config: Hashable {
        var order: [Int]
        var label: String
    }

    private var latencyColumns: [Column] {
        [
            ("p50_ms", "p50 ms", { decimal($0["p50_ms"], 3) }),
            ("p99_ms", "p99 ms", { decimal($0["p99_ms"], 3) }),
            ("p999_ms", "p99.9 ms", { decimal($0["p999_ms"], 3) }),
        ]
    }

    private var failedColumn: Column { ("failed", "failed", { number($0["failed"]) }) }

    private func cpuColumn(_ key: String, _ title: String) -> Column { (key, title, { decimal($0[key], 1) }) }

    private func byInteger(_ key: String) -> (Row) -> Config? {
        { row in int(row[key]).map { Config(order: [$0], label: "\($0)") } }
    }

    private func publish(_ row: Row) -> String { row["publish"] as? String ?? "toggle" }

    private func isDurable(_ row: Row) -> Bool { (row["durable"] as? NSNumber)?.boolValue ?? false }

    private func publishOrder(_ row: Row) -> Int { ["toggle": 0, "edit": 1, "mixed": 2][publish(row)] ?? 3 }

    private func publishSuffix(_ row: Row) -> String {
        switch publish(row) {
        case "toggle": ""
        case "edit": ", edits"
        case let other: ", \(other)"
        }
    }

    private func rateText(_ rows: [Row]) -> String {
        let rates = Set(rows.compactMap { ($0["rate"] as? NSNumber)?.doubleValue })
        return rates.sorted().map { "\(grouped($0))" }.joined(separator: ", ") + " publishes/s"
    }

    /// A section of request rows by client count, with their failures and the server's CPU per
    /// request.
    private func clientsSection(
        _ title: String,
        rows: [Row],
        ratioFields: [String],
        ratios: inout [Row],
        ratioMetrics: [String] = [],
        preface: String
    ) -> String {
        section(
            title,
            rows: rows,
            configTitle: "clients",
            config: byInteger("clients"),
            metric: ("requests_per_s", "requests/s"),
            extra: latencyColumns + [failedColumn, cpuColumn("server_cpu_us_per_request", "server CPU µs/request")],
            ratioFields: ratioFields,
            ratios: &ratios,
            ratioMetrics: ratioMetrics,
            preface: preface
        )
    }

    /// A table with one row per (configuration, server) and the ratio of todostreamd to each
    /// peer for `metric` (and `ratioMetrics`); `ratioFields` are copied from the rows into
    /// each ratio entry.
    private func section(
        _ title: String,
        rows: [Row],
        configTitle: String,
        config: (Row) -> Config?,
        metric: (key: String, title: String),
        extra: [Column],
        ratioFields: [String],
        ratios: inout [Row],
        ratioOnMetric: Bool = true,
        ratioMetrics: [String] = [],
        preface: String = ""
    ) -> String {
        guard !rows.isEmpty else { return "" }
        var out = "\n## \(title)\n\n"
        if !preface.isEmpty { out += preface + "\n" }
        let headers = [configTitle, "server", metric.title] + extra.map(\.title) + ["todostreamd ÷ server", "notes"]
        out += "| " + headers.joined(separator: " | ") + " |\n"
        out += "|" + headers.map { _ in "---" }.joined(separator: "|") + "|\n"
        let configs = Set(rows.compactMap(config)).sorted { $0.order.lexicographicallyPrecedes($1.order) }
        let order = ["todostreamd", "todostreamd (ws)", "nats", "redis"]
        for configuration in configs {
            let group = rows.filter { config($0) == configuration }
            let oursRuns = group.filter { serverName($0) == "todostreamd" }
            // Every run gets its row: repeated runs of a configuration are numbered, a server
            // not in `order` comes after those that are.
            let servers = order + Set(group.map(serverName)).subtracting(order).sorted()
            for server in servers {
                let runs = group.filter { serverName($0) == server }
                for (position, row) in runs.enumerated() {
                    let ours = oursRuns.isEmpty ? nil : oursRuns[min(position, oursRuns.count - 1)]
                    let label =
                        runs.count > 1 ? "\(configuration.label) (run \(position + 1))" : configuration.label
                    out += tableRow(
                        row,
                        label: label,
                        server: server,
                        ours: ours,
                        metric: metric,
                        extra: extra,
                        ratioFields: ratioFields,
                        ratios: &ratios,
                        ratioOnMetric: ratioOnMetric,
                        ratioMetrics: ratioMetrics
                    )
                }
            }
        }
        return out
    }

    /// One row of a `section` table, with the ratio of todostreamd's run `ours` to it (a peer's
    /// row), which is also added to `ratios`.
    private func tableRow(
        _ row: Row,
        label: String,
        server: String,
        ours: Row?,
        metric: (key: String, title: String),
        extra: [Column],
        ratioFields: [String],
        ratios: inout [Row],
        ratioOnMetric: Bool,
        ratioMetrics: [String]
    ) -> String {
        var ratioText = "—"
        if !server.hasPrefix("todostreamd"), let ours {
            var parts: [String] = []
            for key in (ratioOnMetric ? [metric.key] : []) + ratioMetrics {
                if let mine = (ours[key] as? NSNumber)?.doubleValue,
                    let theirs = (row[key] as? NSNumber)?.doubleValue, theirs > 0
                {
                    let ratio = mine / theirs
                    let label = key == metric.key ? "" : (ratioLabels[key] ?? key) + " "
                    parts.append("\(label)×\(format(ratio, key == metric.key ? 3 : 2))")
                    var entry: Row = [
                        "scenario": row["scenario"] ?? "", "peer": server, "metric": key,
                        "todostreamd_over_peer": (ratio * 1_000).rounded() / 1_000,
                    ]
                    for field in ratioFields { entry[field] = row[field] ?? ours[field] ?? "" }
                    ratios.append(entry)
                }
            }
            ratioText = parts.isEmpty ? "—" : parts.joined(separator: ", ")
        }
        let cells =
            [label, server, number(row[metric.key])] + extra.map { $0.format(row) } + [
                ratioText, notes(row, except: Set(extra.map(\.key))),
            ]
        return "| " + cells.joined(separator: " | ") + " |\n"
    }

    /// Per request kind of the mixed runs: share, rate and latencies.
    private func kindTable(_ rows: [Row]) -> String {
        var out = ""
        for row in rows {
            guard let kinds = row["by_kind"] as? Row else { continue }
            out += "\nBy kind, \(serverName(row)), \(number(row["clients"])) clients:\n\n"
            out += "| request | share | requests/s | p50 ms | p99 ms | p99.9 ms | failed |\n"
            out += "|---|---|---|---|---|---|---|\n"
            for name in ["list", "detail", "new", "update", "restore", "toggle", "delete"] {
                guard let kind = kinds[name] as? Row else { continue }
                let share = (kind["share"] as? NSNumber).map { decimals($0.doubleValue * 100, 1) + " %" } ?? "—"
                let cells = [
                    name, share, number(kind["requests_per_s"]), decimal(kind["p50_ms"], 3),
                    decimal(kind["p99_ms"], 3), decimal(kind["p999_ms"], 3), number(kind["failed"]),
                ]
                out += "| " + cells.joined(separator: " | ") + " |\n"
            }
        }
        return out
    }

    private var ratioLabels: [String: String] { ["p99_ms": "p99", "p999_ms": "p99.9"] }

    private func serverName(_ row: Row) -> String {
        let target = row["target"] as? String ?? "?"
        guard let transport = row["transport"] as? String, transport != "tcp" else { return target }
        return "\(target) (\(transport))"
    }

    /// Problems of a row, but those in columns (`except`).
    private func notes(_ row: Row, except columns: Set<String>) -> String {
        var parts: [String] = []
        for key in ["failed", "undelivered", "gaps", "duplicates", "unmatched", "seq_mismatches", "closed_by_server"]
        where !columns.contains(key) {
            if let value = (row[key] as? NSNumber)?.intValue, value > 0 {
                parts.append("\(key.replacingOccurrences(of: "_", with: " ")) \(value)")
            }
        }
        for key in ["errors", "setup_failures"] {
            if let counts = row[key] as? [String: Any], !counts.isEmpty {
                let text = counts.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
                parts.append("\(key.replacingOccurrences(of: "_", with: " ")): \(text)")
            }
        }
        return parts.isEmpty ? "" : parts.joined(separator: "; ").replacingOccurrences(of: "|", with: "/")
    }
}

private func int(_ value: Any?) -> Int? {
    guard let value = value as? NSNumber else { return nil }
    return Int(value.doubleValue.rounded())
}

private func number(_ value: Any?) -> String {
    guard let value = value as? NSNumber else { return "—" }
    return grouped(value.doubleValue)
}

private func decimal(_ value: Any?, _ places: Int) -> String {
    guard let value = value as? NSNumber else { return "—" }
    return decimals(value.doubleValue, places)
}

private func mebibytes(_ value: Any?) -> String {
    guard let value = value as? NSNumber else { return "—" }
    return decimals(value.doubleValue / 1_024, 1)
}

private func format(_ value: Double, _ places: Int) -> String { decimals(value, places) }
