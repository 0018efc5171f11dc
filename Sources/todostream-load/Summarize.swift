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
        md += "Latency runs from the publish (todostreamd: the send of the toggle request) to the receipt; "
        md += "unthrottled latency mostly measures the load tool's window of messages in flight.\n"

        md += section(
            "Fan-out, unthrottled: delivered messages/s and publish→receive latency",
            rows: rows.filter { $0["scenario"] as? String == "fanout" && $0["rate"] as? String == "max" },
            configKey: "subscribers",
            configTitle: "subscribers",
            metric: ("delivered_per_s", "delivered msg/s"),
            extra: latencyColumns,
            ratios: &ratios
        )
        let rated = rows.filter { $0["scenario"] as? String == "fanout" && $0["rate"] is NSNumber }
        md += section(
            "Fan-out at a fixed rate (\(rateText(rated))): delivered messages/s and latency",
            rows: rated,
            configKey: "subscribers",
            configTitle: "subscribers",
            metric: ("delivered_per_s", "delivered msg/s"),
            extra: latencyColumns,
            ratios: &ratios,
            ratioOnMetric: false,
            ratioMetrics: ["p99_ms"]
        )
        md += section(
            "Request path: each client sends a state change and waits for its broadcast",
            rows: rows.filter { $0["scenario"] as? String == "request" },
            configKey: "clients",
            configTitle: "clients",
            metric: ("requests_per_s", "requests/s"),
            extra: latencyColumns,
            ratios: &ratios
        )
        md += section(
            "Idle connections: server RSS per connection",
            rows: rows.filter { $0["scenario"] as? String == "idle" },
            configKey: "connections",
            configTitle: "connections",
            metric: ("rss_per_connection_bytes", "bytes/connection"),
            extra: [
                ("held", "held", { number($0["held"]) }),
                ("rss_before_kib", "RSS before MiB", { mebibytes($0["rss_before_kib"]) }),
                ("rss_after_kib", "RSS after MiB", { mebibytes($0["rss_after_kib"]) }),
            ],
            ratios: &ratios
        )
        md += section(
            "Slow consumers: readers' throughput with non-readers present",
            rows: rows.filter { $0["scenario"] as? String == "slow" },
            configKey: "subscribers",
            configTitle: "readers",
            metric: ("delivered_per_s", "readers' msg/s"),
            extra: [
                ("slow_subscribers", "non-readers", { number($0["slow_subscribers"]) }),
                ("baseline_delivered_per_s", "readers alone msg/s", { number($0["baseline_delivered_per_s"]) }),
                ("throughput_vs_baseline", "× alone", { decimal($0["throughput_vs_baseline"], 2) }),
                ("rss_growth_kib", "RSS growth MiB", { mebibytes($0["rss_growth_kib"]) }),
                ("queue_bound_kib", "bound MiB", { mebibytes($0["queue_bound_kib"]) }),
                ("slow_closed_by_server", "non-readers closed", { number($0["slow_closed_by_server"]) }),
            ],
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

    private var latencyColumns: [Column] {
        [
            ("p50_ms", "p50 ms", { decimal($0["p50_ms"], 3) }),
            ("p99_ms", "p99 ms", { decimal($0["p99_ms"], 3) }),
            ("p999_ms", "p99.9 ms", { decimal($0["p999_ms"], 3) }),
        ]
    }

    private func rateText(_ rows: [Row]) -> String {
        let rates = Set(rows.compactMap { ($0["rate"] as? NSNumber)?.doubleValue })
        return rates.sorted().map { "\(Int($0)) publishes/s" }.joined(separator: ", ")
    }

    /// A table with one row per (configuration, server) and the ratio of todostreamd to each
    /// peer for `metric` (and `ratioMetrics`).
    private func section(
        _ title: String,
        rows: [Row],
        configKey: String,
        configTitle: String,
        metric: (key: String, title: String),
        extra: [Column],
        ratios: inout [Row],
        ratioOnMetric: Bool = true,
        ratioMetrics: [String] = []
    ) -> String {
        guard !rows.isEmpty else { return "" }
        var out = "\n## \(title)\n\n"
        let headers = [configTitle, "server", metric.title] + extra.map(\.title) + ["todostreamd ÷ server", "notes"]
        out += "| " + headers.joined(separator: " | ") + " |\n"
        out += "|" + headers.map { _ in "---" }.joined(separator: "|") + "|\n"
        let configs = Set(rows.compactMap { ($0[configKey] as? NSNumber)?.intValue }).sorted()
        let order = ["todostreamd", "todostreamd (ws)", "nats", "redis"]
        for config in configs {
            let group = rows.filter { ($0[configKey] as? NSNumber)?.intValue == config }
            let ours = group.first { serverName($0) == "todostreamd" }
            for server in order {
                guard let row = group.first(where: { serverName($0) == server }) else { continue }
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
                            ratios.append([
                                "scenario": row["scenario"] ?? "", configKey: config, "rate": row["rate"] ?? "",
                                "peer": server, "metric": key,
                                "todostreamd_over_peer": (ratio * 1_000).rounded() / 1_000,
                            ])
                        }
                    }
                    ratioText = parts.isEmpty ? "—" : parts.joined(separator: ", ")
                }
                let cells =
                    ["\(config)", server, number(row[metric.key])] + extra.map { $0.format(row) } + [
                        ratioText, notes(row),
                    ]
                out += "| " + cells.joined(separator: " | ") + " |\n"
            }
        }
        return out
    }

    private var ratioLabels: [String: String] { ["p99_ms": "p99"] }

    private func serverName(_ row: Row) -> String {
        let target = row["target"] as? String ?? "?"
        return row["transport"] as? String == "ws" ? "\(target) (ws)" : target
    }

    private func notes(_ row: Row) -> String {
        var parts: [String] = []
        for key in ["undelivered", "gaps", "duplicates", "unmatched", "seq_mismatches", "closed_by_server"] {
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
