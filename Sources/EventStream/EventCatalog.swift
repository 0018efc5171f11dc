/// The closed set of event types a stream carries, each with a small dense index so that
/// subscriptions can be kept as bit sets.
public struct EventCatalog: Sendable {
    public let descriptors: [EventDescriptor]
    private let indexByName: [String: Int]

    public init(_ descriptors: [EventDescriptor]) {
        precondition(descriptors.count <= 64, "a catalog holds at most 64 event types")
        self.descriptors = descriptors
        var index: [String: Int] = [:]
        for (offset, descriptor) in descriptors.enumerated() { index[descriptor.name] = offset }
        self.indexByName = index
    }

    public subscript(name: String) -> EventDescriptor? {
        indexByName[name].map { descriptors[$0] }
    }

    public func index(of name: String) -> Int? { indexByName[name] }

    /// The outcome of resolving one pattern for a role.
    public enum Resolution: Sendable, Equatable {
        /// The set of event types (as a bit mask over catalog indices) the pattern selects.
        case types(TypeSet)
        /// The pattern names no event at all.
        case unknown
        /// The pattern names events, but none this role may receive.
        case notPermitted
    }

    public func resolve(_ pattern: TypePattern, for role: Role) -> Resolution {
        var any = false
        var allowed = TypeSet()
        for (offset, descriptor) in descriptors.enumerated() where pattern.matches(descriptor.name) {
            any = true
            if role.mayReceive(descriptor) { allowed.insert(offset) }
        }
        if !any { return .unknown }
        // An exact name the role may not receive is refused; a wildcard that selects some
        // receivable events silently leaves out the rest (`*` for a view means its responses).
        if allowed.isEmpty { return .notPermitted }
        return .types(allowed)
    }

    /// Resolves a list of already validated patterns, skipping any that select nothing.
    public func resolveAll(_ patterns: [TypePattern], for role: Role) -> TypeSet {
        var set = TypeSet()
        for pattern in patterns {
            if case .types(let types) = resolve(pattern, for: role) { set.formUnion(types) }
        }
        return set
    }
}

/// A set of catalog indices.
public struct TypeSet: Sendable, Hashable {
    public private(set) var bits: UInt64

    public init(bits: UInt64 = 0) { self.bits = bits }

    public var isEmpty: Bool { bits == 0 }
    public func contains(_ index: Int) -> Bool { bits & (1 << UInt64(index)) != 0 }
    public mutating func insert(_ index: Int) { bits |= 1 << UInt64(index) }
    public mutating func formUnion(_ other: TypeSet) { bits |= other.bits }
}
