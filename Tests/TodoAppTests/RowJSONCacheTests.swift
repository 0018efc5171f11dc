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

    @Test func aFailedListIsItsErrorAsBefore() {
        let error = AppError(code: .unavailable, message: "The store is unavailable.")
        let event = Event.responseTodoViewModels(.failure(error))
        #expect(TodoWireCodec(rowCache: RowJSONCache(capacity: 10)).encodeBody(event) == plain.encodeBody(event))
    }
}
