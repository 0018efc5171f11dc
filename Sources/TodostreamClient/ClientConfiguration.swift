import Logging

/// How a `TodostreamClient` connects and how much it keeps. Every buffer has a bound here.
public struct ClientConfiguration: Sendable {
    /// TLS settings for `tls://` and `wss://`: PEM files.
    public struct TLS: Sendable, Hashable {
        /// The CA certificates to trust instead of the system's.
        public var caFile: String?
        /// A client certificate (chain) and its key, for daemons that require one.
        public var certificateFile: String?
        public var keyFile: String?

        public init(caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil) {
            self.caFile = caFile
            self.certificateFile = certificateFile
            self.keyFile = keyFile
        }
    }

    public var endpoint: ClientEndpoint
    /// A view (or monitor) token; sent with `auth` after the greeting on every transport (on
    /// WebSocket also as `Authorization: Bearer` with the upgrade). A token the daemon refuses
    /// stops the client (`stoppedBecause`).
    public var token: String?
    public var tls: TLS
    public var backoff: Backoff
    /// How long a connection attempt may take: the TCP connect, and the WebSocket upgrade.
    public var connectTimeout: Duration
    /// How long `request` waits for its answer, connection losses included.
    public var requestTimeout: Duration
    /// Requests accepted and not yet answered (writes made while disconnected among them).
    public var outboxCapacity: Int
    /// Events `events` holds for a slow reader; past it the reader gets `.reset`. Also the
    /// broadcasts held while a resume catches up (a live one can come before the replay of
    /// those it follows); past it they are given up with a `.reset` too.
    public var eventBufferCapacity: Int
    /// The longest frame accepted from the daemon. A longer one is not read: the request it
    /// answers fails (`responseTooLarge`), a broadcast is given up like a gap
    /// (`.frameTooLarge`, then `.reset`). Over NDJSON it is skipped up to its newline and the
    /// connection goes on; over WebSocket it closes the connection (1009).
    public var maxFrameBytes: Int
    /// The frame limit assumed for the daemon (its `limits.max_frame_bytes`, which the greeting
    /// does not tell; 65536 by default): a request longer than this is refused here, unsent
    /// (`requestTooLarge`). One under it that is over the daemon's own limit is answered
    /// `frame_too_large` by the daemon, and fails with it (`rejected`).
    public var maxRequestBytes: Int
    public var logger: Logger

    public init(
        endpoint: ClientEndpoint,
        token: String? = nil,
        tls: TLS = TLS(),
        backoff: Backoff = Backoff(),
        connectTimeout: Duration = .seconds(10),
        requestTimeout: Duration = .seconds(30),
        outboxCapacity: Int = 1024,
        eventBufferCapacity: Int = 4096,
        maxFrameBytes: Int = 1 << 20,
        maxRequestBytes: Int = 65_536,
        logger: Logger = Logger(label: "todostream.client", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.endpoint = endpoint
        self.token = token
        self.tls = tls
        self.backoff = backoff
        self.connectTimeout = connectTimeout
        self.requestTimeout = requestTimeout
        self.outboxCapacity = outboxCapacity
        self.eventBufferCapacity = eventBufferCapacity
        self.maxFrameBytes = maxFrameBytes
        self.maxRequestBytes = maxRequestBytes
        self.logger = logger
    }
}
