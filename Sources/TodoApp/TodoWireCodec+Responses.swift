import EventStream
import Foundation

extension TodoWireCodec {
    /// Decodes a view-layer response frame as the daemon sends it (the whole frame's JSON
    /// bytes, with `payload` or `error`): what a client library reads. The model-layer events
    /// and the requests are not decoded here.
    public func decodeResponse(named name: String, frame: [UInt8]) throws(PayloadError) -> Event {
        guard let kind = Event.Kind(rawValue: name) else {
            throw PayloadError(message: "Unknown event type \(name).")
        }
        switch kind {
        case .responseTodoViewModels:
            return .responseTodoViewModels(
                try result([WireViewModel].self, frame) { try $0.map { try $0.viewModel() } }
            )
        case .responseTodoViewModel:
            return .responseTodoViewModel(try result(WireViewModel.self, frame) { try $0.viewModel() })
        case .responseTodoDetailViewModel:
            return .responseTodoDetailViewModel(try result(WireDetail.self, frame) { try $0.detail() })
        case .responseUpdateDetailViewModel:
            return .responseUpdateDetailViewModel(try result(WireDetail.self, frame) { try $0.detail() })
        default:
            throw PayloadError(message: "\(name) is not a view-layer response.")
        }
    }

    private func result<Wire: Decodable, Value>(
        _ type: Wire.Type,
        _ frame: [UInt8],
        _ convert: (Wire) throws -> Value
    ) throws(PayloadError) -> Result<Value, AppError> {
        let body: ResponseFrame<Wire>
        do {
            body = try JSONDecoder().decode(ResponseFrame<Wire>.self, from: Data(frame))
        } catch let error as DecodingError {
            throw PayloadError(message: Self.describe(error))
        } catch {
            throw PayloadError(message: "payload does not decode.")
        }
        if let error = body.error {
            return .failure(try error.appError())
        }
        guard let payload = body.payload else { throw PayloadError(message: "payload is missing.") }
        do {
            return .success(try convert(payload))
        } catch let error as PayloadError {
            throw error
        } catch {
            throw PayloadError(message: "payload does not decode.")
        }
    }
}

private struct ResponseFrame<P: Decodable>: Decodable {
    let payload: P?
    let error: WireError?
}

private struct WireTodo: Decodable {
    let id: String
    let createdAt: String
    let title: String
    let subtitle: String
    let priority: String
    let completedAt: String?
    let deleted: Bool
    let version: Int

    func todo() throws(PayloadError) -> Todo {
        guard let uuid = UUID(canonical: id) else { throw PayloadError(message: "todo.id must be a UUID string.") }
        guard let created = Timestamp(rfc3339: createdAt) else {
            throw PayloadError(message: "todo.createdAt must be an RFC 3339 time.")
        }
        guard let priority = TodoPriority(rawValue: priority.lowercased()) else {
            throw PayloadError(message: "todo.priority must be \"high\" or \"normal\".")
        }
        var completed: Timestamp?
        if let completedAt {
            guard let time = Timestamp(rfc3339: completedAt) else {
                throw PayloadError(message: "todo.completedAt must be an RFC 3339 time.")
            }
            completed = time
        }
        return Todo(
            id: uuid,
            createdAt: created,
            title: title,
            subtitle: subtitle,
            priority: priority,
            completedAt: completed,
            deleted: deleted,
            version: version
        )
    }
}

private struct WireViewModel: Decodable {
    let todo: WireTodo

    func viewModel() throws(PayloadError) -> TodoViewModel { TodoViewModel(todo: try todo.todo()) }
}

private struct WireDetail: Decodable {
    let todo: WireTodo
    let title: String
    let subtitle: String
    let priority: String
    let completed: Bool
    let deleted: Bool

    func detail() throws(PayloadError) -> TodoDetailViewModel {
        var detail = TodoDetailViewModel(todo: try todo.todo())
        detail.title = title
        detail.subtitle = subtitle
        detail.priority = TodoPriority(rawValue: priority.lowercased()) ?? detail.priority
        detail.completed = completed
        detail.deleted = deleted
        return detail
    }
}

private struct WireError: Decodable {
    let code: String
    let message: String
    let field: String?
    let current: WireViewModel?

    func appError() throws(PayloadError) -> AppError {
        AppError(code: AppError.Code(code), message: message, field: field, current: try current?.viewModel())
    }
}
