import Testing

@testable import TodostreamClient

@Suite struct ClientEndpointTests {
    @Test func parsesEveryTransport() throws {
        #expect(
            try ClientEndpoint(url: "tcp://127.0.0.1:7000")
                == ClientEndpoint(transport: .tcp, host: "127.0.0.1", port: 7000)
        )
        #expect(
            try ClientEndpoint(url: "tls://todo.example")
                == ClientEndpoint(transport: .tls, host: "todo.example", port: 7878)
        )
        #expect(try ClientEndpoint(url: "ws://localhost:8080/events").path == "/events")
        #expect(
            try ClientEndpoint(url: "WSS://[::1]:9443/other")
                == ClientEndpoint(transport: .wss, host: "::1", port: 9443, path: "/other")
        )
        #expect(try ClientEndpoint(url: "ws://h").port == 8080)
    }

    @Test(arguments: ["http://h:1", "tcp://", "tcp://h:0", "tcp://h:70000", "tcp://h:x", "h:7878", "tcp://[::1"])
    func refusesWhatIsNotAnEndpoint(_ url: String) {
        #expect(throws: ClientError.self) { try ClientEndpoint(url: url) }
        do {
            _ = try ClientEndpoint(url: url)
        } catch {
            #expect(error.code == .invalidURL)
        }
    }

    /// The WebSocket upgrade's `Host` puts an IPv6 address in brackets, as a URL does.
    @Test func theUpgradesHostHeaderBracketsAnIPv6Address() throws {
        let v6 = try ClientEndpoint(url: "ws://[::1]:8080/events")
        check(Connector.upgradeRequest(v6, token: nil).headers["Host"], ["[::1]:8080"])
        check(v6.description, "ws://[::1]:8080/events")
        let named = try ClientEndpoint(url: "wss://todo.example/events")
        check(Connector.upgradeRequest(named, token: "t").headers["Host"], ["todo.example:8443"])
        check(Connector.upgradeRequest(named, token: "t").headers["Authorization"], ["Bearer t"])
    }
}
