import EventStream
import NIOCore

/// The joined rows of a large list answer, kept by one event loop so that every connection on
/// it answered with the same list holds the same bytes.
///
/// A list answer was made whole for each request: a store of 2,000 todos with 10,000-character
/// subtitles makes a 25 MB answer, and 60 connections that asked for it and read slowly (or not
/// at all) held 1.5 GB between them. Now the answer of a list with at least `threshold` bytes
/// of rows goes out as three parts: its own head (`{"type":…,"re":…,"payload":`), the rows
/// joined (`[…,…]`), the same buffer for every answer of that list on this loop, and `}\n`.
/// Whether two answers hold the same list is told by the rows themselves: the row cache hands
/// every list answered while no todo changed the same array (its storage, not a copy), so the
/// array kept here is compared by its storage, which it keeps alive (its address cannot be
/// reused meanwhile). Only the last list is kept: a list that changed is joined anew, once per
/// loop. Not thread-safe: one per loop (`Shard`), used only on it.
struct SharedListBody {
    /// Lists whose rows are smaller than this are written whole into each answer, as before
    /// (three buffers a frame cost more than one copy of a few pages).
    static let threshold = 64 * 1024

    /// The size of the slices the rows go to a TLS connection in: TLS encrypts what it is
    /// handed at once, into buffers of the connection's own, so it is handed slices of the
    /// shared storage only as its channel takes them.
    static let tlsSlice = 64 * 1024

    private var rows: [[UInt8]] = []
    private var joined: ByteBuffer?

    /// How many times a list was joined (for tests: the same list twice joins once).
    private(set) var joins = 0

    /// The rows of `elements` joined as a JSON array, shared with the last answer of the same
    /// list; nil when they take less than `threshold` bytes.
    mutating func body(for elements: [[UInt8]]) -> ByteBuffer? {
        let bytes = OutboundFrame.arrayBytes(elements)
        guard bytes >= Self.threshold else { return nil }
        if let joined, Self.sameStorage(rows, elements) { return joined }
        var buffer = ByteBufferAllocator().buffer(capacity: bytes)
        buffer.writeInteger(UInt8(ascii: "["))
        elements.withUnsafeBufferPointer { elements in
            for index in elements.indices {
                if index > 0 { buffer.writeInteger(UInt8(ascii: ",")) }
                buffer.writeBytes(elements[index])
            }
        }
        buffer.writeInteger(UInt8(ascii: "]"))
        rows = elements
        joined = buffer
        joins += 1
        return buffer
    }

    /// Whether two arrays are one storage (so one list, unchanged): their elements at the same
    /// address, as many of them.
    private static func sameStorage(_ a: [[UInt8]], _ b: [[UInt8]]) -> Bool {
        a.count == b.count
            && a.withUnsafeBufferPointer { a in b.withUnsafeBufferPointer { b in a.baseAddress == b.baseAddress } }
    }

    /// The frame of `reply`: its head and the rest when its payload is a large list's rows
    /// (shared), else the whole frame and no rest.
    mutating func frame(of reply: PendingReply) -> (head: ByteBuffer, rest: [ByteBuffer]) {
        guard case .array(let rows) = reply.body, let body = body(for: rows) else { return (reply.frame(), []) }
        return Self.frameParts(type: reply.type, correlation: reply.correlation, mark: reply.mark, body: body)
    }

    /// `part` in slices of at most `tlsSlice` bytes (of its storage, not copies).
    static func slices(of part: ByteBuffer) -> [ByteBuffer] {
        var rest = part
        var slices: [ByteBuffer] = []
        while rest.readableBytes > 0, let slice = rest.readSlice(length: min(tlsSlice, rest.readableBytes)) {
            slices.append(slice)
        }
        return slices
    }

    /// The frame of a reply whose payload is `body` (a list's rows joined): its head, the body,
    /// and its end, written in this order they are the frame `OutboundFrame.event` makes.
    static func frameParts(
        type: String,
        correlation: CorrelationID?,
        mark: MutationMark?,
        body: ByteBuffer
    ) -> (head: ByteBuffer, rest: [ByteBuffer]) {
        // An empty payload makes `…,"payload":}\n`: the head is all but its last two bytes.
        var head = OutboundFrame.event(seq: nil, type: type, correlation: correlation, mark: mark, body: .payload([]))
        head.moveWriterIndex(to: head.writerIndex - 2)
        return (head, [body, Self.end])
    }

    private static let end = ByteBuffer(string: "}\n")
}
