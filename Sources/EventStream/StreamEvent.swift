/// An event that can travel on the stream. Its name is one of the catalog's.
public protocol StreamEvent: Sendable {
    var name: String { get }
}

/// The seed's observer, made explicit: one event in, the events it causes out.
///
/// A server names the event types it observes; the bus calls it only for those.
public protocol EventServer<Event>: Sendable {
    associatedtype Event: StreamEvent
    var observes: Set<String> { get }
    func handle(_ event: Event) async -> [Emission<Event>]
}

/// Where events leave the bus: the network relay, a test recorder.
public protocol EventSink<Event>: Sendable {
    associatedtype Event: StreamEvent
    func deliver(_ event: Event, scope: Scope, origin: Origin)
}
