import Testing

@testable import Relay

/// What `/metrics` shows before anything happened.
@Suite struct RelayMetricsTests {
    /// Every transport has its connection series from the start, open and accepted, so that a
    /// `rate()` over the accepted counter sees the first connections too.
    @Test func everyTransportHasItsSeriesFromTheStart() {
        let text = RelayMetrics().render(seq: 0)
        for transport in ["tcp", "tls", "ws", "wss"] {
            #expect(text.contains("\ntodostream_connections{transport=\"\(transport)\"} 0\n"), "\(text)")
            #expect(text.contains("\ntodostream_connections_accepted_total{transport=\"\(transport)\"} 0\n"), "\(text)")
        }
    }
}
