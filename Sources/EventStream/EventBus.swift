/// The ordered bus: the seed's `eventsSignal`/`eventsObserver`.
///
/// Publishing an event hands it to the sink (so monitors see it), then to every server that
/// observes its type; whatever they emit is published in turn, depth first, so that the
/// events one request causes leave the bus in causal order. Dispatch is by an index from type
/// to servers, never by asking every server about every event.
public struct EventBus<Event: StreamEvent>: Sendable {
    private let serversByType: [String: [any EventServer<Event>]]
    private let sink: any EventSink<Event>

    public init(servers: [any EventServer<Event>], sink: any EventSink<Event>) {
        var index: [String: [any EventServer<Event>]] = [:]
        for server in servers {
            for name in server.observes { index[name, default: []].append(server) }
        }
        self.serversByType = index
        self.sink = sink
    }

    /// Publishes an event and returns once every event it caused has left the bus.
    /// Within a pipelining session (see `RequestTicket`), a request's replies and broadcasts
    /// leave only after those of the session's previous request.
    public func publish(_ event: Event, origin: Origin, scope: Scope = .internal) async {
        if case .internal = scope {
        } else if let ticket = RequestTicket.current {
            await ticket.awaitPredecessor()
        }
        sink.deliver(event, scope: scope, origin: origin)
        guard let servers = serversByType[event.name] else { return }
        for server in servers {
            for emission in await server.handle(event) {
                await publish(emission.event, origin: origin, scope: emission.scope)
            }
        }
    }
}
