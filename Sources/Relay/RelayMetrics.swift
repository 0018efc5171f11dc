import NIOConcurrencyHelpers

/// Counters of the relay, written on the hot path under one short lock each and read by
/// `/metrics` in the Prometheus text format.
public final class RelayMetrics: Sendable {
    private struct Counters {
        var connectionsByTransport: [String: Int] = [:]
        var acceptedByTransport: [String: Int] = [:]
        var framesIn = 0
        var framesInByType: [String: Int] = [:]
        var errorsByCode: [String: Int] = [:]
        var broadcasts = 0
        var slowConsumers = 0
        var resumes = 0
        var gaps = 0
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

    func frameIn() { counters.withLockedValue { $0.framesIn += 1 } }
    func request(type: String) { counters.withLockedValue { $0.framesInByType[type, default: 0] += 1 } }

    func error(_ code: RelayErrorCode) { counters.withLockedValue { $0.errorsByCode[code.rawValue, default: 0] += 1 } }
    func broadcast() { counters.withLockedValue { $0.broadcasts += 1 } }
    func slowConsumer() { counters.withLockedValue { $0.slowConsumers += 1 } }
    func resumed(gap: Bool) {
        counters.withLockedValue {
            $0.resumes += 1
            if gap { $0.gaps += 1 }
        }
    }

    /// The Prometheus text exposition, with `extra` lines appended.
    public func render(seq: UInt64, extra: [String] = []) -> String {
        let c = counters.withLockedValue { $0 }
        var lines: [String] = []
        func family(_ name: String, _ type: String, _ help: String) {
            lines.append("# HELP \(name) \(help)")
            lines.append("# TYPE \(name) \(type)")
        }
        family("todostream_connections", "gauge", "Open client connections by transport.")
        for transport in ["tcp", "tls", "ws", "wss"] {
            lines.append(
                "todostream_connections{transport=\"\(transport)\"} \(c.connectionsByTransport[transport] ?? 0)"
            )
        }
        family("todostream_connections_accepted_total", "counter", "Client connections accepted by transport.")
        for (transport, count) in c.acceptedByTransport.sorted(by: { $0.key < $1.key }) {
            lines.append("todostream_connections_accepted_total{transport=\"\(transport)\"} \(count)")
        }
        family("todostream_frames_in_total", "counter", "Frames received from clients.")
        lines.append("todostream_frames_in_total \(c.framesIn)")
        family("todostream_requests_total", "counter", "Events published by clients, by type.")
        for (type, count) in c.framesInByType.sorted(by: { $0.key < $1.key }) {
            lines.append("todostream_requests_total{type=\"\(type)\"} \(count)")
        }
        family("todostream_errors_total", "counter", "Error frames sent, by code.")
        for (code, count) in c.errorsByCode.sorted(by: { $0.key < $1.key }) {
            lines.append("todostream_errors_total{code=\"\(code)\"} \(count)")
        }
        family("todostream_broadcasts_total", "counter", "Broadcasts fanned out.")
        lines.append("todostream_broadcasts_total \(c.broadcasts)")
        family("todostream_seq", "gauge", "The newest broadcast seq.")
        lines.append("todostream_seq \(seq)")
        family("todostream_slow_consumer_disconnects_total", "counter", "Connections closed for not reading.")
        lines.append("todostream_slow_consumer_disconnects_total \(c.slowConsumers)")
        family("todostream_resumes_total", "counter", "Resume requests, and those answered with gap.")
        lines.append("todostream_resumes_total \(c.resumes)")
        lines.append("todostream_resume_gaps_total \(c.gaps)")
        return (lines + extra).joined(separator: "\n") + "\n"
    }
}
