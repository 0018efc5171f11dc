import Foundation

/// Durable storage of todos and of the broadcast journal.
///
/// A write applies its change to the stored todo inside one transaction that also appends the
/// broadcast it causes to the journal with the next seq, and returns only once that
/// transaction is committed.
public protocol TodoStore: Sendable {
    /// Stored todos, deleted ones included, newest first (by `createdAt`, then creation order).
    func readTodos(id: UUID?) async throws(AppError) -> [Todo]
    func write(_ write: TodoWrite) async -> Result<SavedTodo, AppError>
}
