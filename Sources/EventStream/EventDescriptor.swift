/// Which layer of the app an event belongs to.
///
/// View-layer events are the ones remote views publish and receive; model-layer events are
/// internal to the daemon and visible only to clients with the monitor role.
public enum EventLayer: String, Sendable, Hashable {
    case view
    case model
}

/// Whether an event asks for something or answers it.
public enum EventDirection: String, Sendable, Hashable {
    case request
    case response
}

/// What the stream knows about one event type, independent of its payload.
public struct EventDescriptor: Sendable, Hashable {
    public let name: String
    public let layer: EventLayer
    public let direction: EventDirection

    public init(name: String, layer: EventLayer, direction: EventDirection) {
        self.name = name
        self.layer = layer
        self.direction = direction
    }

    /// A view client may publish only view-layer requests.
    public var isPublishableByView: Bool { layer == .view && direction == .request }
}
