import EventStream

/// Limits and settings of the relay. Every buffer and queue it keeps is bounded by one of
/// these.
public struct RelayConfiguration: Sendable, Equatable {
    /// The largest frame (a TCP line or a WebSocket message) processed; larger ones are
    /// answered `frame_too_large` and dropped.
    public var maxFrameBytes: Int = 64 * 1024
    /// WebSocket messages over this are a protocol violation (close 1009).
    public var webSocketHardCapBytes: Int = 1024 * 1024
    /// Outbound queue bound per connection, in bytes not yet taken by the kernel.
    public var maxQueueBytes: Int = 4 * 1024 * 1024
    /// Outbound queue bound per connection, in frames written since the queue was last empty.
    public var maxQueueFrames: Int = 16_384
    /// After `slow_consumer` is sent, how long the client has to read it before the daemon
    /// closes the connection anyway.
    public var slowConsumerGraceMs: Int = 10_000
    /// When one write leaves more than `maxQueueBytes` unsent, how long until the client is
    /// looked at again: cut if it took nothing meanwhile.
    public var slowConsumerCheckMs: Int = 1_000
    /// SO_SNDBUF for accepted connections (nil leaves the kernel's autotuning on). A small
    /// value makes the outbound bound apply sooner.
    public var socketSendBufferBytes: Int?
    /// TCP keepalive for accepted connections: after this many seconds without traffic the
    /// kernel probes the peer (every third of it, three times) and closes a connection whose
    /// peer is gone (powered off, dropped by a NAT) without a close. nil leaves it off. As
    /// redis's `tcp-keepalive`; idle streams are allowed, dead ones should not hold a slot.
    public var tcpKeepaliveSeconds: Int? = 300
    /// Frames read ahead while a request of the same connection is in flight; past this the
    /// daemon stops reading from that connection until it catches up.
    public var maxPipelinedFrames: Int = 64
    /// Subscription patterns one session may hold.
    public var maxSubscriptions: Int = 64
    /// Connections accepted at once, in total and from one IP address.
    public var maxConnections: Int = 10_000
    public var maxConnectionsPerIP: Int = 1_000
    /// HTTP connections accepted past `maxConnections` for plain requests only (`/healthz`,
    /// `/metrics`, the page): monitoring still answers when every connection is taken. An
    /// upgrade to WebSocket past `maxConnections` gets `503`.
    public var httpReserveConnections: Int = 16
    /// Frames per second one connection may send (token bucket), and the burst allowed.
    public var rateLimitPerSecond: Double = 1_000
    public var rateLimitBurst: Double = 2_000
    /// After the greeting, live broadcasts wait this long (or until the client's first frame)
    /// so that a client which resumes at once sees replayed and live events strictly in seq
    /// order. 0 sends live events immediately.
    public var initialHoldMs: Int = 250
    /// Journal entries fetched per page while resuming.
    public var resumePageSize: Int = 1_000
    /// Seconds an unauthenticated connection may stay idle when auth is required.
    public var unauthenticatedIdleSeconds: Int = 30
    /// How long a connection may take before it is a stream: a TLS handshake, and on the HTTP
    /// listener a whole request (the WebSocket upgrade's included), counted from the
    /// connection's start and again after each answer on a kept-alive connection. Past it the
    /// connection is closed.
    public var handshakeTimeoutMs: Int = 10_000
    /// What `draining` tells clients to wait before reconnecting (jitter is added).
    public var drainReconnectAfterMs: Int = 1_000
    /// How long a graceful shutdown waits for in-flight requests and queues to flush.
    public var drainTimeoutMs: Int = 5_000
    /// The `server` field of the hello.
    public var serverName: String = "todostreamd/1.0.0"
    /// Allowed `Origin` values for WebSocket upgrades; empty means the request's own host.
    public var allowedOrigins: [String] = []
    /// Payload fields whose values monitor sessions (taps, loggers) receive as `"[redacted]"`.
    public var monitorRedactedFields: [String] = []
    /// Whether WebSocket upgrades accept permessage-deflate when the client offers it.
    public var webSocketCompression: Bool = true
    /// WebSocket messages shorter than this go out uncompressed even with deflate.
    public var webSocketCompressMinBytes: Int = 1024

    public init() {}
}

/// Tokens and the role each grants. Tokens are kept only as SHA-256 digests (hex); `digest`
/// turns a presented token into one.
public struct AuthConfiguration: Sendable {
    public var digests: [String: Role]
    public var digest: @Sendable (String) -> String

    public init(digests: [String: Role] = [:], digest: @escaping @Sendable (String) -> String = { $0 }) {
        self.digests = digests
        self.digest = digest
    }

    /// Auth is required once any view token exists; monitor tokens alone only let a session
    /// opt into the monitor role.
    public var required: Bool { digests.values.contains(.view) }

    public func role(for token: String) -> Role? {
        let presented = digest(token)
        // Compare with every digest in constant time per byte, so timing reveals nothing.
        var found: Role?
        for (candidate, role) in digests where constantTimeEquals(candidate, presented) { found = role }
        return found
    }
}

private func constantTimeEquals(_ a: String, _ b: String) -> Bool {
    let lhs = Array(a.utf8)
    let rhs = Array(b.utf8)
    var difference = UInt8(lhs.count == rhs.count ? 0 : 1)
    for index in 0..<max(lhs.count, rhs.count) {
        let x = index < lhs.count ? lhs[index] : 0
        let y = index < rhs.count ? rhs[index] : 0
        difference |= x ^ y
    }
    return difference == 0
}
