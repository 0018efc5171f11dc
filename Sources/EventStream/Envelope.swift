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

/// Who caused an event: the session, the `id` of the frame it answers, and the client's
/// mutation id (`mid`) when the frame carried one. The stream only carries `mid`; the app
/// decides what it means (the todo app makes its writes idempotent by it).
public struct Origin: Sendable, Hashable {
    public let session: SessionID
    public let correlation: CorrelationID?
    public let mid: String?

    public init(session: SessionID, correlation: CorrelationID?, mid: String? = nil) {
        self.session = session
        self.correlation = correlation
        self.mid = mid
    }
}

/// What a frame about an idempotent write says of it: the client's mutation id (`mid`) of the
/// write, and, when the write had already been applied before this request, the seq it was
/// applied with (the frame is then a duplicate's reply: `"duplicate":true,"applied_seq":N`).
public struct MutationMark: Sendable, Hashable {
    public let mid: String
    public let appliedSeq: UInt64?

    public init(mid: String, appliedSeq: UInt64? = nil) {
        self.mid = mid
        self.appliedSeq = appliedSeq
    }

    /// True when the frame answers a request whose `mid` had already been applied.
    public var isDuplicate: Bool { appliedSeq != nil }
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
    /// The mutation id of the write this event is about, when it had one.
    public let mark: MutationMark?

    public init(_ event: Event, _ scope: Scope, encodedPayload: [UInt8]? = nil, mark: MutationMark? = nil) {
        self.event = event
        self.scope = scope
        self.encodedPayload = encodedPayload
        self.mark = mark
    }
}
