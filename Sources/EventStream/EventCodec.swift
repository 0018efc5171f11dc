/// A payload that did not decode. `message` names the field path (`payload.todo.id`).
public struct PayloadError: Error, Sendable, Hashable {
    public let message: String
    public init(message: String) { self.message = message }
}

/// The encoded body of an event: its payload, or the error it carries instead.
public enum EncodedBody: Sendable, Hashable {
    case payload([UInt8])
    case error([UInt8])
    /// A payload that is a JSON array of these encoded values, each written where the frame is
    /// built: a list of many rows kept encoded (`RowJSONCache`) reaches the frame's buffer
    /// without first being joined in one array of its own.
    case array([[UInt8]])

    /// The payload's bytes, an array's joined as JSON; nil for an error.
    public var payloadBytes: [UInt8]? {
        switch self {
        case .payload(let bytes): return bytes
        case .error: return nil
        case .array(let elements):
            var writer = JSONWriter(capacity: elements.reduce(2) { $0 + $1.count + 1 })
            writer.beginArray()
            for element in elements { writer.raw(element) }
            writer.endArray()
            return writer.bytes
        }
    }

    /// The same body with an array's elements joined (`payload`), as it is otherwise.
    public var joined: EncodedBody {
        guard case .array = self, let bytes = payloadBytes else { return self }
        return .payload(bytes)
    }
}

/// Turns an app's events into wire bodies and client frames into events. The relay knows
/// events only through this.
public protocol EventCodec<Event>: Sendable {
    associatedtype Event: StreamEvent
    var catalog: EventCatalog { get }
    /// Decodes the payload of a client frame (the whole frame's JSON bytes) that names a
    /// publishable request type.
    func decodeRequest(named name: String, frame: [UInt8]) throws(PayloadError) -> Event
    /// The same, given the frame's root object when `JSONValue.parse` read the frame (nil
    /// when it did not). The result, or the error, is the one `decodeRequest(named:frame:)`
    /// gives for the same frame.
    func decodeRequest(named name: String, frame: [UInt8], parsed: JSONObject?) throws(PayloadError) -> Event
    func encodeBody(_ event: Event) -> EncodedBody
}

extension EventCodec {
    /// Decodes from the bytes alone, for codecs without a reader of parsed frames.
    public func decodeRequest(named name: String, frame: [UInt8], parsed: JSONObject?) throws(PayloadError) -> Event {
        try decodeRequest(named: name, frame: frame)
    }
}
