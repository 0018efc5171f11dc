import Foundation
import TodoApp

/// The app's requests as typed calls: each returns what the answer carries, or throws its
/// `AppError` (`not_found`, `validation_failed`, `conflict`, `unavailable`).
extension TodostreamClient {
    /// The list (`RequestTodoViewModels`): not deleted, newest first.
    public func list() async throws -> [TodoViewModel] {
        guard case .responseTodoViewModels(let result) = try await request(.requestTodoViewModels) else {
            throw Self.unexpectedAnswer
        }
        return try result.get()
    }

    /// Toggles completion of the stored todo `id`; returns it as the write left it.
    public func toggle(_ id: UUID) async throws -> TodoViewModel {
        try await viewModel(request(.requestToggleCompleteTodoViewModel(TodoReference(id: id))))
    }

    /// Deletes (softly) the stored todo `id`; returns it as the write left it.
    public func delete(_ id: UUID) async throws -> TodoViewModel {
        try await viewModel(request(.requestDeleteTodoViewModel(TodoReference(id: id))))
    }

    /// Saves `edit` over the stored todo `id` (fields left nil keep their value); `not_found`
    /// when no todo `id` is stored. (The daemon takes a save of an id it does not know as a new
    /// todo's first save, so the todo is read first: an edit never creates one.)
    public func edit(_ id: UUID, _ edit: TodoEdit) async throws -> TodoDetailViewModel {
        _ = try detail(await request(.requestTodoDetailViewModel(TodoReference(id: id))))
        return try await detail(
            request(.requestUpdateDetailViewModel(TodoDetailInput(todo: TodoReference(id: id), edit: edit)))
        )
    }

    /// Creates a todo: a fresh detail (`RequestNewTodoDetailViewModel`), saved with `title`.
    public func create(
        title: String,
        subtitle: String? = nil,
        priority: TodoPriority? = nil
    ) async throws -> TodoDetailViewModel {
        let fresh = try detail(await request(.requestNewTodoDetailViewModel))
        let input = TodoDetailInput(
            todo: TodoReference(id: fresh.todo.id, version: 0),
            edit: TodoEdit(title: title, subtitle: subtitle, priority: priority)
        )
        return try detail(await request(.requestUpdateDetailViewModel(input)))
    }

    private func viewModel(_ event: Event) throws -> TodoViewModel {
        guard case .responseTodoViewModel(let result) = event else { throw Self.unexpectedAnswer }
        return try result.get()
    }

    private func detail(_ event: Event) throws -> TodoDetailViewModel {
        switch event {
        case .responseTodoDetailViewModel(let result), .responseUpdateDetailViewModel(let result):
            return try result.get()
        default:
            throw Self.unexpectedAnswer
        }
    }

    private static var unexpectedAnswer: ClientError {
        ClientError(.protocolViolation, "The daemon answered with an unexpected event type.")
    }
}
