import EventStream
import NIOCore

/// A piece of a batch posted to one event loop's shard, in order.
enum ShardInboxItem: Sendable {
    case broadcast(PendingBroadcast)
    /// A broadcast that only the session on this loop that caused it takes (its copy with
    /// `re`): when it was posted, no session of the loop could take broadcasts.
    case ownCopy(PendingBroadcast)
    /// A reply for one session, in its place among the broadcasts.
    case reply(SessionID, PendingReply, typeIndex: Int)
    /// A copy for every monitor subscribed to the type but the session that caused it.
    case monitor(ByteBuffer, typeIndex: Int, except: SessionID)
    /// One request of the session has had every answer.
    case answered(SessionID)
    /// Every seq through this one was given up: sessions are told `gap`.
    case gap(UInt64)
    /// Anything else that must keep its place (a control frame to everyone).
    case run(@Sendable () -> Void)
}

/// The inbox of one event loop's shard as a state machine: the hub posts to it from any thread
/// and the loop takes what was posted, both under the shard's lock. It returns actions; `Shard`
/// runs them. It does no I/O.
///
/// **Nobody listening.** A broadcast goes to every subscriber, so each loop gets each one, and
/// the loop wakes for it. While no session of a loop could take a broadcast (none subscribed
/// to anything, none starting), the loop is not woken for it: it is left out, and only its
/// seq is kept (`skippedThrough`), so that a session starting later is greeted with the seq of
/// the newest broadcast all the same, and a resume replays through it. The session that caused
/// a broadcast still gets its copy with `re` (`ownCopy`), which nobody else of the loop takes.
///
/// Why this keeps every session's stream whole: the counts change under the same lock as the
/// posts, so each post is either before a session started or subscribed (and then it is not
/// that session's to take), or after (and then it is kept). Broadcasts are left out only while
/// none is queued: a session greeted with `skippedThrough` then never gets a broadcast with an
/// older seq out of the queue.
struct ShardInboxStateMachine: Sendable {
    enum PostAction: Hashable, Sendable {
        /// Schedule the loop's pass over the inbox.
        case schedule
        /// Nothing to do: a pass is scheduled already, or nothing was kept.
        case none
    }

    private(set) var items: [ShardInboxItem] = []
    /// A pass over the inbox is scheduled on the loop.
    private var scheduled = false
    /// Broadcasts in `items`.
    private var broadcastsQueued = 0
    /// Sessions registered whose subscriptions are not settled yet.
    private var starting = 0
    /// Sessions subscribed to at least one type.
    private var subscribed = 0
    /// The newest seq left out.
    private(set) var skippedThrough: UInt64

    /// - Parameter head: the newest seq already broadcast when the shard starts.
    init(head: UInt64) {
        skippedThrough = head
    }

    /// Whether a session of the loop may take a broadcast posted now.
    var listening: Bool { starting + subscribed > 0 || broadcastsQueued > 0 }

    /// The hub posts a batch's items for the loop at `shard` (the loop makes the frames of what
    /// it keeps when it takes them).
    mutating func post(_ posted: [ShardInboxItem], shard: Int) -> PostAction {
        let listening = self.listening
        var added = false
        for item in posted {
            switch item {
            case .broadcast(let frame) where listening:
                items.append(.broadcast(frame))
                broadcastsQueued += 1
                added = true
            case .broadcast(let frame):
                if frame.origin != nil, frame.originShard == shard {
                    // Only the requester's copy is written from it, once, by one session: the
                    // loop makes that frame alone, so a lone requester's save costs no frame
                    // for everyone.
                    items.append(.ownCopy(frame))
                    added = true
                } else {
                    skippedThrough = max(skippedThrough, frame.seq)
                }
            default:
                items.append(item)
                added = true
            }
        }
        guard added, !scheduled else { return .none }
        scheduled = true
        return .schedule
    }

    /// The loop's pass takes everything posted.
    mutating func take() -> [ShardInboxItem] {
        scheduled = false
        broadcastsQueued = 0
        defer { items = [] }
        return items
    }

    /// A session registers on the loop; returns the seq it starts after. `fannedOut` is the
    /// newest broadcast the loop has fanned out.
    mutating func register(fannedOut: UInt64) -> UInt64 {
        starting += 1
        return head(fannedOut: fannedOut)
    }

    /// A session registered earlier has its first subscriptions (perhaps none).
    mutating func settled() {
        starting = max(0, starting - 1)
    }

    /// A session of the loop went from subscribed to something (`was`) to `now`.
    mutating func subscriptionChanged(was: Bool, now: Bool) {
        guard was != now else { return }
        subscribed = max(0, subscribed + (now ? 1 : -1))
    }

    /// The newest seq this loop has fanned out or left out.
    func head(fannedOut: UInt64) -> UInt64 {
        max(fannedOut, skippedThrough)
    }
}
