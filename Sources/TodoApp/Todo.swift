import Foundation

public enum TodoPriority: String, Sendable, Hashable, CaseIterable {
    case high
    case normal

    /// The seed's display string: `HIGH`, `NORMAL` (literals: written into every view model).
    public var displayString: String {
        switch self {
        case .high: "HIGH"
        case .normal: "NORMAL"
        }
    }

    /// The list row's subtitle, `Priority: HIGH` (`TodoViewModel.subtitle`).
    var prioritySubtitle: String {
        switch self {
        case .high: "Priority: HIGH"
        case .normal: "Priority: NORMAL"
        }
    }
}

/// The seed's model object, plus a version for optimistic concurrency.
///
/// Equality compares every field, `deleted` included (the seed forgot it).
public struct Todo: Sendable, Hashable {
    public var id: UUID
    public var createdAt: Timestamp
    public var title: String
    public var subtitle: String
    public var priority: TodoPriority
    public var completedAt: Timestamp?
    public var deleted: Bool
    /// 0 for a todo never saved; rises by 1 with every save.
    public var version: Int

    public init(
        id: UUID = UUID(),
        createdAt: Timestamp,
        title: String = "",
        subtitle: String = "",
        priority: TodoPriority = .normal,
        completedAt: Timestamp? = nil,
        deleted: Bool = false,
        version: Int = 0
    ) {
        self.id = id
        self.createdAt = createdAt
        self.title = title
        self.subtitle = subtitle
        self.priority = priority
        self.completedAt = completedAt
        self.deleted = deleted
        self.version = version
    }

    public var complete: Bool { completedAt != nil }
}

extension Todo {
    public static let maxTitleScalars = 1000
    public static let maxSubtitleScalars = 10_000

    /// Trims a title and checks it: non-empty, at most 1,000 Unicode scalars.
    public static func validatedTitle(_ raw: String) -> Result<String, AppError> {
        let title = trimmed(raw)
        if title.isEmpty {
            return .failure(AppError(code: .validationFailed, message: "Please add a title.", field: "title"))
        }
        // A scalar takes at least one UTF-8 byte: short text needs no counting.
        if title.utf8.count > maxTitleScalars, title.unicodeScalars.count > maxTitleScalars {
            return .failure(
                AppError(
                    code: .validationFailed,
                    message: "The title is too long (at most \(maxTitleScalars) characters).",
                    field: "title"
                )
            )
        }
        if let error = nulError(in: title, field: "title") { return .failure(error) }
        return .success(title)
    }

    /// U+0000 is refused in text: PostgreSQL cannot store it in text at all, and both engines
    /// keep the same rules.
    private static func nulError(in text: String, field: String) -> AppError? {
        // Scanned as contiguous bytes: iterating the UTF-8 view by index costs far more.
        let hasNul =
            text.utf8.withContiguousStorageIfAvailable { bytes in
                bytes.baseAddress.map { memchr($0, 0, bytes.count) != nil } ?? false
            } ?? text.utf8.contains(0)
        guard hasNul else { return nil }
        return AppError(
            code: .validationFailed,
            message: "The \(field) cannot contain the character U+0000.",
            field: field
        )
    }

    /// `raw` without leading and trailing white space and newlines. Text that starts and ends
    /// with printable ASCII (the usual case) is returned as it is: every other scalar's UTF-8
    /// form starts and ends with a byte of 0x80 or more.
    static func trimmed(_ raw: String) -> String {
        let utf8 = raw.utf8
        if let first = utf8.first, let last = utf8.last, isPrintableASCII(first), isPrintableASCII(last) {
            return raw
        }
        return raw.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private static func isPrintableASCII(_ byte: UInt8) -> Bool {
        byte > 0x20 && byte < 0x7F
    }

    public static func validatedSubtitle(_ raw: String) -> Result<String, AppError> {
        if raw.utf8.count > maxSubtitleScalars, raw.unicodeScalars.count > maxSubtitleScalars {
            return .failure(
                AppError(
                    code: .validationFailed,
                    message: "The subtitle is too long (at most \(maxSubtitleScalars) characters).",
                    field: "subtitle"
                )
            )
        }
        if let error = nulError(in: raw, field: "subtitle") { return .failure(error) }
        return .success(raw)
    }
}
