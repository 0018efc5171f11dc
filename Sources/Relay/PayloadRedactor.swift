import NIOCore

/// Replaces the values of chosen fields inside a frame's `payload` (and its `error`, whose
/// `current` is the stored todo a conflict reports) with `"[redacted]"`, for
/// what monitor sessions (taps, loggers, analytics) receive.
///
/// It rewrites the frame's bytes in one pass and keeps everything else as it was — field
/// order, the envelope (`type`, `seq`, `re`, `session`), and every other payload field — so a
/// redacted frame differs from the original only where a value was replaced. Fields are
/// matched by name at any depth of the payload.
struct PayloadRedactor: Sendable {
    static let replacement = Array(#""[redacted]""#.utf8)

    private let fields: Set<[UInt8]>

    init?(fields: [String]) {
        guard !fields.isEmpty else { return nil }
        self.fields = Set(fields.map { Array($0.utf8) })
    }

    /// The frame with the fields redacted, or the frame itself when it has nothing to redact
    /// or is not a JSON object (the daemon's own frames always are).
    func redact(_ frame: ByteBuffer) -> ByteBuffer {
        let input = Array(frame.readableBytesView)
        var scanner = Scanner(input: input, fields: fields)
        guard let output = scanner.frame(), scanner.redacted else { return frame }
        return ByteBuffer(bytes: output)
    }

    private struct Scanner {
        let input: [UInt8]
        let fields: Set<[UInt8]>
        var index = 0
        var output: [UInt8] = []
        var redacted = false

        init(input: [UInt8], fields: Set<[UInt8]>) {
            self.input = input
            self.fields = fields
            output.reserveCapacity(input.count)
        }

        /// The members of a frame whose values are redacted: its `payload`, and its `error`,
        /// whose `current` (a conflict's stored todo) holds the same fields.
        static let redactedMembers: Set<[UInt8]> = [Array("payload".utf8), Array("error".utf8)]

        /// The top-level object: only the values of `payload` and `error` are redacted.
        mutating func frame() -> [UInt8]? {
            whitespace()
            guard object(topLevel: true, active: false) else { return nil }
            while index < input.count {
                output.append(input[index])
                index += 1
            }
            return output
        }

        private mutating func whitespace() {
            while index < input.count, [0x20, 0x09, 0x0A, 0x0D].contains(input[index]) {
                output.append(input[index])
                index += 1
            }
        }

        private mutating func value(active: Bool) -> Bool {
            whitespace()
            guard index < input.count else { return false }
            switch input[index] {
            case UInt8(ascii: "{"): return object(topLevel: false, active: active)
            case UInt8(ascii: "["): return array(active: active)
            case UInt8(ascii: "\""): return string() != nil
            default:
                let start = index
                while index < input.count, !Self.endsScalar(input[index]) { index += 1 }
                output.append(contentsOf: input[start..<index])
                return index > start
            }
        }

        private static func endsScalar(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), 0x20, 0x09, 0x0A, 0x0D: return true
            default: return false
            }
        }

        /// Copies a string; returns its raw content (escapes as written).
        private mutating func string() -> ArraySlice<UInt8>? {
            guard index < input.count, input[index] == UInt8(ascii: "\"") else { return nil }
            let start = index
            index += 1
            while index < input.count, input[index] != UInt8(ascii: "\"") {
                index += input[index] == UInt8(ascii: "\\") ? 2 : 1
            }
            guard index < input.count else { return nil }
            index += 1
            output.append(contentsOf: input[start..<index])
            return input[(start + 1)..<(index - 1)]
        }

        private mutating func object(topLevel: Bool, active: Bool) -> Bool {
            guard let empty = open(UInt8(ascii: "{"), UInt8(ascii: "}")) else { return false }
            if empty { return true }
            while true {
                whitespace()
                guard let key = string() else { return false }
                whitespace()
                guard index < input.count, input[index] == UInt8(ascii: ":") else { return false }
                output.append(input[index])
                index += 1
                if active, fields.contains(Array(key)) {
                    // Skip the value without copying it, then write the replacement.
                    let kept = output.count
                    guard value(active: false) else { return false }
                    output.removeSubrange(kept...)
                    output.append(contentsOf: PayloadRedactor.replacement)
                    redacted = true
                } else {
                    let inPayload = topLevel ? Self.redactedMembers.contains(Array(key)) : active
                    guard value(active: inPayload) else { return false }
                }
                guard let closed = separator(UInt8(ascii: "}")) else { return false }
                if closed { return true }
            }
        }

        /// Copies an opening bracket: true when the container is empty (its closer copied
        /// too), nil when the bracket is not there.
        private mutating func open(_ opener: UInt8, _ closer: UInt8) -> Bool? {
            guard index < input.count, input[index] == opener else { return nil }
            output.append(opener)
            index += 1
            whitespace()
            guard index < input.count, input[index] == closer else { return false }
            output.append(closer)
            index += 1
            return true
        }

        /// Copies what follows a member: true at the closer, false at a comma, nil otherwise.
        private mutating func separator(_ closer: UInt8) -> Bool? {
            whitespace()
            guard index < input.count else { return nil }
            let byte = input[index]
            guard byte == closer || byte == UInt8(ascii: ",") else { return nil }
            output.append(byte)
            index += 1
            return byte == closer
        }

        private mutating func array(active: Bool) -> Bool {
            guard let empty = open(UInt8(ascii: "["), UInt8(ascii: "]")) else { return false }
            if empty { return true }
            while true {
                guard value(active: active) else { return false }
                guard let closed = separator(UInt8(ascii: "]")) else { return false }
                if closed { return true }
            }
        }
    }
}
