/// An error the app's servers answer with, carried in the response's `error` field.
///
/// Its message is for people; it never holds paths, SQL or stack traces.
public struct AppError: Error, Sendable, Hashable {
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let rawValue: String
        init(_ rawValue: String) { self.rawValue = rawValue }

        public static let validationFailed = Code("validation_failed")
        public static let notFound = Code("not_found")
        public static let conflict = Code("conflict")
        public static let unavailable = Code("unavailable")

        public var description: String { rawValue }
    }

    public let code: Code
    public let message: String
    public let field: String?
    /// For `conflict`: the stored todo as it is now.
    public let current: TodoViewModel?

    public init(code: Code, message: String, field: String? = nil, current: TodoViewModel? = nil) {
        self.code = code
        self.message = message
        self.field = field
        self.current = current
    }

    public static func notFound(_ id: UUIDString) -> AppError {
        AppError(code: .notFound, message: "No todo with id \(id).", field: "todo.id")
    }

    /// A request that named `expected` as the todo's version, while `stored` is at another.
    public static func conflict(stored: Todo, expected: Int) -> AppError {
        AppError(
            code: .conflict,
            message:
                "This todo was changed elsewhere (version \(stored.version), not \(expected)). Review the current state and try again.",
            current: TodoViewModel(todo: stored)
        )
    }

    public static let unavailable = AppError(
        code: .unavailable,
        message: "Storage is unavailable right now; nothing was changed. Try again."
    )

    /// A commit whose answer was lost and that could not be looked up in time (PostgreSQL):
    /// the change may have been saved, and the message must not say it was not.
    public static let unavailableInDoubt = AppError(
        code: .unavailable,
        message:
            "Storage failed while this change was being saved, and whether it was saved cannot be told yet. If it was, its broadcast follows; retry with the same mid to be safe."
    )
}

public typealias UUIDString = String
