import ArgumentParser
import NIOCore

/// What todostreamd's publishers and requesters send (`--publish`).
enum PublishKind: String, ExpressibleByArgument, Sendable, CaseIterable {
    /// `RequestToggleCompleteTodoViewModel` of the client's own todo: its broadcast copy answers it.
    case toggle
    /// `RequestUpdateDetailViewModel` saving the client's own todo with a subtitle of
    /// --payload-bytes: answered by the reply and the client's own broadcast copy.
    case edit
    /// The six view requests in a frontend's proportions (`RequestKind.mix`).
    case mixed
    /// `request` only: the `ping` operation, answered by its `pong`. It never reaches the
    /// sequencer, so it measures the connection's own path (read, parse, answer, write). The
    /// peers get their own `PING`, answered by `PONG`.
    case ping

    /// The text of `--help`.
    static let helpText = ArgumentHelp(
        "todostreamd: toggle, edit, mixed or (request only) ping (see the discussion above).",
        valueName: "toggle|edit|mixed|ping"
    )

    /// The discussion paragraph shared by `fanout --help` and `request --help`.
    static let discussion = """
        --publish (todostreamd): toggle (the default) sends RequestToggleCompleteTodoViewModel for the \
        client's own todo; answered by the broadcast copy carrying its `re`. edit sends \
        RequestUpdateDetailViewModel saving that todo with title "t", a subtitle of --payload-bytes ASCII \
        bytes (a 10-digit counter, then "x") and priority "normal", without a version (never a \
        conflict); answered once both the reply ResponseUpdateDetailViewModel and the client's own \
        broadcast copy of ResponseTodoViewModel arrived. mixed sends the six view requests as a frontend \
        does, per 100 requests: 40 RequestTodoViewModels (reply), 10 RequestTodoDetailViewModel (reply), \
        5 RequestNewTodoDetailViewModel (reply), 30 RequestUpdateDetailViewModel (reply + broadcast \
        copy; 3 of them restores with "deleted":false sent right after each delete), 12 \
        RequestToggleCompleteTodoViewModel (broadcast copy) and 3 RequestDeleteTodoViewModel (broadcast \
        copy), interleaved evenly. ping (request only) sends the ping operation, answered by its pong: \
        it never reaches the sequencer, so it measures a connection's own path alone (read, parse, \
        answer, write); to the peers it sends their PING, answered by PONG. A request is answered \
        when every frame it causes for its sender has arrived; an error (a response with "error", or op "error") is an answer too, counted as failed \
        and reported by code. Each client first creates its todo (a save of a fresh lowercase UUID). \
        Peers send --payload-bytes messages whatever --publish says but ping (edit only labels their \
        result so that it pairs with todostreamd's); mixed is todostreamd's only.
        """
}

/// One request a todostreamd client sends, and what answers it.
enum RequestKind: Int, CaseIterable, Sendable {
    case list
    case detail
    case new
    case update
    case toggle
    case delete
    /// An update with `"deleted":false`, sent right after a delete.
    case restore
    /// The `ping` operation (not an event): its `pong` answers it.
    case ping

    /// The name in results (`by_kind`).
    var name: String {
        switch self {
        case .list: "list"
        case .detail: "detail"
        case .new: "new"
        case .update: "update"
        case .toggle: "toggle"
        case .delete: "delete"
        case .restore: "restore"
        case .ping: "ping"
        }
    }

    /// How its frame begins, up to its id.
    var framePrefix: String {
        switch self {
        case .ping: #"{"op":"ping","id":"#
        default: #"{"type":""# + type + #"","id":"#
        }
    }

    /// The request's event type (a ping, an operation, has none).
    var type: String {
        switch self {
        case .list: "RequestTodoViewModels"
        case .detail: "RequestTodoDetailViewModel"
        case .new: "RequestNewTodoDetailViewModel"
        case .update, .restore: "RequestUpdateDetailViewModel"
        case .toggle: "RequestToggleCompleteTodoViewModel"
        case .delete: "RequestDeleteTodoViewModel"
        case .ping: ""
        }
    }

    /// Whether a reply (a frame with `re`, without `seq`) answers it.
    var expectsReply: Bool {
        switch self {
        case .list, .detail, .new, .update, .restore, .ping: true
        case .toggle, .delete: false
        }
    }

    /// Whether it causes a broadcast (its sender's copy carries `re`).
    var expectsBroadcast: Bool {
        switch self {
        case .update, .restore, .toggle, .delete: true
        case .list, .detail, .new, .ping: false
        }
    }

    /// The mixed schedule, 100 requests: 40 list, 10 detail, 5 new, 27 update, 12 toggle and
    /// 3 delete, each delete followed at once by a restore (so 30 updates in all), spread by
    /// smooth weighted round robin so that any stretch of it keeps about the proportions.
    static let mix: [RequestKind] = {
        let weights: [(kind: RequestKind, weight: Int)] = [
            (.list, 40), (.detail, 10), (.new, 5), (.update, 27), (.toggle, 12), (.delete, 3),
        ]
        let total = weights.reduce(0) { $0 + $1.weight }
        var current = [Int](repeating: 0, count: weights.count)
        var schedule: [RequestKind] = []
        for _ in 0..<total {
            var best = 0
            for index in weights.indices {
                current[index] += weights[index].weight
                if current[index] > current[best] { best = index }
            }
            current[best] -= total
            schedule.append(weights[best].kind)
            if weights[best].kind == .delete { schedule.append(.restore) }
        }
        return schedule
    }()
}

/// Picks the kind of each request a connection sends.
struct RequestSchedule {
    let publish: PublishKind
    private var position: Int

    /// `offset` staggers the clients' places in the mixed schedule.
    init(publish: PublishKind, offset: Int) {
        self.publish = publish
        position = offset % RequestKind.mix.count
    }

    mutating func next() -> RequestKind {
        switch publish {
        case .toggle: return .toggle
        case .edit: return .update
        case .ping: return .ping
        case .mixed:
            let kind = RequestKind.mix[position]
            position = (position + 1) % RequestKind.mix.count
            return kind
        }
    }

    /// The kind `next()` will return, without advancing.
    func peek() -> RequestKind {
        switch publish {
        case .toggle: .toggle
        case .edit: .update
        case .ping: .ping
        case .mixed: RequestKind.mix[position]
        }
    }
}

/// Writes todostreamd request frames (integer ids) about a connection's todos, reusing their
/// fixed parts.
struct DaemonRequestWriter {
    private let todoIDs: [[UInt8]]
    private let subtitleFiller: Int
    private let prefixes: [[UInt8]]

    init(todoIDs: [String], subtitleBytes: Int) {
        self.todoIDs = todoIDs.map { Array($0.utf8) }
        subtitleFiller = max(subtitleBytes - Self.counterDigits, 0)
        prefixes = RequestKind.allCases.map { Array($0.framePrefix.utf8) }
    }

    static let counterDigits = 10

    /// The frame of request `id` about todo `todo` (modulo the connection's todos), ending
    /// with `\n`. `counter` goes into an update's subtitle so that every save changes it.
    func frame(
        _ kind: RequestKind,
        id: UInt64,
        todo: Int,
        counter: UInt64,
        allocator: ByteBufferAllocator
    ) -> ByteBuffer {
        let prefix = prefixes[kind.rawValue]
        let todoID = todoIDs.isEmpty ? [] : todoIDs[todo % todoIDs.count]
        var buffer = allocator.buffer(capacity: prefix.count + todoID.count + subtitleFiller + 128)
        buffer.writeBytes(prefix)
        buffer.writeString(String(id))
        switch kind {
        case .list, .new, .ping:
            buffer.writeString("}\n")
        case .detail, .toggle, .delete:
            buffer.writeString(#","payload":{"todo":{"id":""#)
            buffer.writeBytes(todoID)
            buffer.writeString("\"}}}\n")
        case .update, .restore:
            buffer.writeString(#","payload":{"todo":{"id":""#)
            buffer.writeBytes(todoID)
            buffer.writeString(#""},"title":"t","subtitle":""#)
            buffer.writeDigits(counter, count: Self.counterDigits)
            buffer.writeRepeatingByte(UInt8(ascii: "x"), count: subtitleFiller)
            buffer.writeString(#"","priority":"normal""#)
            if kind == .restore { buffer.writeString(#","deleted":false"#) }
            buffer.writeString("}}\n")
        }
        return buffer
    }
}

extension ByteBuffer {
    /// `value` as exactly `count` decimal digits (leading zeros; higher digits dropped).
    mutating func writeDigits(_ value: UInt64, count: Int) {
        writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
            var rest = value
            var index = count - 1
            while index >= 0 {
                raw[index] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
                index -= 1
            }
            return count
        }
    }
}
