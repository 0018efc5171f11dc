import EventStream
import Foundation

/// A reference to a stored todo, as a view sends it: only `todo.id` and, optionally,
/// `todo.version` are read from the TodoViewModel a client publishes.
public struct TodoReference: Sendable, Hashable {
    public let id: UUID
    public let version: Int?

    public init(id: UUID, version: Int? = nil) {
        self.id = id
        self.version = version
    }
}

/// A TodoDetailViewModel as a client publishes it: the todo's reference and the editable
/// fields.
public struct TodoDetailInput: Sendable, Hashable {
    public let todo: TodoReference
    public let edit: TodoEdit

    public init(todo: TodoReference, edit: TodoEdit) {
        self.todo = todo
        self.edit = edit
    }
}

/// Every event of the app: the seed's 14 cases.
///
/// Indirect: each payload lives in a box of its own, so a copy of an event (the bus hands each
/// one to its deliveries, its servers and the model layer; the hub reads each delivery) is one
/// reference count, not one per string of a todo and its view model.
public indirect enum Event: StreamEvent, Hashable {
    // View layer: requests views publish.
    case requestTodoViewModels
    case requestToggleCompleteTodoViewModel(TodoReference)
    case requestDeleteTodoViewModel(TodoReference)
    case requestNewTodoDetailViewModel
    case requestTodoDetailViewModel(TodoReference)
    case requestUpdateDetailViewModel(TodoDetailInput)
    // View layer: responses views receive.
    case responseTodoViewModels(Result<[TodoViewModel], AppError>)
    case responseTodoViewModel(Result<TodoViewModel, AppError>)
    case responseTodoDetailViewModel(Result<TodoDetailViewModel, AppError>)
    case responseUpdateDetailViewModel(Result<TodoDetailViewModel, AppError>)
    // Model layer: internal to the daemon.
    case requestReadTodos(ReadTodos)
    case responseTodos(ReadTodos, Result<[Todo], AppError>)
    case requestWriteTodo(TodoWrite)
    case responseTodo(TodoWrite, Result<SavedTodo, AppError>)

    public var name: String { kind.rawValue }

    /// The code of a view-layer response that carries an error.
    public var failureCode: String? {
        switch self {
        case .responseTodoViewModels(.failure(let error)): return error.code.rawValue
        case .responseTodoViewModel(.failure(let error)): return error.code.rawValue
        case .responseTodoDetailViewModel(.failure(let error)): return error.code.rawValue
        case .responseUpdateDetailViewModel(.failure(let error)): return error.code.rawValue
        default: return nil
        }
    }

    /// A view-layer response whose write storage may or may not have saved.
    public var outcomeUnknown: Bool {
        switch self {
        case .responseTodoViewModel(.failure(let error)), .responseUpdateDetailViewModel(.failure(let error)):
            return error == .unavailableInDoubt
        default: return false
        }
    }

    public var kind: Kind {
        switch self {
        case .requestTodoViewModels: return .requestTodoViewModels
        case .requestToggleCompleteTodoViewModel: return .requestToggleCompleteTodoViewModel
        case .requestDeleteTodoViewModel: return .requestDeleteTodoViewModel
        case .requestNewTodoDetailViewModel: return .requestNewTodoDetailViewModel
        case .requestTodoDetailViewModel: return .requestTodoDetailViewModel
        case .requestUpdateDetailViewModel: return .requestUpdateDetailViewModel
        case .responseTodoViewModels: return .responseTodoViewModels
        case .responseTodoViewModel: return .responseTodoViewModel
        case .responseTodoDetailViewModel: return .responseTodoDetailViewModel
        case .responseUpdateDetailViewModel: return .responseUpdateDetailViewModel
        case .requestReadTodos: return .requestReadTodos
        case .responseTodos: return .responseTodos
        case .requestWriteTodo: return .requestWriteTodo
        case .responseTodo: return .responseTodo
        }
    }

    /// The event types by their wire names.
    public enum Kind: String, Sendable, CaseIterable {
        case requestTodoViewModels = "RequestTodoViewModels"
        case requestToggleCompleteTodoViewModel = "RequestToggleCompleteTodoViewModel"
        case requestDeleteTodoViewModel = "RequestDeleteTodoViewModel"
        case requestNewTodoDetailViewModel = "RequestNewTodoDetailViewModel"
        case requestTodoDetailViewModel = "RequestTodoDetailViewModel"
        case requestUpdateDetailViewModel = "RequestUpdateDetailViewModel"
        case responseTodoViewModels = "ResponseTodoViewModels"
        case responseTodoViewModel = "ResponseTodoViewModel"
        case responseTodoDetailViewModel = "ResponseTodoDetailViewModel"
        case responseUpdateDetailViewModel = "ResponseUpdateDetailViewModel"
        case requestReadTodos = "RequestReadTodos"
        case responseTodos = "ResponseTodos"
        case requestWriteTodo = "RequestWriteTodo"
        case responseTodo = "ResponseTodo"

        public var descriptor: EventDescriptor {
            let name = rawValue
            let layer: EventLayer
            switch self {
            case .requestReadTodos, .responseTodos, .requestWriteTodo, .responseTodo: layer = .model
            default: layer = .view
            }
            return EventDescriptor(
                name: name,
                layer: layer,
                direction: name.hasPrefix("Request") ? .request : .response
            )
        }
    }

    /// The catalog of all 14 event types.
    public static let catalog = EventCatalog(Kind.allCases.map(\.descriptor))
}
