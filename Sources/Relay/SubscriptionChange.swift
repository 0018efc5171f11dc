import EventStream

/// What a `subscribe` or `unsubscribe` makes of a session's patterns (PROTOCOL.md §3), decided
/// with no I/O: the new list, or the refusal. Every name must be an event type or a pattern
/// ending in `*` that matches some event (`unknown_type`); subscribing to what the role is not
/// given is `not_permitted` (unsubscribing from it is allowed, and changes nothing); the list
/// keeps each pattern once, in the order first asked, up to `maxSubscriptions`.
enum SubscriptionChange {
    enum Outcome: Equatable {
        case apply([TypePattern])
        case refuse(RelayErrorCode, String)
    }

    static func outcome(
        subscribe: Bool,
        types: FrameField<[String]>,
        current: [TypePattern],
        role: Role,
        catalog: EventCatalog,
        maxSubscriptions: Int
    ) -> Outcome {
        let verb = subscribe ? "subscribe" : "unsubscribe"
        guard case .value(let names) = types else {
            return .refuse(.invalidFrame, "\(verb) needs types: a list of event type names or patterns ending in *.")
        }
        var requested: [TypePattern] = []
        for name in names {
            guard let pattern = TypePattern(name) else {
                return .refuse(
                    .invalidFrame,
                    "\"\(name.prefix(80))\" is not an event type name or a pattern ending in *."
                )
            }
            switch catalog.resolve(pattern, for: role) {
            case .unknown:
                return .refuse(.unknownType, "No event type matches \(pattern).")
            case .notPermitted where subscribe:
                return .refuse(.notPermitted, "\(pattern) is not delivered to \(role.rawValue) clients.")
            case .notPermitted, .types:
                if !requested.contains(pattern) { requested.append(pattern) }
            }
        }
        var next = current
        if subscribe {
            for pattern in requested where !next.contains(pattern) { next.append(pattern) }
            if next.count > maxSubscriptions {
                return .refuse(.notPermitted, "At most \(maxSubscriptions) subscriptions per session.")
            }
        } else {
            next.removeAll { requested.contains($0) }
        }
        return .apply(next)
    }
}
