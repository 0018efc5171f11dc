/// An exact event name (`ResponseTodoViewModel`) or a prefix pattern ending in `*`
/// (`Response*`, `*`).
public struct TypePattern: Sendable, Hashable, CustomStringConvertible {
    public let text: String
    private let prefix: Substring?

    /// Returns nil when the text is empty or has a `*` anywhere but at the end.
    public init?(_ text: String) {
        guard !text.isEmpty, text.utf8.count <= 128 else { return nil }
        if text.hasSuffix("*") {
            let body = text.dropLast()
            guard !body.contains("*") else { return nil }
            self.prefix = body
        } else {
            guard !text.contains("*") else { return nil }
            self.prefix = nil
        }
        self.text = text
    }

    public var isWildcard: Bool { prefix != nil }

    public func matches(_ name: String) -> Bool {
        if let prefix { return name.hasPrefix(prefix) }
        return name == text
    }

    public var description: String { text }
}
