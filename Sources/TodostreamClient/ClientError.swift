/// An error of the client library. `code` is stable; `message` is for people and never holds
/// a payload.
public struct ClientError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }

        /// The URL does not parse.
        public static let invalidURL = Code("invalid_url")
        /// TLS files could not be read or used.
        public static let invalidTLSConfiguration = Code("invalid_tls_configuration")
        /// The outbox holds `outboxCapacity` unanswered requests already.
        public static let outboxFull = Code("outbox_full")
        /// No answer within the request timeout. A write may or may not have been applied.
        public static let timeout = Code("timeout")
        /// The client was closed before the answer came.
        public static let closed = Code("closed")
        /// The daemon refused the frame (`{"op":"error"}`); `serverCode` says why.
        public static let rejected = Code("rejected")
        /// The request is over `maxRequestBytes` (the frame limit assumed for the daemon); it
        /// was not sent.
        public static let requestTooLarge = Code("request_too_large")
        /// The answer to the request was over `maxFrameBytes`: it was not read.
        public static let responseTooLarge = Code("response_too_large")
        /// The daemon sent something this client cannot read.
        public static let protocolViolation = Code("protocol_violation")
        /// The daemon refused the token.
        public static let unauthorized = Code("unauthorized")

        public var description: String { rawValue }
    }

    public let code: Code
    public let message: String
    /// The daemon's error code, for `rejected` (e.g. `rate_limited`, `unavailable`).
    public let serverCode: String?

    public init(_ code: Code, _ message: String, serverCode: String? = nil) {
        self.code = code
        self.message = message
        self.serverCode = serverCode
    }

    public var description: String {
        if let serverCode { return "\(code) (\(serverCode)): \(message)" }
        return "\(code): \(message)"
    }
}
