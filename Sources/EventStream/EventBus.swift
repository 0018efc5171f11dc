/// The ordered bus: the seed's `eventsSignal`/`eventsObserver`, run a batch at a time.
///
/// Publishing an event records it (so monitors see it), then hands it to every server that
/// observes its type; whatever they emit is published in turn, depth first, so the events one
/// request causes leave the bus in causal order. Dispatch is by an index from type to servers.
///
/// The servers are plain functions, so a whole batch of requests runs through them at once.
/// Events the model layer observes are parked until every request of the batch has run as far
/// as it can; the model layer then answers all of them in one call (one commit), and each
/// answer continues depth first inside its own request. Deliveries come out request by
/// request, in arrival order.
///
/// `run` is inlinable so that it is specialised for the app's event type where the daemon
/// uses it: unspecialised, every generic type it touches was looked up at run time.
public struct EventBus<Event: StreamEvent>: Sendable {
    /// Where each observed type goes: its servers, and whether the model layer takes it too
    /// (one look-up per event).
    @usableFromInline let routes: [String: Route]
    @usableFromInline let model: (any BatchServer<Event>)?

    @usableFromInline
    struct Route: Sendable {
        @usableFromInline var servers: [any EventServer<Event>] = []
        @usableFromInline var toModel = false
    }

    public init(servers: [any EventServer<Event>], model: (any BatchServer<Event>)? = nil) {
        var routes: [String: Route] = [:]
        for server in servers {
            for name in server.observes { routes[name, default: Route()].servers.append(server) }
        }
        for name in model?.observes ?? [] { routes[name, default: Route()].toModel = true }
        self.routes = routes
        self.model = model
    }

    /// Runs a batch of published events (each `.internal`, from its origin) and returns what
    /// they caused, request by request.
    @inlinable
    public nonisolated(nonsending) func run(_ batch: [(event: Event, origin: Origin)]) async -> [Delivery<Event>] {
        var run = BatchRun<Event>(count: batch.count)
        for (index, item) in batch.enumerated() {
            publish(Emission(item.event, .internal), origin: item.origin, request: index, into: &run)
        }
        while let model, !run.parked.isEmpty {
            let parked = run.parked
            run.parked = []
            let answers = await model.handle(batch: parked.map(\.event))
            for (item, emissions) in zip(parked, answers) {
                for emission in emissions {
                    publish(emission, origin: item.origin, request: item.request, into: &run)
                }
            }
        }
        return run.deliveries
    }

    @inlinable
    func publish(
        _ emission: Emission<Event>,
        origin: Origin,
        request: Int,
        into run: inout BatchRun<Event>
    ) {
        let event = emission.event
        run.perRequest[request].append(
            Delivery(event, emission.scope, origin, encodedPayload: emission.encodedPayload, mark: emission.mark)
        )
        guard let route = routes[event.name] else { return }
        for server in route.servers {
            for next in server.handle(event, origin: origin) {
                publish(next, origin: origin, request: request, into: &run)
            }
        }
        if route.toModel {
            run.parked.append((event, origin, request))
        }
    }
}

/// One batch on its way through the bus.
@usableFromInline
struct BatchRun<Event: StreamEvent> {
    @usableFromInline var perRequest: [[Delivery<Event>]]
    /// Events waiting for the model layer, with the request they belong to.
    @usableFromInline var parked: [(event: Event, origin: Origin, request: Int)] = []

    @inlinable
    init(count: Int) {
        // Room for the handful of events a request usually causes, so that each list is
        // allocated once.
        perRequest = []
        perRequest.reserveCapacity(count)
        for _ in 0..<count {
            var list: [Delivery<Event>] = []
            list.reserveCapacity(6)
            perRequest.append(list)
        }
    }

    @inlinable
    var deliveries: [Delivery<Event>] {
        if perRequest.count == 1 { return perRequest[0] }
        var all: [Delivery<Event>] = []
        all.reserveCapacity(perRequest.reduce(0) { $0 + $1.count })
        for part in perRequest { all.append(contentsOf: part) }
        return all
    }
}
