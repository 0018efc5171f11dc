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
}
