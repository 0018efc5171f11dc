import EventStream
import Foundation
import Testing

@testable import TodoApp

/// A list answer written through the row cache is byte for byte the one written without it,
/// whatever the cache holds.
@Suite struct RowJSONCacheTests {
    let plain = TodoWireCodec()

    func todos() -> [Todo] {
        [
            Todo(createdAt: t0, title: "Buy milk", subtitle: String(repeating: "s", count: 400), priority: .high),
            Todo(
                createdAt: t1,
                title: "quote \" backslash \\ tab \t",
                subtitle: "café ☕ \u{1}",
                completedAt: t1,
                version: 3
            ),
            Todo(createdAt: t0, title: "gone", deleted: true, version: 7),
        ]
    }

    func list(_ codec: TodoWireCodec, _ todos: [Todo]) -> EncodedBody {
        codec.encodeBody(.responseTodoViewModels(.success(todos.map(TodoViewModel.init))))
    }

    @Test func aCachedListIsTheListWrittenAnewAndAChangedTodoIsWrittenAgain() {
        let cache = RowJSONCache(capacity: 100)
        let cached = TodoWireCodec(rowCache: cache)
        var todos = todos()
        #expect(list(cached, todos) == list(plain, todos), "first written, then kept")
        #expect(cache.count == 3)
        #expect(list(cached, todos) == list(plain, todos), "from the cache")
        // The same todo, changed: its row is written again, not taken from the cache.
        todos[0].title = "Buy oat milk"
        todos[0].version += 1
        todos[2].deleted = false
        #expect(list(cached, todos) == list(plain, todos))
        #expect(list(cached, Array(todos.reversed())) == list(plain, Array(todos.reversed())))
        #expect(list(cached, []) == list(plain, []))
        #expect(cache.count == 3)
    }

    /// More todos than rows: the rows kept are those of the first todos written, and a list
    /// answer takes them from the cache every time (starting over when full would keep none by
    /// the time the next list reached them).
    @Test func pastItsCapacityTheRowsKeptStayAndChangeInPlace() {
        let cache = RowJSONCache(capacity: 2)
        let cached = TodoWireCodec(rowCache: cache)
        var todos = todos()
        for _ in 0..<3 {
            #expect(list(cached, todos) == list(plain, todos))
            #expect(cache.count == 2)
        }
        #expect(cache.cachedIDs == Set(todos[0..<2].map(\.id)))
        // A kept todo that changes has its row replaced; the one left out stays out.
        todos[1].title = "changed"
        todos[1].version += 1
        #expect(list(cached, todos) == list(plain, todos))
        #expect(cache.cachedIDs == Set(todos[0..<2].map(\.id)))
        #expect(list(cached, Array(todos.reversed())) == list(plain, Array(todos.reversed())))
        #expect(cache.cachedIDs == Set(todos[0..<2].map(\.id)))
    }

    /// Rows of todos deleted since (lists leave them out) give way to listed todos that found
    /// no room.
    @Test func rowsOfTodosNoLongerListedGiveWayWhenFull() {
        let cache = RowJSONCache(capacity: 2)
        let cached = TodoWireCodec(rowCache: cache)
        let todos = todos()
        let (a, b, c) = (todos[0], todos[1], Todo(createdAt: t0, title: "third"))
        #expect(list(cached, [a, b]) == list(plain, [a, b]))
        #expect(cache.cachedIDs == [a.id, b.id])
        // `a` deleted: a list of b and c finds no room for c, and a's row goes.
        #expect(list(cached, [b, c]) == list(plain, [b, c]))
        #expect(cache.cachedIDs == [b.id])
        #expect(list(cached, [b, c]) == list(plain, [b, c]))
        #expect(cache.cachedIDs == [b.id, c.id])
        // Every row used: nothing is dropped, however many todos are left out.
        let more = (0..<5).map { Todo(createdAt: t1, title: "more \($0)") }
        #expect(list(cached, [b, c] + more) == list(plain, [b, c] + more))
        #expect(cache.cachedIDs == [b.id, c.id])
    }

    /// A few rows of deleted todos (fewer than an eighth) stay: dropping them costs a pass over
    /// every row, and a deleted todo is often restored soon.
    @Test func aFewRowsOfDeletedTodosStay() {
        let cache = RowJSONCache(capacity: 16)
        let cached = TodoWireCodec(rowCache: cache)
        let todos = (0..<17).map { Todo(createdAt: t0, title: "todo \($0)") }
        #expect(list(cached, Array(todos[0..<16])) == list(plain, Array(todos[0..<16])))
        // One deleted (1 of 16 rows unused): kept, and the 17th todo still finds no room.
        let listed = Array(todos[1..<17])
        #expect(list(cached, listed) == list(plain, listed))
        #expect(cache.cachedIDs == Set(todos[0..<16].map(\.id)))
        // Three deleted (3 of 16): dropped, and the next list takes the one left out.
        let fewer = Array(todos[3..<17])
        #expect(list(cached, fewer) == list(plain, fewer))
        #expect(cache.cachedIDs == Set(todos[3..<16].map(\.id)))
        #expect(list(cached, fewer) == list(plain, fewer))
        #expect(cache.cachedIDs == Set(fewer.map(\.id)))
    }

    @Test func theCacheIsBounded() {
        let small = RowJSONCache(capacity: 2)
        let none = RowJSONCache(capacity: 0)
        let todos = todos()
        for _ in 0..<3 {
            #expect(list(TodoWireCodec(rowCache: small), todos) == list(plain, todos))
            #expect(list(TodoWireCodec(rowCache: none), todos) == list(plain, todos))
            #expect(small.count <= 2)
            #expect(none.count == 0)
        }
    }

    /// A list's body is the JSON array of its rows, byte for byte as a writer writes the view
    /// models one after the other: without the cache, and with it (rows written, then kept).
    @Test func aListIsTheArrayOfItsRowsAsAWriterWritesThem() {
        let viewModels = todos().filter { !$0.deleted }.map(TodoViewModel.init)
        var writer = JSONWriter()
        writer.beginArray()
        for viewModel in viewModels { writer.write(viewModel) }
        writer.endArray()
        let cached = TodoWireCodec(rowCache: RowJSONCache(capacity: 100))
        for codec in [plain, cached, cached] {
            let body = codec.encodeBody(.responseTodoViewModels(.success(viewModels)))
            #expect(body.payloadBytes == writer.bytes)
            #expect(body.joined == .payload(writer.bytes))
        }
        #expect(plain.encodeBody(.responseTodoViewModels(.success([]))).payloadBytes == Array("[]".utf8))
    }

    /// A list is compared with the last one place by place. The rows of todos unchanged since
    /// are that list's own (the same bytes, shared); a todo changed in its place, one created
    /// since (every later place shifts) and one deleted since are each answered as written anew.
    @Test func aListTakesTheRowsOfUnchangedTodosFromTheLastListByTheirPlaces() {
        let cache = RowJSONCache(capacity: 100)
        let todos = (0..<8).map {
            Todo(createdAt: t0, title: "todo \($0)", subtitle: String(repeating: "x", count: $0))
        }
        func rows(_ todos: [Todo]) -> [[UInt8]] { cache.rows(for: todos.map(TodoViewModel.init)) }
        func storage(_ rows: [[UInt8]]) -> [UnsafeRawPointer?] {
            rows.map { $0.withUnsafeBytes { $0.baseAddress } }
        }
        let first = rows(todos)
        #expect(first == todos.map(TodoWireCodec.rowJSON(for:)))
        #expect(storage(rows(todos)) == storage(first), "unchanged: the last list's rows")
        #expect(cache.lastListCount == 8)

        var changed = todos
        changed[3].title = "todo 3, renamed"
        changed[3].version += 1
        let new = Todo(createdAt: t1, title: "created since")
        // Created since (first in the list), changed in place, and one deleted (5).
        let listed = [new] + changed[0..<5] + changed[6...]
        let second = rows(listed)
        #expect(second == listed.map(TodoWireCodec.rowJSON(for:)))
        let kept = storage(first)
        #expect(Array(storage(second)[1..<4]) == Array(kept[0..<3]))
        #expect(storage(second)[4] != kept[3], "changed: written again")
        #expect(Array(storage(second)[5...]) == [kept[4]] + kept[6...], "after the one deleted")

        // Every place different: each row still its own todo's.
        let reversed = Array(listed.reversed())
        #expect(rows(reversed) == reversed.map(TodoWireCodec.rowJSON(for:)))
        #expect(rows([]) == [])
        #expect(rows(listed) == listed.map(TodoWireCodec.rowJSON(for:)))
    }

    /// The last list is kept within the cache's bound, every row of it kept by id: a longer
    /// one leaves none, and so does one that left a todo out (the next list looks each todo up
    /// and keeps the one left out); with no capacity none is kept at all.
    @Test func theLastListIsKeptOnlyWithinTheCapacity() {
        let todos = (0..<3).map { Todo(createdAt: t0, title: "todo \($0)") }
        func rows(_ cache: RowJSONCache, _ todos: some Sequence<Todo>) -> [[UInt8]] {
            cache.rows(for: todos.map(TodoViewModel.init))
        }
        let small = RowJSONCache(capacity: 2)
        #expect(rows(small, todos.prefix(2)).count == 2)
        #expect(small.lastListCount == 2)
        #expect(rows(small, todos) == todos.map(TodoWireCodec.rowJSON(for:)))
        #expect(small.lastListCount == 0)
        // todos[0] deleted: its row is dropped and todos[2] left out, then kept.
        let (a, b, c) = (todos[0], todos[1], todos[2])
        #expect(rows(small, [a, b]).count == 2)
        #expect(rows(small, [b, c]) == [b, c].map(TodoWireCodec.rowJSON(for:)))
        #expect(small.cachedIDs == [b.id])
        #expect(small.lastListCount == 0)
        #expect(rows(small, [b, c]) == [b, c].map(TodoWireCodec.rowJSON(for:)))
        #expect(small.cachedIDs == [b.id, c.id])
        #expect(small.lastListCount == 2)
        let none = RowJSONCache(capacity: 0)
        #expect(rows(none, todos) == todos.map(TodoWireCodec.rowJSON(for:)))
        #expect(none.lastListCount == 0)
        #expect(none.count == 0)
    }

    /// The comparison by place agrees with `Todo`'s equality for a change of any one field, the
    /// version kept (a row is reused only for an equal todo, not merely one of the same
    /// version). It lists the fields itself: a field added to `Todo` fails the count here.
    @Test func aTodoComparedByPlaceIsComparedFieldByField() {
        let base = Todo(createdAt: t0, title: "title", subtitle: "subtitle", priority: .normal, version: 4)
        #expect(Mirror(reflecting: base).children.count == 8, "RowJSONCache.same compares each field of Todo")
        var variants: [Todo] = []
        for change in 0..<8 {
            var todo = base
            switch change {
            case 0: todo.id = UUID()
            case 1: todo.createdAt = t1
            case 2: todo.title = "title, changed"
            case 3: todo.subtitle = "subtitle, changed"
            case 4: todo.priority = .high
            case 5: todo.completedAt = t1
            case 6: todo.deleted = true
            default: todo.version = 5
            }
            variants.append(todo)
        }
        // The same text in storage of its own is still the same.
        var copied = base
        copied.title = String(decoding: Array(base.title.utf8), as: UTF8.self)
        let rows = ([base, copied] + variants).map(TodoViewModel.init)
        rows.withUnsafeBufferPointer { rows in
            for index in rows.indices {
                #expect(RowJSONCache.same(rows, 0, rows, index) == (rows[0].todo == rows[index].todo))
            }
            #expect(RowJSONCache.same(rows, 0, rows, 1))
            #expect((2..<rows.count).allSatisfy { !RowJSONCache.same(rows, 0, rows, $0) })
        }
    }

    /// Lists in any order of changes (todos created, deleted, edited, changed with their version
    /// kept, moved, listed again unchanged), at several capacities: every answer is the
    /// rows written anew, and the cache and its last list stay within the bound.
    @Test(arguments: [0, 3, 8, 100])
    func anyRunOfListsIsAnsweredAsIfWrittenAnew(capacity: Int) {
        // A linear congruential sequence: the same run every time, so a failure repeats.
        var state = UInt64(capacity) &+ 0x9E37_79B9
        func random(below bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(truncatingIfNeeded: state >> 33) % max(1, bound)
        }
        let cache = RowJSONCache(capacity: capacity)
        var todos = (0..<12).map { Todo(createdAt: t0, title: "todo \($0)") }
        var created = todos.count
        for step in 0..<400 {
            switch random(below: 6) {
            case 0:
                created += 1
                todos.insert(
                    Todo(createdAt: t1, title: "todo \(created)"),
                    at: random(below: todos.count + 1)
                )
            case 1 where !todos.isEmpty:
                todos.remove(at: random(below: todos.count))
            case 2 where !todos.isEmpty:
                let index = random(below: todos.count)
                todos[index].subtitle = "edited at \(step)"
                todos[index].version += 1
            case 3 where !todos.isEmpty:
                // The same version with other content: never answered with the old row.
                let index = random(below: todos.count)
                todos[index].completedAt = todos[index].completedAt == nil ? t1 : nil
            case 4 where step % 7 == 0:
                // Every place moves.
                todos.reverse()
                let cut = todos.count / 3
                todos = Array(todos[cut...]) + Array(todos[..<cut])
            default:
                break
            }
            let rows = cache.rows(for: todos.map(TodoViewModel.init))
            #expect(rows == todos.map(TodoWireCodec.rowJSON(for:)), "step \(step)")
            #expect(cache.count <= capacity)
            #expect(cache.lastListCount <= capacity)
        }
    }

    @Test func aFailedListIsItsErrorAsBefore() {
        let error = AppError(code: .unavailable, message: "The store is unavailable.")
        let event = Event.responseTodoViewModels(.failure(error))
        #expect(TodoWireCodec(rowCache: RowJSONCache(capacity: 10)).encodeBody(event) == plain.encodeBody(event))
    }
}
