/// What the detail editor shows: the seed's TodoDetailViewModel.
public struct TodoDetailViewModel: Sendable, Hashable {
    public let todo: Todo
    public var title: String
    public var subtitle: String
    public var priority: TodoPriority
    public var completed: Bool
    public var deleted: Bool

    public init(todo: Todo) {
        self.todo = todo
        self.title = todo.title
        self.subtitle = todo.subtitle
        self.priority = todo.priority
        self.completed = todo.complete
        self.deleted = todo.deleted
    }

    public var completedString: String { completed ? "Complete" : "Incomplete" }
    public var priorityString: String { priority.displayString }
    public var deletedString: String { deleted ? "Restore" : "Delete" }
}
