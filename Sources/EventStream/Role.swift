/// What a session may do on the stream.
public enum Role: String, Sendable, Hashable {
    /// Publishes view-layer requests, receives view-layer responses.
    case view
    /// Receives every event, including model-layer events and every reply; publishes nothing.
    case monitor

    /// Whether a session with this role may receive events of the given descriptor.
    public func mayReceive(_ descriptor: EventDescriptor) -> Bool {
        switch self {
        case .monitor: return true
        case .view: return descriptor.layer == .view && descriptor.direction == .response
        }
    }
}
