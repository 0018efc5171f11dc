/// A JSON value as the fast frame parser reads it: only the shapes it can read exactly as
/// Foundation's JSONDecoder does (integers, no escapes).
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case integer(Int64)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The deepest nesting of arrays and objects `parse` takes (the root counts as 1).
    public static let maxDepth = 64

    /// Parses one JSON text, or returns nil whenever the result might differ from what
    /// JSONDecoder reads: the caller then decodes the bytes with JSONDecoder. A strict subset:
    /// nil on invalid JSON, a backslash or a control byte in a string, a string that is not
    /// UTF-8, a number that is not an integer of Int64 (a fraction, an exponent, `-0`, an
    /// overflow), a key twice in one object, nesting deeper than `maxDepth`, and anything but
    /// whitespace after the value.
    public static func parse(_ bytes: [UInt8]) -> JSONValue? {
        bytes.withUnsafeBufferPointer { buffer in
            var parser = JSONSubsetParser(buffer)
            return parser.parseDocument()
        }
    }

    /// The text of a string; nil for any other value.
    public var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    public var integer: Int64? {
        if case .integer(let number) = self { return number }
        return nil
    }

    public var bool: Bool? {
        if case .bool(let flag) = self { return flag }
        return nil
    }

    public var array: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    public var object: JSONObject? {
        if case .object(let members) = self { return members }
        return nil
    }
}

extension Optional where Wrapped == JSONValue {
    /// An optional field as `decodeIfPresent` reads it: `.some(nil)` when the field is absent
    /// or null, `.some(value)` when `read` takes it, nil (not of that type) otherwise.
    @inlinable
    public func optionalField<T>(_ read: (JSONValue) -> T?) -> T?? {
        switch self {
        case nil, .null?: return .some(nil)
        case .some(let value): return read(value).map { .some($0) }
        }
    }
}

/// A JSON object's members in the order they were written; keys are unique.
public struct JSONObject: Sendable, Hashable {
    public struct Member: Sendable, Hashable {
        public let key: String
        public let value: JSONValue

        public init(key: String, value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    public let members: [Member]

    public init(members: [Member]) {
        self.members = members
    }

    /// The value of `key` (compared as Swift strings are, like JSONDecoder's keys); nil when absent.
    public subscript(key: String) -> JSONValue? {
        for member in members where member.key == key {
            return member.value
        }
        return nil
    }
}

/// The parser behind `JSONValue.parse`: one pass over the bytes, no Foundation.
private struct JSONSubsetParser {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0
    /// The members of the objects being read, innermost last: each object's members are
    /// copied out once, into an array of the right size, when it ends.
    private var pendingMembers: [JSONObject.Member] = []

    /// Objects with more members than this find duplicate keys with a set rather than by
    /// comparing each key with all those before it.
    private static let linearKeyCheckLimit = 16

    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
        // Room for a request frame's members at every level at once (about ten), so the stack
        // is allocated once rather than grown member by member.
        pendingMembers.reserveCapacity(Self.membersReserved)
    }

    private static let membersReserved = 16

    mutating func parseDocument() -> JSONValue? {
        skipWhitespace()
        guard let value = parseValue() else { return nil }
        skipWhitespace()
        return index == bytes.count ? value : nil
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                index += 1
            default:
                return
            }
        }
    }

    private mutating func parseValue() -> JSONValue? {
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            return parseObject()
        case UInt8(ascii: "["):
            return parseArray()
        case UInt8(ascii: "\""):
            return parseString().map(JSONValue.string)
        case UInt8(ascii: "t"):
            return parseLiteral("true", .bool(true))
        case UInt8(ascii: "f"):
            return parseLiteral("false", .bool(false))
        case UInt8(ascii: "n"):
            return parseLiteral("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return parseInteger().map(JSONValue.integer)
        default:
            return nil
        }
    }

    private mutating func parseLiteral(_ text: StaticString, _ value: JSONValue) -> JSONValue? {
        let count = text.utf8CodeUnitCount
        guard bytes.count - index >= count else { return nil }
        let literal = text.utf8Start
        for offset in 0..<count where bytes[index + offset] != literal[offset] {
            return nil
        }
        index += count
        return value
    }

    /// `-?(0|[1-9][0-9]*)` within Int64. A fraction or an exponent is left unread, and then
    /// fails where the caller expects a separator.
    private mutating func parseInteger() -> Int64? {
        var negative = false
        if bytes[index] == UInt8(ascii: "-") {
            negative = true
            index += 1
        }
        guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else { return nil }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            // "-0" is a double's negative zero to JSONDecoder; "01" is not JSON.
            if negative { return nil }
            if index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { return nil }
            return 0
        }
        // Accumulated as a negative number, which reaches Int64.min.
        var value: Int64 = 0
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
            let digit = Int64(bytes[index] - UInt8(ascii: "0"))
            let (shifted, overflowA) = value.multipliedReportingOverflow(by: 10)
            let (next, overflowB) = shifted.subtractingReportingOverflow(digit)
            if overflowA || overflowB { return nil }
            value = next
            index += 1
        }
        if negative { return value }
        return value == Int64.min ? nil : -value
    }

    /// A string without escapes or control bytes, in UTF-8; `index` is at its opening quote.
    private mutating func parseString() -> String? {
        index += 1
        let start = index
        var ascii = true
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let content = UnsafeBufferPointer(rebasing: bytes[start..<index])
                index += 1
                if ascii { return String(decoding: content, as: UTF8.self) }
                return String(validating: content, as: UTF8.self)
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
            if byte >= 0x80 { ascii = false }
            index += 1
        }
        return nil
    }

    private mutating func enterContainer() -> Bool {
        depth += 1
        index += 1
        return depth <= JSONValue.maxDepth
    }

    private mutating func parseArray() -> JSONValue? {
        guard enterContainer() else { return nil }
        defer { depth -= 1 }
        var elements: [JSONValue] = []
        if closesEmpty(UInt8(ascii: "]")) { return .array(elements) }
        while true {
            skipWhitespace()
            guard let element = parseValue() else { return nil }
            elements.append(element)
            guard let closed = closesAfterElement(UInt8(ascii: "]")) else { return nil }
            if closed { return .array(elements) }
        }
    }

    private mutating func parseObject() -> JSONValue? {
        guard enterContainer() else { return nil }
        defer { depth -= 1 }
        let first = pendingMembers.count
        defer { pendingMembers.removeSubrange(first...) }
        var keys: Set<String>?
        if closesEmpty(UInt8(ascii: "}")) { return .object(JSONObject(members: [])) }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let key = parseString() else { return nil }
            guard isNewKey(key, membersFrom: first, keys: &keys) else { return nil }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            skipWhitespace()
            guard let value = parseValue() else { return nil }
            pendingMembers.append(JSONObject.Member(key: key, value: value))
            guard let closed = closesAfterElement(UInt8(ascii: "}")) else { return nil }
            if closed {
                // Copied into an array of its own: one sharing the stack's storage (which
                // `Array(slice)` makes of the outermost object's) would have the removal of
                // these members copy the stack.
                var members: [JSONObject.Member] = []
                members.reserveCapacity(pendingMembers.count - first)
                members.append(contentsOf: pendingMembers[first...])
                return .object(JSONObject(members: members))
            }
        }
    }

    /// Whether the container just opened ends at once (then reads its `closing` byte).
    private mutating func closesEmpty(_ closing: UInt8) -> Bool {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == closing else { return false }
        index += 1
        return true
    }

    /// After an element: true when `closing` ends the container, false when a comma announces
    /// another element, nil for anything else.
    private mutating func closesAfterElement(_ closing: UInt8) -> Bool? {
        skipWhitespace()
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: ","):
            index += 1
            return false
        case closing:
            index += 1
            return true
        default:
            return nil
        }
    }

    /// Whether no member of the object begun at `first` has `key`; a key twice means nil
    /// (JSONDecoder keeps one of them). Large objects keep their keys in `keys`.
    private func isNewKey(_ key: String, membersFrom first: Int, keys: inout Set<String>?) -> Bool {
        if keys == nil, pendingMembers.count - first < Self.linearKeyCheckLimit {
            for member in pendingMembers[first...] where member.key == key {
                return false
            }
            return true
        }
        if keys == nil {
            keys = Set(pendingMembers[first...].lazy.map(\.key))
        }
        return keys?.insert(key).inserted ?? false
    }
}
