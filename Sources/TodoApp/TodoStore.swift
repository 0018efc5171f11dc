import Foundation

/// One model-layer request as the store sees it.
public enum ModelRequest: Sendable, Hashable {
    case read(ReadTodos)
    case write(TodoWrite)
}

/// The store's answer to one `ModelRequest`.
public enum ModelAnswer: Sendable, Hashable {
    /// Stored todos, deleted ones included, newest first (by `createdAt`, then creation order).
    case read(Result<[Todo], AppError>)
    case write(Result<SavedTodo, AppError>)
}

/// Durable storage of todos and of the broadcast journal.
///
/// `execute` applies a batch in order: each read sees the writes before it, each write applies
/// its change to the stored todo as the writes before it left it and takes the next seq. Every
/// write of the batch commits, with the journal entries of the broadcasts they cause, before
/// `execute` returns; a failed commit applies none of them (each answers `unavailable`, and the
/// batch's reads answer from what is stored).
public protocol TodoStore: Sendable {
    func execute(_ batch: [ModelRequest]) async -> [ModelAnswer]
}

extension TodoStore {
    /// One read on its own.
    public func readTodos(id: UUID?) async throws(AppError) -> [Todo] {
        let answers = await execute([.read(ReadTodos(id: id, purpose: id == nil ? .list : .detail))])
        guard case .read(let result) = answers.first else { throw AppError.unavailable }
        return try result.get()
    }

    /// One write on its own.
    public func write(_ write: TodoWrite) async -> Result<SavedTodo, AppError> {
        let answers = await execute([.write(write)])
        guard case .write(let result) = answers.first else { return .failure(.unavailable) }
        return result
    }
}
