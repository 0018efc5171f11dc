import Foundation
import TodoApp

/// A list view's state fed by `TodostreamClient.events`: the list reply replaces it, each
/// `ResponseTodoViewModel` updates one row (never with an older version than it has).
public struct TodoList: Sendable, Hashable {
    public private(set) var todos: [UUID: TodoViewModel] = [:]

    public init() {}

    /// The rows a list shows: not deleted, newest first.
    public var rows: [TodoViewModel] {
        todos.values.filter { !$0.deleted }.sorted {
            ($0.todo.createdAt, $0.todo.id.uuidString) > ($1.todo.createdAt, $1.todo.id.uuidString)
        }
    }

    public mutating func replace(with viewModels: [TodoViewModel]) {
        todos = Dictionary(viewModels.map { ($0.todo.id, $0) }, uniquingKeysWith: { $1 })
    }

    public mutating func update(_ viewModel: TodoViewModel) {
        if let known = todos[viewModel.todo.id], known.todo.version > viewModel.todo.version { return }
        todos[viewModel.todo.id] = viewModel
    }

    /// Applies an app event; returns true when the list changed.
    @discardableResult
    public mutating func apply(_ event: Event) -> Bool {
        let before = todos
        switch event {
        case .responseTodoViewModels(.success(let viewModels)): replace(with: viewModels)
        case .responseTodoViewModel(.success(let viewModel)): update(viewModel)
        default: break
        }
        return todos != before
    }
}
