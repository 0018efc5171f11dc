/// A storage failure. Its message is safe to log; clients only ever see `unavailable`.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(message: String) { self.message = message }
    public var description: String { message }
}
