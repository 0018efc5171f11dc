import EventStream
import Foundation
import TodoApp

/// The frames the client writes (protocol §3).
enum OutgoingFrame {
    static func request(_ event: Event, id: String, mid: String?) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("type", event.name)
        writer.field("id", id)
        if let mid { writer.field("mid", mid) }
        if let payload = TodoWireCodec().encodeBody(event).payloadBytes {
            writer.key("payload")
            writer.raw(payload)
        }
        writer.endObject()
        return writer.bytes
    }

    static func resume(epoch: String, after: UInt64) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("op", "resume")
        writer.field("id", "resume")
        writer.field("epoch", epoch)
        writer.field("after", after)
        writer.endObject()
        return writer.bytes
    }

    static func auth(token: String) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("op", "auth")
        writer.field("id", "auth")
        writer.field("token", token)
        writer.endObject()
        return writer.bytes
    }
}

/// The envelope of a frame the daemon sent (protocol §4): everything but the payload, which
/// `TodoWireCodec.decodeResponse` reads.
struct IncomingFrame: Decodable, Sendable {
    struct ErrorBody: Decodable, Sendable {
        let code: String
        let message: String
    }

    let op: String?
    let type: String?
    let seq: UInt64?
    let re: String?
    let mid: String?
    let duplicate: Bool?
    let epoch: String?
    let reconnectAfterMilliseconds: Int?
    let error: ErrorBody?

    enum CodingKeys: String, CodingKey {
        case op, type, seq, re, mid, duplicate, epoch, error
        case reconnectAfterMilliseconds = "reconnect_after_ms"
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        op = try container.decodeIfPresent(String.self, forKey: .op)
        type = try container.decodeIfPresent(String.self, forKey: .type)
        seq = try container.decodeIfPresent(UInt64.self, forKey: .seq)
        // `re` echoes the id with its JSON type; this client sends string ids only.
        re = try? container.decodeIfPresent(String.self, forKey: .re)
        mid = try container.decodeIfPresent(String.self, forKey: .mid)
        duplicate = try container.decodeIfPresent(Bool.self, forKey: .duplicate)
        epoch = try container.decodeIfPresent(String.self, forKey: .epoch)
        reconnectAfterMilliseconds = try container.decodeIfPresent(Int.self, forKey: .reconnectAfterMilliseconds)
        // An app error (an object with more fields) is read with the payload.
        error = try? container.decodeIfPresent(ErrorBody.self, forKey: .error)
    }

    static func decode(_ bytes: [UInt8]) -> IncomingFrame? {
        try? JSONDecoder().decode(IncomingFrame.self, from: Data(bytes))
    }
}
