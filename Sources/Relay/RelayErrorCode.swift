/// The relay's error codes (docs/PROTOCOL.md §7), sent as `{"op":"error",...}`.
public struct RelayErrorCode: Sendable, Hashable, CustomStringConvertible {
    public let rawValue: String
    private init(_ rawValue: String) { self.rawValue = rawValue }

    public static let invalidJSON = RelayErrorCode("invalid_json")
    public static let invalidFrame = RelayErrorCode("invalid_frame")
    public static let frameTooLarge = RelayErrorCode("frame_too_large")
    public static let unsupportedFrame = RelayErrorCode("unsupported_frame")
    public static let unknownType = RelayErrorCode("unknown_type")
    public static let unknownOp = RelayErrorCode("unknown_op")
    public static let notPermitted = RelayErrorCode("not_permitted")
    public static let invalidPayload = RelayErrorCode("invalid_payload")
    public static let unauthorized = RelayErrorCode("unauthorized")
    public static let rateLimited = RelayErrorCode("rate_limited")
    public static let slowConsumer = RelayErrorCode("slow_consumer")
    public static let unavailable = RelayErrorCode("unavailable")

    public var description: String { rawValue }
}
