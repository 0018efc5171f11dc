import ArgumentParser

/// The server a scenario drives.
enum Target: String, ExpressibleByArgument, Sendable, CaseIterable {
    /// todostreamd over TCP, newline-delimited JSON.
    case todostreamd
    /// nats-server, plain text protocol (`SUB`/`PUB`).
    case nats
    /// redis-server, RESP (`SUBSCRIBE`/`PUBLISH`).
    case redis
}

/// What a connection does in a scenario.
enum ConnectionMode: Sendable, Equatable {
    /// Receives fan-out messages.
    case subscriber
    /// Completes its handshake and subscription, then stops reading.
    case slowSubscriber
    /// Publishes the fan-out messages.
    case publisher
    /// Sends a request, waits for its own broadcast, repeats.
    case requester
    /// Only the handshake, then holds the connection.
    case idle
    /// redis only: the publishing half of a requester (RESP2 forbids PUBLISH on a subscribed
    /// connection).
    case requestPublisher
}

/// How the load tool reaches todostreamd.
enum Transport: String, ExpressibleByArgument, Sendable {
    /// NDJSON over TCP (the `--listen` port).
    case tcp
    /// WebSocket at `/events` (the `--http-listen` port).
    case webSocket = "ws"
    /// NDJSON over TLS (the `--tls-listen` port).
    case tls
    /// WebSocket at `/events` over TLS (the HTTP listener with `--http-tls`).
    case secureWebSocket = "wss"

    /// Whether the transport's frames are WebSocket messages.
    var isWebSocket: Bool { self == .webSocket || self == .secureWebSocket }

    /// Whether the connection starts with a TLS handshake.
    var isTLS: Bool { self == .tls || self == .secureWebSocket }
}
