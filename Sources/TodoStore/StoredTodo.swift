import Foundation
import TodoApp

/// A todo as both engines store it: the id as text, times as milliseconds since 1970, the
/// priority as its raw value.
enum StoredTodo {
    static func decode(
        id: String,
        createdAt: Int64,
        title: String,
        subtitle: String,
        priority: String,
        completedAt: Int64?,
        deleted: Bool,
        version: Int64
    ) throws -> Todo {
        guard let uuid = UUID(uuidString: id) else { throw StoreError(message: "A stored todo row is damaged.") }
        return Todo(
            id: uuid,
            createdAt: Timestamp(millisecondsSince1970: createdAt),
            title: title,
            subtitle: subtitle,
            priority: TodoPriority(rawValue: priority) ?? .normal,
            completedAt: completedAt.map { Timestamp(millisecondsSince1970: $0) },
            deleted: deleted,
            version: Int(version)
        )
    }

    /// The columns `id, created_at, title, subtitle, priority, completed_at, deleted, version`;
    /// the empty side of an outer join gives nil for each.
    typealias Columns = (
        id: String?, createdAt: Int64?, title: String?, subtitle: String?, priority: String?, completedAt: Int64?,
        deleted: Bool?, version: Int64?
    )

    /// A todo from a row's columns: nil when the row holds no todo.
    static func decodeIfPresent(_ row: Columns) throws -> Todo? {
        guard let id = row.id, let createdAt = row.createdAt, let title = row.title, let subtitle = row.subtitle,
            let priority = row.priority, let deleted = row.deleted, let version = row.version
        else { return nil }
        return try decode(
            id: id,
            createdAt: createdAt,
            title: title,
            subtitle: subtitle,
            priority: priority,
            completedAt: row.completedAt,
            deleted: deleted,
            version: version
        )
    }
}
