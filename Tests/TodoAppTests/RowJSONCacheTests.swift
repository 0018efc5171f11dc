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

    @Test func aFailedListIsItsErrorAsBefore() {
        let error = AppError(code: .unavailable, message: "The store is unavailable.")
        let event = Event.responseTodoViewModels(.failure(error))
        #expect(TodoWireCodec(rowCache: RowJSONCache(capacity: 10)).encodeBody(event) == plain.encodeBody(event))
    }
}
