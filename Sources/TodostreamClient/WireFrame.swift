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

/// `re` and `seq` as far as they can be read from the first bytes of a frame too large to be
/// read whole: the daemon writes its envelope before the payload (protocol §4). Only the
/// object's own fields count; a value cut off by the end of the bytes is not read.
struct FrameHead: Sendable, Hashable {
    var re: String?
    var seq: UInt64?

    init(re: String? = nil, seq: UInt64? = nil) {
        self.re = re
        self.seq = seq
    }

    init(_ bytes: some Collection<UInt8>) {
        var reader = Reader(bytes: Array(bytes))
        guard reader.take(UInt8(ascii: "{")) else { return }
        while let key = reader.string() {
            guard reader.take(UInt8(ascii: ":")) else { return }
            switch key {
            case "re" where reader.peek == UInt8(ascii: "\""):
                guard let value = reader.string() else { return }
                re = value
            case "seq":
                guard let value = reader.number() else { return }
                seq = value
            default:
                guard reader.skipValue() else { return }
            }
            guard reader.take(UInt8(ascii: ",")) else { return }
        }
    }

    /// Reads JSON tokens; nil (or false) where the bytes end or are not what was expected.
    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        /// The next byte after white space, not taken.
        var peek: UInt8? {
            var ahead = self
            ahead.skipSpace()
            return ahead.index < bytes.count ? bytes[ahead.index] : nil
        }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        /// A string; one with escapes is skipped and read as nil (the daemon's ids and keys
        /// have none).
        mutating func string() -> String? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = index
            var escaped = false
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "\\"):
                    escaped = true
                    index += 2
                case UInt8(ascii: "\""):
                    index += 1
                    return escaped ? nil : String(decoding: bytes[start..<index - 1], as: UTF8.self)
                default:
                    index += 1
                }
            }
            return nil
        }

        /// An unsigned integer followed by the end of its value.
        mutating func number() -> UInt64? {
            skipSpace()
            var value: UInt64 = 0
            let start = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                let (times, overflow) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflowAgain) = times.addingReportingOverflow(UInt64(bytes[index] - UInt8(ascii: "0")))
                guard !overflow, !overflowAgain else { return nil }
                value = sum
                index += 1
            }
            guard index > start, let next = peek, next == UInt8(ascii: ",") || next == UInt8(ascii: "}") else {
                return nil
            }
            return value
        }

        /// Skips any value, nested ones whole; false when the bytes end inside it.
        mutating func skipValue() -> Bool {
            skipSpace()
            var depth = 0
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "\""):
                    index += 1
                    while index < bytes.count, bytes[index] != UInt8(ascii: "\"") {
                        index += bytes[index] == UInt8(ascii: "\\") ? 2 : 1
                    }
                    guard index < bytes.count else { return false }
                    index += 1
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                    index += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    guard depth > 0 else { return true }
                    depth -= 1
                    index += 1
                case UInt8(ascii: ","):
                    if depth == 0 { return true }
                    index += 1
                default:
                    index += 1
                }
                if depth == 0, let next = peek, next == UInt8(ascii: ",") || next == UInt8(ascii: "}") {
                    return true
                }
            }
            return false
        }
    }
}
