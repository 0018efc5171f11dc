/// An event that can travel on the stream. Its name is one of the catalog's.
public protocol StreamEvent: Sendable {
    var name: String { get }
    /// For an event that answers a request with a failure, the failure's stable code (counted
    /// by the relay's metrics); nil otherwise.
    var failureCode: String? { get }
    /// For a reply whose request's outcome cannot be told (a write storage may or may not have
    /// saved): the relay closes the requester's connection instead of answering, so that the
    /// client reconnects and resumes, and learns from the journal what happened.
    var outcomeUnknown: Bool { get }
}

extension StreamEvent {
    public var failureCode: String? { nil }
    public var outcomeUnknown: Bool { false }
}

/// The seed's observer, made explicit: one event in, the events it causes out. A plain
/// function: it never waits.
///
/// A server names the event types it observes; the bus calls it only for those.
public protocol EventServer<Event>: Sendable {
    associatedtype Event: StreamEvent
    var observes: Set<String> { get }
    func handle(_ event: Event) -> [Emission<Event>]
    /// The same, knowing who caused the event (its session, `id` and `mid`). The default
    /// ignores the origin.
    func handle(_ event: Event, origin: Origin) -> [Emission<Event>]
}

extension EventServer {
    public func handle(_ event: Event, origin: Origin) -> [Emission<Event>] { handle(event) }
}

/// The one server that may wait: the model layer, which answers everything a batch asked of
/// storage at once (one commit per batch), each event's emissions in the order given.
public protocol BatchServer<Event>: Sendable {
    associatedtype Event: StreamEvent
    var observes: Set<String> { get }
    /// Returns one list of emissions per event, in order.
    nonisolated(nonsending) func handle(batch: [Event]) async -> [[Emission<Event>]]
}

/// One event leaving the bus: what it is, how far it travels, who caused it.
public struct Delivery<Event: Sendable>: Sendable {
    public let event: Event
    public let scope: Scope
    public let origin: Origin
    /// The payload already encoded, when the server that emitted it had it (see `Emission`).
    public let encodedPayload: [UInt8]?
    /// The mutation id of the write this event is about (see `Emission`).
    public let mark: MutationMark?

    public init(
        _ event: Event,
        _ scope: Scope,
        _ origin: Origin,
        encodedPayload: [UInt8]? = nil,
        mark: MutationMark? = nil
    ) {
        self.event = event
        self.scope = scope
        self.origin = origin
        self.encodedPayload = encodedPayload
        self.mark = mark
    }
}

/// Where events leave the bus: the network relay, a test recorder.
public protocol EventSink<Event>: Sendable {
    associatedtype Event: StreamEvent
    /// Everything one batch caused, request by request in arrival order (each request's events
    /// depth first, in causal order), and the requests it answered: once this returns, every
    /// one of `requests` has had all of its answers handed over.
    func deliver(_ deliveries: [Delivery<Event>], answering requests: [Origin])
}
