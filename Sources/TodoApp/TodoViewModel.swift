/// What a list row shows: the seed's TodoViewModel.
public struct TodoViewModel: Sendable, Hashable {
    public let todo: Todo

    public init(todo: Todo) { self.todo = todo }

    public var title: String { todo.title }
    public var subtitle: String { todo.priority.prioritySubtitle }
    public var complete: Bool { todo.complete }
    public var deleted: Bool { todo.deleted }
    public var completeActionTitle: String { complete ? "Uncomplete" : "Complete" }
}
