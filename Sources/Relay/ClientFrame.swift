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

extension FrameField: Equatable where Value: Equatable {}

/// The control fields of a client frame (payloads are left to the app's codec).
struct ClientFrame: Decodable, Equatable {
    var type: FrameField<String> = .absent
    var op: FrameField<String> = .absent
    var id: FrameField<CorrelationID> = .absent
    /// The client's mutation id: a string of 1–64 characters.
    var mid: FrameField<String> = .absent

    /// An `id` or `mid` string: 1–64 characters, counted as Unicode scalar values (as a title's
    /// length is, and as most languages count a string), not as grapheme clusters.
    static func isIdentifier(_ text: String) -> Bool {
        (1...64).contains(text.unicodeScalars.count)
    }
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
        let afterKey = Key(stringValue: "after")
        if container.contains(afterKey) {
            after = container.decodeExactInteger(UInt64.self, forKey: afterKey).map { .value($0) } ?? .invalid
        }
        let idKey = Key(stringValue: "id")
        if container.contains(idKey) {
            if let number = container.decodeExactInteger(Int64.self, forKey: idKey) {
                id = .value(.integer(number))
            } else if let text = try? container.decode(String.self, forKey: idKey), Self.isIdentifier(text) {
                id = .value(.string(text))
            } else {
                id = .invalid
            }
        }
        let midKey = Key(stringValue: "mid")
        if container.contains(midKey) {
            if let text = try? container.decode(String.self, forKey: midKey), Self.isIdentifier(text) {
                mid = .value(text)
            } else {
                mid = .invalid
            }
        }
    }

    /// A frame and, when `JSONValue.parse` read it, its root object (for the codec's
    /// `decodeRequest(named:frame:parsed:)`).
    struct Parsed {
        let frame: ClientFrame
        let root: JSONObject?
    }

    /// The frame's control fields; nil when it is not a JSON object. Most frames are read by
    /// `JSONValue.parse`; the rest (escapes, fractions, duplicate keys, invalid JSON…) by
    /// JSONDecoder, as `decoded(from:)` does, with the same result.
    static func parse(_ bytes: [UInt8]) -> Parsed? {
        if case .object(let root) = JSONValue.parse(bytes) {
            return Parsed(frame: ClientFrame(root: root), root: root)
        }
        return decoded(from: bytes).map { Parsed(frame: $0, root: nil) }
    }

    /// The frame as JSONDecoder reads it, when it is JSON: the reference for the fields
    /// `init(root:)` reads. (The decoder also reads what is not JSON: trailing commas, unknown
    /// escapes, leading zeros, raw control characters. Such a frame is `invalid_json`.)
    static func decoded(from bytes: [UInt8]) -> ClientFrame? {
        guard JSONValidator.isValid(bytes) else { return nil }
        return try? JSONDecoder().decode(ClientFrame.self, from: Data(bytes))
    }

    /// The fields of a parsed root object, each as `init(from:)` reads it: a present key whose
    /// value is null or of another type is `.invalid`.
    init(root: JSONObject) {
        type = Self.field(root["type"], \.string)
        op = Self.field(root["op"], \.string)
        types = Self.field(root["types"]) { value in
            guard let elements = value.array else { return nil }
            var texts: [String] = []
            texts.reserveCapacity(elements.count)
            for element in elements {
                guard let text = element.string else { return nil }
                texts.append(text)
            }
            return texts
        }
        token = Self.field(root["token"], \.string)
        epoch = Self.field(root["epoch"], \.string)
        after = Self.field(root["after"]) { $0.integer.flatMap { UInt64(exactly: $0) } }
        id = Self.field(root["id"]) { value in
            switch value {
            case .integer(let number): return .integer(number)
            case .string(let text) where Self.isIdentifier(text): return .string(text)
            default: return nil
            }
        }
        mid = Self.field(root["mid"]) { value in value.string.flatMap { Self.isIdentifier($0) ? $0 : nil } }
    }

    private static func field<T>(_ value: JSONValue?, _ read: (JSONValue) -> T?) -> FrameField<T> {
        guard let value else { return .absent }
        guard let read = read(value) else { return .invalid }
        return .value(read)
    }
}
