import EventStream
import Foundation

/// A field of a client frame: absent, present with the right type, or present with a wrong
/// one.
enum FrameField<Value> {
    case absent
    case value(Value)
    case invalid

    var value: Value? {
        if case .value(let value) = self { return value }
        return nil
    }

    var isAbsent: Bool {
        if case .absent = self { return true }
        return false
    }
}

/// The control fields of a client frame (payloads are left to the app's codec).
struct ClientFrame: Decodable {
    var type: FrameField<String> = .absent
    var op: FrameField<String> = .absent
    var id: FrameField<CorrelationID> = .absent
    /// The client's mutation id: a string of 1–64 characters.
    var mid: FrameField<String> = .absent
    var types: FrameField<[String]> = .absent
    var token: FrameField<String> = .absent
    var epoch: FrameField<String> = .absent
    var after: FrameField<UInt64> = .absent

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    init(from decoder: any Decoder) throws {
        // Throws (typeMismatch at the root) when the frame is not a JSON object.
        let container = try decoder.container(keyedBy: Key.self)
        func field<T: Decodable>(_ name: String, _ type: T.Type) -> FrameField<T> {
            let key = Key(stringValue: name)
            guard container.contains(key) else { return .absent }
            guard let value = try? container.decode(T.self, forKey: key) else { return .invalid }
            return .value(value)
        }
        type = field("type", String.self)
        op = field("op", String.self)
        types = field("types", [String].self)
        token = field("token", String.self)
        epoch = field("epoch", String.self)
        after = field("after", UInt64.self)
        let idKey = Key(stringValue: "id")
        if container.contains(idKey) {
            if let number = try? container.decode(Int64.self, forKey: idKey) {
                id = .value(.integer(number))
            } else if let text = try? container.decode(String.self, forKey: idKey), (1...64).contains(text.count) {
                id = .value(.string(text))
            } else {
                id = .invalid
            }
        }
        let midKey = Key(stringValue: "mid")
        if container.contains(midKey) {
            if let text = try? container.decode(String.self, forKey: midKey), (1...64).contains(text.count) {
                mid = .value(text)
            } else {
                mid = .invalid
            }
        }
    }

    enum ParseError: Error {
        case notJSONObject
    }

    static func parse(_ bytes: [UInt8]) -> ClientFrame? {
        try? JSONDecoder().decode(ClientFrame.self, from: Data(bytes))
    }
}
