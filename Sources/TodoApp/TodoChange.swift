import Foundation

/// The fields a detail editor may change; a field left nil keeps the stored value.
public struct TodoEdit: Sendable, Hashable {
    public var title: String?
    public var subtitle: String?
    public var priority: TodoPriority?
    public var completed: Bool?
    public var deleted: Bool?

    public init(
        title: String? = nil,
        subtitle: String? = nil,
        priority: TodoPriority? = nil,
        completed: Bool? = nil,
        deleted: Bool? = nil
    ) {
        self.title = title
        self.subtitle = subtitle
        self.priority = priority
        self.completed = completed
        self.deleted = deleted
    }
}

/// What a write does to the stored todo.
public enum TodoChange: Sendable, Hashable {
    case toggleComplete
    case delete
    case update(TodoEdit)
}

/// A model-layer write: a change applied to the **stored** todo, never to a client's copy.
public struct TodoWrite: Sendable, Hashable {
    public let id: UUID
    /// When given, the write fails with `conflict` unless the stored version equals it.
    public let expectedVersion: Int?
    public let change: TodoChange
    /// The client's mutation id: a write whose `mid` was already applied (and is still in the
    /// journal) is not applied again; the store answers it with the original outcome.
    public let mid: String?

    public init(id: UUID, expectedVersion: Int?, change: TodoChange, mid: String? = nil) {
        self.id = id
        self.expectedVersion = expectedVersion
        self.change = change
        self.mid = mid
    }

    /// Applies the change to what is stored (nil when nothing is) at time `now`. Pure: the
    /// store calls it inside its transaction.
    public func apply(to stored: Todo?, now: Timestamp) -> Result<Todo, AppError> {
        guard let stored else {
            // Only a save of a fresh, never-stored todo creates one.
            guard case .update(let edit) = change, expectedVersion == nil || expectedVersion == 0 else {
                return .failure(.notFound(id.lowercased))
            }
            return Self.edited(Todo(id: id, createdAt: now), with: edit, now: now)
        }
        if let expectedVersion, expectedVersion != stored.version {
            return .failure(.conflict(stored: stored, expected: expectedVersion))
        }
        var todo = stored
        switch change {
        case .toggleComplete:
            todo.completedAt = stored.complete ? nil : now
        case .delete:
            todo.deleted = true
        case .update(let edit):
            switch Self.edited(stored, with: edit, now: now) {
            case .success(let edited): todo = edited
            case .failure(let error): return .failure(error)
            }
        }
        todo.version = stored.version + 1
        return .success(todo)
    }

    private static func edited(_ base: Todo, with edit: TodoEdit, now: Timestamp) -> Result<Todo, AppError> {
        var todo = base
        switch Todo.validatedTitle(edit.title ?? base.title) {
        case .success(let title): todo.title = title
        case .failure(let error): return .failure(error)
        }
        if let subtitle = edit.subtitle {
            switch Todo.validatedSubtitle(subtitle) {
            case .success(let value): todo.subtitle = value
            case .failure(let error): return .failure(error)
            }
        }
        if let priority = edit.priority { todo.priority = priority }
        if let deleted = edit.deleted { todo.deleted = deleted }
        // Completion keeps its original time unless it actually changes (the seed reset it
        // on every save).
        if let completed = edit.completed, completed != base.complete {
            todo.completedAt = completed ? now : nil
        }
        if base.version == 0 {
            todo.createdAt = now
            todo.version = 1
        }
        return .success(todo)
    }
}

/// A todo as committed, with the seq of the broadcast that announces it and, when the store
/// has it, that broadcast's payload as journaled (the same bytes every client gets).
///
/// `duplicate`: the write's `mid` had already been applied, by an earlier write; nothing was
/// written now. `todo`, `seq` and `broadcastPayload` are then that earlier write's.
public struct SavedTodo: Sendable, Hashable {
    public let todo: Todo
    public let seq: UInt64
    public let broadcastPayload: [UInt8]?
    public let duplicate: Bool

    public init(todo: Todo, seq: UInt64, broadcastPayload: [UInt8]? = nil, duplicate: Bool = false) {
        self.todo = todo
        self.seq = seq
        self.broadcastPayload = broadcastPayload
        self.duplicate = duplicate
    }
}

/// A model-layer read: every todo, or the one with `id`.
public struct ReadTodos: Sendable, Hashable {
    public enum Purpose: Sendable, Hashable {
        case list
        case detail
    }

    public let id: UUID?
    public let purpose: Purpose
    /// A detail's `todo.version`, when the request gave one: a todo stored at another version
    /// is answered with `conflict` (PROTOCOL.md §6), as a write is.
    public let expectedVersion: Int?

    public init(id: UUID?, purpose: Purpose, expectedVersion: Int? = nil) {
        self.id = id
        self.purpose = purpose
        self.expectedVersion = expectedVersion
    }
}
