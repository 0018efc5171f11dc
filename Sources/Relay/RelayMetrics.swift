import NIOConcurrencyHelpers

/// The relay's counters of rare events (connections, errors, slow consumers, resumes), each
/// under one short lock, and the Prometheus text of `/metrics`. Per-frame counts are kept
/// per event loop instead (`LoopMetrics`).
public final class RelayMetrics: Sendable {
    private struct Counters {
        var connectionsByTransport: [String: Int] = [:]
        var acceptedByTransport: [String: Int] = [:]
        var errorsByCode: [String: Int] = [:]
        var slowConsumers = 0
        var resumes = 0
        var gaps = 0
        var resynchronizations = 0
        var refusedByLimit: [String: Int] = [:]
    }

    private let counters = NIOLockedValueBox(Counters())

    public init() {}

    func connected(_ transport: String) {
        counters.withLockedValue {
            $0.connectionsByTransport[transport, default: 0] += 1
            $0.acceptedByTransport[transport, default: 0] += 1
        }
    }

    func disconnected(_ transport: String) {
        counters.withLockedValue { $0.connectionsByTransport[transport, default: 1] -= 1 }
    }

    func error(_ code: RelayErrorCode) { counters.withLockedValue { $0.errorsByCode[code.rawValue, default: 0] += 1 } }
    /// An app's failure answered to a client (`validation_failed`, `unavailable`, …).
    func appError(_ code: String) { counters.withLockedValue { $0.errorsByCode[code, default: 0] += 1 } }
    /// A connection closed on arrival, over `limit` (`max_connections` or
    /// `max_connections_per_ip`).
    func refused(over limit: String) { counters.withLockedValue { $0.refusedByLimit[limit, default: 0] += 1 } }
    func slowConsumer() { counters.withLockedValue { $0.slowConsumers += 1 } }
    func resynchronized() { counters.withLockedValue { $0.resynchronizations += 1 } }

    /// Times the stream skipped seqs this daemon could no longer get (see `Hub.resynchronize`).
    public var resynchronizations: Int { counters.withLockedValue { $0.resynchronizations } }
    func resumed(gap: Bool) {
        counters.withLockedValue {
            $0.resumes += 1
            if gap { $0.gaps += 1 }
        }
    }

    /// The Prometheus text exposition, with `extra` lines appended.
    public func render(seq: UInt64, loops fanOut: LoopMetrics = LoopMetrics(), extra: [String] = []) -> String {
        let c = counters.withLockedValue { $0 }
        var lines: [String] = []
        /// One family with a single unlabelled sample.
        func single(_ name: String, _ type: String, _ help: String, _ value: some CustomStringConvertible) {
            lines += ["# HELP \(name) \(help)", "# TYPE \(name) \(type)", "\(name) \(value)"]
        }
        /// One family with a sample per label value.
        func labelled(_ name: String, _ type: String, _ help: String, _ label: String, _ samples: [String: Int]) {
            lines += ["# HELP \(name) \(help)", "# TYPE \(name) \(type)"]
            for (value, count) in samples.sorted(by: { $0.key < $1.key }) {
                lines.append("\(name){\(label)=\"\(value)\"} \(count)")
            }
        }
        /// `samples` with a 0 for each of `values` it lacks: every series there from the start,
        /// so that `rate()` sees the first events too.
        func fromTheStart(_ samples: [String: Int], _ values: [String]) -> [String: Int] {
            var all = samples
            for value in values { all[value, default: 0] += 0 }
            return all
        }
        let transports = ["tcp", "tls", "ws", "wss"]
        labelled(
            "todostream_connections",
            "gauge",
            "Open client connections by transport.",
            "transport",
            fromTheStart(c.connectionsByTransport.filter { $0.value > 0 }, transports)
        )
        labelled(
            "todostream_connections_accepted_total",
            "counter",
            "Client connections accepted by transport.",
            "transport",
            fromTheStart(c.acceptedByTransport, transports)
        )
        labelled(
            "todostream_connections_refused_total",
            "counter",
            "Client connections closed on arrival, by the limit they were over.",
            "limit",
            fromTheStart(c.refusedByLimit, ["max_connections", "max_connections_per_ip"])
        )
        single("todostream_frames_in_total", "counter", "Frames received from clients.", fanOut.framesIn)
        labelled(
            "todostream_requests_total",
            "counter",
            "Events published by clients, by type.",
            "type",
            fanOut.requestsByType
        )
        labelled(
            "todostream_errors_total",
            "counter",
            "Errors answered to clients, by code: the relay's and the app's.",
            "code",
            c.errorsByCode
        )
        labelled(
            "todostream_frames_out_total",
            "counter",
            "Event frames written to clients, by type.",
            "type",
            fanOut.framesOutByType
        )
        lines += fanOut.fanOutLatency.prometheus(
            name: "todostream_fanout_seconds",
            help: "From a broadcast reaching the hub to its bytes being written to every subscriber of a loop."
        )
        single(
            "todostream_queued_bytes",
            "gauge",
            "Bytes written to clients and not yet taken by the kernel.",
            fanOut.queuedBytes
        )
        single(
            "todostream_queued_bytes_max",
            "gauge",
            "The largest outbound queue of one connection, in bytes.",
            fanOut.largestQueueBytes
        )
        single("todostream_broadcasts_held_back", "gauge", "Broadcasts waiting for an earlier seq.", fanOut.heldBack)
        single("todostream_broadcasts_total", "counter", "Broadcasts fanned out.", fanOut.broadcasts)
        single("todostream_seq", "gauge", "The newest broadcast seq.", seq)
        single(
            "todostream_slow_consumer_disconnects_total",
            "counter",
            "Connections closed for not reading.",
            c.slowConsumers
        )
        single("todostream_resumes_total", "counter", "Resume requests.", c.resumes)
        single("todostream_resume_gaps_total", "counter", "Resume requests answered with gap.", c.gaps)
        single(
            "todostream_stream_resyncs_total",
            "counter",
            "Times this daemon fell further behind the shared journal than it retains, told every client gap and went on from the oldest entry kept.",
            c.resynchronizations
        )
        return (lines + extra).joined(separator: "\n") + "\n"
    }
}
