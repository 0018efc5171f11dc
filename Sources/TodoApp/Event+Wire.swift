import EventStream
import Foundation

/// The wire (JSON) form of the app's events: decoding what views publish, encoding what the
/// daemon sends.
public struct TodoWireCodec: EventCodec {
    public typealias Event = TodoApp.Event

    /// Where list answers take each unchanged row's JSON from (nil: every row is written).
    public let rowCache: RowJSONCache?

    public init(rowCache: RowJSONCache? = nil) {
        self.rowCache = rowCache
    }

    public var catalog: EventCatalog { Event.catalog }

    public func decodeRequest(named name: String, frame: [UInt8]) throws(PayloadError) -> Event {
        try decodeRequest(named: name, frame: frame, parsed: nil)
    }

    /// Reads the payload from `parsed` when it has the plain shape of a valid request; for
    /// anything else (a wrong type, a missing field) decodes `frame` with JSONDecoder, whose
    /// errors name the field. Both ways end in the same checks.
    public func decodeRequest(named name: String, frame: [UInt8], parsed: JSONObject?) throws(PayloadError) -> Event {
        guard let kind = Event.Kind(rawValue: name) else {
            throw PayloadError(message: "Unknown event type \(name).")
        }
        switch kind {
        case .requestTodoViewModels: return .requestTodoViewModels
        case .requestNewTodoDetailViewModel: return .requestNewTodoDetailViewModel
        case .requestToggleCompleteTodoViewModel:
            return .requestToggleCompleteTodoViewModel(try reference(in: frame, parsed: parsed))
        case .requestDeleteTodoViewModel:
            return .requestDeleteTodoViewModel(try reference(in: frame, parsed: parsed))
        case .requestTodoDetailViewModel:
            return .requestTodoDetailViewModel(try reference(in: frame, parsed: parsed))
        case .requestUpdateDetailViewModel:
            let payload = try decode(DetailPayload.self, from: frame, parsed: parsed)
            return .requestUpdateDetailViewModel(try payload.input())
        default:
            throw PayloadError(message: "\(name) cannot be published.")
        }
    }

    public func encodeBody(_ event: Event) -> EncodedBody {
        var writer = JSONWriter()
        switch event {
        case .requestTodoViewModels, .requestNewTodoDetailViewModel:
            writer.beginObject()
            writer.endObject()
        case .requestToggleCompleteTodoViewModel(let reference), .requestDeleteTodoViewModel(let reference),
            .requestTodoDetailViewModel(let reference):
            writer.beginObject()
            writer.key("todo")
            writer.write(reference)
            writer.endObject()
        case .requestUpdateDetailViewModel(let input):
            writer.beginObject()
            writer.key("todo")
            writer.write(input.todo)
            writer.write(input.edit)
            writer.endObject()
        case .responseTodoViewModels(.success(let viewModels)):
            // Each row on its own: the frame's buffer takes them one by one (kept rows are
            // shared with the cache, not copied).
            guard let rowCache else { return .array(viewModels.map { Self.rowJSON(for: $0.todo) }) }
            return .array(rowCache.rows(for: viewModels))
        case .responseTodoViewModels(.failure(let error)):
            writer.write(error)
            return .error(writer.bytes)
        case .responseTodoViewModel(let result):
            return body(result, capacity: { Self.capacity(forRow: $0.todo) }, { $0.write($1) })
        case .responseTodoDetailViewModel(let result), .responseUpdateDetailViewModel(let result):
            return body(result, capacity: { Self.capacity(for: $0.todo) }, { $0.write($1) })
        case .requestReadTodos(let read):
            writer.write(read)
        case .responseTodos(_, let result):
            return body(result) { writer, todos in
                writer.beginArray()
                for todo in todos { writer.write(todo) }
                writer.endArray()
            }
        case .requestWriteTodo(let write):
            writer.write(write)
        case .responseTodo(_, let result):
            return body(result) { writer, saved in writer.write(saved.todo) }
        }
        return .payload(writer.bytes)
    }

    /// The payload of a successful `result` (in a writer of `capacity` bytes for it, when
    /// given), or its error.
    private func body<T>(
        _ result: Result<T, AppError>,
        capacity: ((T) -> Int)? = nil,
        _ encode: (inout JSONWriter, T) -> Void
    ) -> EncodedBody {
        switch result {
        case .success(let value):
            var writer = capacity.map { JSONWriter(capacity: $0(value)) } ?? JSONWriter()
            encode(&writer, value)
            return .payload(writer.bytes)
        case .failure(let error):
            var writer = JSONWriter()
            writer.write(error)
            return .error(writer.bytes)
        }
    }

    /// Bytes enough, unless its text needs escapes, for a view model of `todo` (a detail view
    /// model writes the title and subtitle twice): the writer's buffer is allocated once.
    static func capacity(for todo: Todo) -> Int {
        512 + 2 * (todo.title.utf8.count + todo.subtitle.utf8.count)
    }

    /// The same for a list row's view model (`TodoViewModel`), which writes the title twice and
    /// the subtitle once: sized for what it holds, a row with a few hundred bytes of text stays
    /// within the sizes the allocator keeps per thread (a buffer over 1,032 bytes takes its
    /// slower path, once per broadcast).
    static func capacity(forRow todo: Todo) -> Int {
        512 + 2 * todo.title.utf8.count + todo.subtitle.utf8.count
    }

    /// The journal record of the broadcast a committed todo causes. Byte for byte what
    /// `encodeBody` writes for its `ResponseTodoViewModel`.
    public static func broadcastRecord(for todo: Todo) -> (type: String, payload: [UInt8]) {
        (Event.Kind.responseTodoViewModel.rawValue, rowJSON(for: todo))
    }

    /// A todo's list row (its `TodoViewModel`) as JSON: a journaled broadcast's payload, and
    /// each element of a list answer.
    static func rowJSON(for todo: Todo) -> [UInt8] {
        var writer = JSONWriter(capacity: capacity(forRow: todo))
        writer.write(TodoViewModel(todo: todo))
        return writer.bytes
    }

    /// The payload of the detail view model of `todo` (byte for byte what `encodeBody` writes
    /// for a `ResponseUpdateDetailViewModel` of it), made from `row`, the todo's list row
    /// (`rowJSON(for: todo)`: a saved todo's broadcast payload). Both begin with the todo and
    /// its title, so that part, the todo's text included, is copied rather than written again
    /// with every byte looked at for escapes. Nil when `row` does not end as the list row of
    /// `todo` does.
    public static func detailPayload(for todo: Todo, row: [UInt8]) -> [UInt8]? {
        var rowEnd = JSONWriter(capacity: 128)
        rowEnd.beginObject()
        rowEnd.writeAfterTitle(TodoViewModel(todo: todo))
        rowEnd.endObject()
        // In the row, the same fields follow the title after a comma, not an opening brace.
        let end = rowEnd.bytes
        let cut = row.count - end.count
        guard cut > 0, row[cut] == UInt8(ascii: ","), row[(cut + 1)...].elementsEqual(end[1...]) else { return nil }
        var detailEnd = JSONWriter(capacity: todo.subtitle.utf8.count + 256)
        detailEnd.beginObject()
        detailEnd.writeAfterTitle(TodoDetailViewModel(todo: todo))
        detailEnd.endObject()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(cut + detailEnd.bytes.count)
        bytes.append(contentsOf: row[..<cut])
        bytes.append(UInt8(ascii: ","))
        bytes.append(contentsOf: detailEnd.bytes[1...])
        return bytes
    }

    /// The todo inside a journaled broadcast's payload (a TodoViewModel, as `broadcastRecord`
    /// writes it); nil when the bytes are not one. Used to answer a duplicate write.
    public static func todo(inBroadcastPayload payload: [UInt8]) -> Todo? {
        // Most payloads have no escapes: the subset parser reads them without Foundation.
        let parsed = JSONValue.parse(payload)?.object?["todo"]?.object.flatMap(StoredViewModel.StoredTodo.init(parsed:))
        guard
            let stored = parsed ?? (try? JSONDecoder().decode(StoredViewModel.self, from: Data(payload)))?.todo
        else { return nil }
        guard let id = UUID(canonical: stored.id), let createdAt = Timestamp(rfc3339: stored.createdAt),
            let priority = TodoPriority(rawValue: stored.priority)
        else { return nil }
        var completedAt: Timestamp?
        if let text = stored.completedAt {
            guard let time = Timestamp(rfc3339: text) else { return nil }
            completedAt = time
        }
        return Todo(
            id: id,
            createdAt: createdAt,
            title: stored.title,
            subtitle: stored.subtitle,
            priority: priority,
            completedAt: completedAt,
            deleted: stored.deleted,
            version: stored.version
        )
    }

    private func reference(in frame: [UInt8], parsed: JSONObject?) throws(PayloadError) -> TodoReference {
        try decode(ViewModelPayload.self, from: frame, parsed: parsed).todo.reference(path: "payload.todo")
    }

    /// The payload read from the parsed frame when it has the plain shape, else from the bytes.
    private func decode<P: ParsedPayload>(
        _ type: P.Type,
        from frame: [UInt8],
        parsed: JSONObject?
    ) throws(PayloadError) -> P {
        if let payload = P(payloadOf: parsed) { return payload }
        return try decode(type, from: frame)
    }

    private func decode<P: Decodable>(_ type: P.Type, from frame: [UInt8]) throws(PayloadError) -> P {
        do {
            return try JSONDecoder().decode(PayloadFrame<P>.self, from: Data(frame)).payload
        } catch let error as DecodingError {
            throw PayloadError(message: Self.describe(error))
        } catch {
            throw PayloadError(message: "payload does not decode.")
        }
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ codingPath: [any CodingKey], _ last: (any CodingKey)? = nil) -> String {
            var keys = codingPath
            if let last { keys.append(last) }
            var text = ""
            for key in keys {
                if let index = key.intValue, key.stringValue.hasPrefix("Index") || key.stringValue == "\(index)" {
                    text += "[\(index)]"
                } else {
                    text += text.isEmpty ? key.stringValue : ".\(key.stringValue)"
                }
            }
            return text.isEmpty ? "payload" : text
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "\(path(context.codingPath, key)) is missing."
        case .typeMismatch(_, let context) where context.debugDescription == ReferencePayload.outOfRange:
            return "\(path(context.codingPath)) must be an integer from \(Int.min) to \(Int.max)."
        case .typeMismatch(let type, let context):
            return "\(path(context.codingPath)) must be \(describe(type))."
        case .valueNotFound(let type, let context):
            return "\(path(context.codingPath)) must be \(describe(type)), not null."
        case .dataCorrupted(let context):
            return "\(path(context.codingPath)) is not valid."
        @unknown default:
            return "payload does not decode."
        }
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Int.Type: return "an integer"
        case is Bool.Type: return "true or false"
        default: return "an object"
        }
    }
}

private struct PayloadFrame<P: Decodable>: Decodable {
    let payload: P
}

private struct ReferencePayload: Decodable {
    let id: String
    let version: Int?

    private enum CodingKeys: String, CodingKey {
        case id, version
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        if !container.contains(.version) || (try? container.decodeNil(forKey: .version)) == true {
            version = nil
            return
        }
        let description: String
        switch container.decodeExactNumber(Int.self, forKey: .version) {
        case .integer(let number):
            version = number
            return
        // An integer past Int's range is told as such; anything else (1.5, 1e300,
        // 1.0000000000000000001) is no integer.
        case .outOfRange: description = Self.outOfRange
        case .notAnInteger: description = "not an integer"
        }
        throw DecodingError.typeMismatch(
            Int.self,
            .init(codingPath: container.codingPath + [CodingKeys.version], debugDescription: description)
        )
    }

    /// What a version past Int's range is told (`DecodingError`'s description, read by the
    /// message).
    static let outOfRange = "an integer out of range"

    /// The reference when `value` is an object with `id` a string and `version` absent, null
    /// or an integer; nil for anything else.
    init?(_ value: JSONValue?) {
        guard let object = value?.object, let id = object["id"]?.string,
            case .some(let version) = object["version"].optionalField({ $0.integer.flatMap { Int(exactly: $0) } })
        else { return nil }
        self.id = id
        self.version = version
    }

    func reference(path: String) throws(PayloadError) -> TodoReference {
        guard let uuid = UUID(canonical: id) else {
            throw PayloadError(message: "\(path).id must be a UUID string.")
        }
        if let version, version < 0 {
            throw PayloadError(message: "\(path).version must not be negative.")
        }
        return TodoReference(id: uuid, version: version)
    }
}

/// A TodoViewModel as the daemon wrote it: only its todo is read back.
private struct StoredViewModel: Decodable {
    struct StoredTodo: Decodable {
        let id: String
        let createdAt: String
        let title: String
        let subtitle: String
        let priority: String
        let completedAt: String?
        let deleted: Bool
        let version: Int
    }

    let todo: StoredTodo
}

extension StoredViewModel.StoredTodo {
    /// The todo of a parsed payload, when every field has the type `Decodable` would require.
    init?(parsed todo: JSONObject) {
        guard let id = todo["id"]?.string, let createdAt = todo["createdAt"]?.string,
            let title = todo["title"]?.string, let subtitle = todo["subtitle"]?.string,
            let priority = todo["priority"]?.string, let deleted = todo["deleted"]?.bool,
            let version = todo["version"]?.integer.flatMap({ Int(exactly: $0) }),
            let completedAt = todo["completedAt"].optionalField({ $0.string })
        else { return nil }
        self.init(
            id: id,
            createdAt: createdAt,
            title: title,
            subtitle: subtitle,
            priority: priority,
            completedAt: completedAt,
            deleted: deleted,
            version: version
        )
    }
}

/// A payload that can also be read from a parsed frame, when it has the plain shape of a valid
/// one: the same fields of the same types, absent or null where optional. Anything else is
/// left to its `Decodable` reading, whose errors name the field.
private protocol ParsedPayload: Decodable {
    /// nil unless `root` (a frame's root object) has a `payload` of the plain shape.
    init?(payloadOf root: JSONObject?)
}

private struct ViewModelPayload: ParsedPayload {
    let todo: ReferencePayload

    init?(payloadOf root: JSONObject?) {
        guard let payload = root?["payload"]?.object, let todo = ReferencePayload(payload["todo"]) else {
            return nil
        }
        self.todo = todo
    }
}

private struct DetailPayload: ParsedPayload {
    let todo: ReferencePayload
    let title: String?
    let subtitle: String?
    let priority: String?
    let completed: Bool?
    let deleted: Bool?

    init?(payloadOf root: JSONObject?) {
        guard let payload = root?["payload"]?.object, let todo = ReferencePayload(payload["todo"]),
            case .some(let title) = payload["title"].optionalField(\.string),
            case .some(let subtitle) = payload["subtitle"].optionalField(\.string),
            case .some(let priority) = payload["priority"].optionalField(\.string),
            case .some(let completed) = payload["completed"].optionalField(\.bool),
            case .some(let deleted) = payload["deleted"].optionalField(\.bool)
        else { return nil }
        self.todo = todo
        self.title = title
        self.subtitle = subtitle
        self.priority = priority
        self.completed = completed
        self.deleted = deleted
    }

    /// The request the payload stands for, with the same checks whichever way it was read.
    func input() throws(PayloadError) -> TodoDetailInput {
        let todo = try todo.reference(path: "payload.todo")
        var priority: TodoPriority?
        if let raw = self.priority {
            guard let value = TodoPriority(rawValue: raw.lowercased()) else {
                throw PayloadError(message: "payload.priority must be \"high\" or \"normal\".")
            }
            priority = value
        }
        let edit = TodoEdit(
            title: title,
            subtitle: subtitle,
            priority: priority,
            completed: completed,
            deleted: deleted
        )
        return TodoDetailInput(todo: todo, edit: edit)
    }
}

extension JSONWriter {
    /// A UUID's canonical lowercase form, written in place.
    mutating func write(_ id: UUID) {
        unescapedString(capacity: 36) { id.writeLowercased(into: $0) }
    }

    /// A timestamp's RFC 3339 form, written in place when it has the usual 24 bytes.
    mutating func write(_ time: Timestamp) {
        if time.hasFourDigitYear {
            unescapedString(capacity: 24) { time.writeRFC3339(into: $0) }
        } else {
            string(time.rfc3339)
        }
    }

    mutating func write(_ todo: Todo) {
        beginObject()
        key("id")
        write(todo.id)
        key("createdAt")
        write(todo.createdAt)
        field("title", todo.title)
        field("subtitle", todo.subtitle)
        field("priority", todo.priority.rawValue)
        key("completedAt")
        if let completedAt = todo.completedAt { write(completedAt) } else { null() }
        field("deleted", todo.deleted)
        field("version", todo.version)
        endObject()
    }

    mutating func write(_ viewModel: TodoViewModel) {
        beginObject()
        key("todo")
        write(viewModel.todo)
        field("title", viewModel.title)
        writeAfterTitle(viewModel)
        endObject()
    }

    /// A list row's fields after its title; a detail view model shares what comes before
    /// (`TodoWireCodec.detailPayload`).
    mutating func writeAfterTitle(_ viewModel: TodoViewModel) {
        field("subtitle", viewModel.subtitle)
        field("complete", viewModel.complete)
        field("deleted", viewModel.deleted)
        field("completeActionTitle", viewModel.completeActionTitle)
    }

    mutating func write(_ detail: TodoDetailViewModel) {
        beginObject()
        key("todo")
        write(detail.todo)
        field("title", detail.title)
        writeAfterTitle(detail)
        endObject()
    }

    /// A detail view model's fields after its title.
    mutating func writeAfterTitle(_ detail: TodoDetailViewModel) {
        field("subtitle", detail.subtitle)
        field("priority", detail.priority.rawValue)
        field("completed", detail.completed)
        field("deleted", detail.deleted)
        field("completedString", detail.completedString)
        field("priorityString", detail.priorityString)
        field("deletedString", detail.deletedString)
    }

    mutating func write(_ error: AppError) {
        beginObject()
        field("code", error.code.rawValue)
        field("message", error.message)
        if let field = error.field { self.field("field", field) }
        if let current = error.current {
            key("current")
            write(current)
        }
        endObject()
    }

    mutating func write(_ reference: TodoReference) {
        beginObject()
        key("id")
        write(reference.id)
        if let version = reference.version { field("version", version) }
        endObject()
    }

    /// The edit's fields, inside an object already begun.
    mutating func write(_ edit: TodoEdit) {
        if let title = edit.title { field("title", title) }
        if let subtitle = edit.subtitle { field("subtitle", subtitle) }
        if let priority = edit.priority { field("priority", priority.rawValue) }
        if let completed = edit.completed { field("completed", completed) }
        if let deleted = edit.deleted { field("deleted", deleted) }
    }

    mutating func write(_ read: ReadTodos) {
        beginObject()
        key("id")
        if let id = read.id { write(id) } else { null() }
        field("purpose", read.purpose == .list ? "list" : "detail")
        if let version = read.expectedVersion { field("version", version) }
        endObject()
    }

    mutating func write(_ write: TodoWrite) {
        beginObject()
        key("todo")
        self.write(TodoReference(id: write.id, version: write.expectedVersion))
        switch write.change {
        case .toggleComplete: field("change", "toggleComplete")
        case .delete: field("change", "delete")
        case .update(let edit):
            field("change", "update")
            key("edit")
            beginObject()
            self.write(edit)
            endObject()
        }
        if let mid = write.mid { field("mid", mid) }
        endObject()
    }
}
