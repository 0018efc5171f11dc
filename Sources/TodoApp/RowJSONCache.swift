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
    private let state: Mutex<State>

    struct Row {
        let todo: Todo
        let json: [UInt8]
    }

    struct State {
        var rows: [UUID: Row] = [:]
        /// The last list answered (when every row of it is in `rows`) and its rows, in order:
        /// the next list takes a row from here by its place, with no look-up by id.
        var lastList: [TodoViewModel] = []
        var lastRows: [[UInt8]] = []
    }

    public init(capacity: Int) {
        self.capacity = max(0, capacity)
        self.state = Mutex(State())
    }

    /// Rows kept now (the last list's rows are among them).
    public var count: Int { state.withLock { $0.rows.count } }

    /// The todos whose rows are kept now.
    var cachedIDs: Set<UUID> { state.withLock { Set($0.rows.keys) } }

    /// Rows of the last list kept for the next one.
    var lastListCount: Int { state.withLock { $0.lastRows.count } }

    /// The rows of `viewModels`, in order: each from the cache when its todo is unchanged.
    ///
    /// A list answer holds every todo in the same order (newest first), and between two lists
    /// a few todos change, appear or go. So each todo is first compared with the one at its
    /// place in the last list (a todo created since shifts the places after it; one deleted
    /// since is stepped over): equal, its row is that list's. Only a todo found there changed,
    /// or new, is looked up by id. Every row is still the one written for a todo equal to the
    /// listed one (every field, the version included).
    func rows(for viewModels: [TodoViewModel]) -> [[UInt8]] {
        state.withLock { state in
            let lastList = state.lastList
            let lastRows = state.lastRows
            // Compared in place through the arrays' buffers: a todo copied out of its array
            // would retain its text once per row.
            let unchanged = viewModels.withUnsafeBufferPointer { listed in
                lastList.withUnsafeBufferPointer { last in
                    listed.count == last.count && listed.indices.allSatisfy { Self.same(listed, $0, last, $0) }
                }
            }
            // Every todo in its place in the last list: that list's rows, as they are.
            if unchanged { return lastRows }
            var list: [[UInt8]] = []
            list.reserveCapacity(viewModels.count)
            // Rows this list used (reused, replaced for a changed todo, or added), and whether
            // a todo of it found no room.
            var used = 0
            var leftOut = false
            viewModels.withUnsafeBufferPointer { listed in
                lastList.withUnsafeBufferPointer { last in
                    // The place in the last list that the next todo is compared with.
                    var place = 0
                    for index in listed.indices {
                        if place < last.count, Self.same(last, place, listed, index) {
                            list.append(lastRows[place])
                            place += 1
                            used += 1
                            continue
                        }
                        if place + 1 < last.count, Self.same(last, place + 1, listed, index) {
                            // The todo at `place` is gone since.
                            list.append(lastRows[place + 1])
                            place += 2
                            used += 1
                            continue
                        }
                        // Changed in its place: the next todo is compared with the one after
                        // it. (New since: the next todo with the one at this place.)
                        if place < last.count, last[place].todo.id == listed[index].todo.id { place += 1 }
                        let todo = listed[index].todo
                        if let row = state.rows[todo.id], row.todo == todo {
                            list.append(row.json)
                            used += 1
                            continue
                        }
                        let json = TodoWireCodec.rowJSON(for: todo)
                        list.append(json)
                        guard capacity > 0 else { continue }
                        if state.rows.count >= capacity, state.rows[todo.id] == nil {
                            leftOut = true
                            continue
                        }
                        state.rows[todo.id] = Row(todo: todo, json: json)
                        used += 1
                    }
                }
            }
            // A list holds every todo not deleted: rows it did not use are deleted todos',
            // taking room a listed todo lacks. Once they are an eighth of the rows, drop them
            // (one pass over the rows; a few, as while a todo is deleted and restored, are
            // left until then); the next list keeps the todos left out.
            if leftOut, state.rows.count - used > state.rows.count / 8 {
                let listed = Set(viewModels.lazy.map(\.todo.id))
                state.rows = state.rows.filter { listed.contains($0.key) }
            }
            // Kept for the next list when each of its rows is also kept by id (so the last
            // list holds no row the bound does not count, and `used` counts its rows right):
            // not a list longer than the capacity, nor one that left a todo out (the next
            // list then looks each todo up, and takes the ones left out once there is room).
            if viewModels.count <= capacity, !leftOut {
                (state.lastList, state.lastRows) = (viewModels, list)
            } else {
                (state.lastList, state.lastRows) = ([], [])
            }
            return list
        }
    }

    /// Whether `lhs[left]` and `rhs[right]` (both in bounds) are of equal todos: field by
    /// field, as `Todo`'s `==` compares them (a test holds the two to the same answer for a
    /// change of each field, and counts the fields). Not inlined, and not `==` itself: this
    /// way the todos are compared where they are, whereas inlined into the loops above, or
    /// calling `==`, the compiler copied both out first, retaining and releasing their text
    /// for every row of every list.
    @inline(never)
    static func same(
        _ lhs: UnsafeBufferPointer<TodoViewModel>,
        _ left: Int,
        _ rhs: UnsafeBufferPointer<TodoViewModel>,
        _ right: Int
    ) -> Bool {
        let (lhs, rhs) = (lhs.baseAddress.unsafelyUnwrapped + left, rhs.baseAddress.unsafelyUnwrapped + right)
        return lhs.pointee.todo.id == rhs.pointee.todo.id && lhs.pointee.todo.version == rhs.pointee.todo.version
            && lhs.pointee.todo.deleted == rhs.pointee.todo.deleted
            && lhs.pointee.todo.createdAt == rhs.pointee.todo.createdAt
            && lhs.pointee.todo.completedAt == rhs.pointee.todo.completedAt
            && lhs.pointee.todo.priority == rhs.pointee.todo.priority
            && lhs.pointee.todo.title == rhs.pointee.todo.title
            && lhs.pointee.todo.subtitle == rhs.pointee.todo.subtitle
    }
}
