import EventStream
import Foundation
import Synchronization

/// The JSON of each todo's list row (its `TodoViewModel`) as last written, reused while the
/// todo is unchanged.
///
/// A list answer (`ResponseTodoViewModels`) writes every todo's row, and a frontend asks for
/// the list far more often than it changes: without this, each list answer encoded every row
/// again, text and all. A row is a function of its todo alone, so a row is reused only for a
/// todo equal to the one it was written for (every field, the version included): the bytes
/// are those the writer would make. Bounded: once `capacity` todos have rows here, a todo
/// without one is written without keeping it, while the todos kept have their rows replaced as
/// they change; a list that finds no room for a todo while an eighth of the rows kept are ones
/// it did not use (those of todos deleted since) drops those. (Starting over when full, as the
/// cache first did, kept nothing useful once there were more todos than rows: each list answer,
/// which goes through every todo in the same order, dropped the rows before reaching the todos
/// they were for.)
public final class RowJSONCache: Sendable {
    /// Rows kept at most; 0 keeps none (every row is written anew).
    public let capacity: Int
    private let rows: Mutex<[UUID: Row]>

    struct Row {
        let todo: Todo
        let json: [UInt8]
    }

    public init(capacity: Int) {
        self.capacity = max(0, capacity)
        self.rows = Mutex([:])
    }

    /// Rows kept now.
    public var count: Int { rows.withLock { $0.count } }

    /// The todos whose rows are kept now.
    var cachedIDs: Set<UUID> { rows.withLock { Set($0.keys) } }

    /// The rows of `viewModels`, in order: each from the cache when its todo is unchanged.
    func rows(for viewModels: [TodoViewModel]) -> [[UInt8]] {
        var list: [[UInt8]] = []
        list.reserveCapacity(viewModels.count)
        rows.withLock { rows in
            // Rows this list used (reused, replaced for a changed todo, or added), and whether
            // a todo of it found no room.
            var used = 0
            var leftOut = false
            for viewModel in viewModels {
                let todo = viewModel.todo
                if let row = rows[todo.id], row.todo == todo {
                    list.append(row.json)
                    used += 1
                    continue
                }
                let json = TodoWireCodec.rowJSON(for: todo)
                list.append(json)
                guard capacity > 0 else { continue }
                if rows.count >= capacity, rows[todo.id] == nil {
                    leftOut = true
                    continue
                }
                rows[todo.id] = Row(todo: todo, json: json)
                used += 1
            }
            // A list holds every todo not deleted: rows it did not use are deleted todos',
            // taking room a listed todo lacks. Once they are an eighth of the rows, drop them
            // (one pass over the rows; a few, as while a todo is deleted and restored, are
            // left until then); the next list keeps the todos left out.
            if leftOut, rows.count - used > rows.count / 8 {
                let listed = Set(viewModels.lazy.map(\.todo.id))
                rows = rows.filter { listed.contains($0.key) }
            }
        }
        return list
    }
}
