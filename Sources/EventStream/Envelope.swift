/// Identifies one client session on the stream.
public struct SessionID: Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { String(rawValue) }
}

/// The `id` a client put on a frame, echoed back as `re`: a string of 1–64 characters or an
/// integer.
public enum CorrelationID: Sendable, Hashable {
    case string(String)
    case integer(Int64)
}

/// Who caused an event: the session and the `id` of the frame it answers.
public struct Origin: Sendable, Hashable {
    public let session: SessionID
    public let correlation: CorrelationID?

    public init(session: SessionID, correlation: CorrelationID?) {
        self.session = session
        self.correlation = correlation
    }
}

/// How far an event travels.
public enum Scope: Sendable, Hashable {
    /// Inside the daemon (model-layer events, and requests themselves): monitors only.
    case `internal`
    /// An answer for the requester alone (and monitors).
    case reply
    /// A state change for every subscriber, with its place in the total order.
    case broadcast(seq: UInt64)
}

/// An event a server emits, with how far it travels.
public struct Emission<Event: Sendable>: Sendable {
    public let event: Event
    public let scope: Scope
    /// The event's payload already encoded (JSON bytes), when the server has it at hand (a
    /// broadcast's journal entry): the relay sends these bytes instead of encoding again.
    public let encodedPayload: [UInt8]?

    public init(_ event: Event, _ scope: Scope, encodedPayload: [UInt8]? = nil) {
        self.event = event
        self.scope = scope
        self.encodedPayload = encodedPayload
    }
}
