/// The ids of the frames sent on the current connection whose answers have not come yet, in
/// the order they went out. The daemon answers a connection's frames in order (protocol §3),
/// so the one answer that cannot carry `re` — `frame_too_large`: the daemon dropped the frame
/// before it read its `id` — belongs to the oldest of them. Pure: the owner reports what it
/// sent and what came back.
///
/// Bounded by `capacity`: past it the oldest ids are forgotten, and until an answer names an
/// id still kept (every frame before it is then answered) an answer without `re` is not
/// matched to anything.
struct AnswerOrder: Sendable {
    let capacity: Int
    private(set) var ids: [String] = []
    /// Whether the oldest id kept is the next frame the daemon answers.
    private(set) var certain = true

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// A frame with `id` went out on the connection.
    mutating func sent(_ id: String) {
        if ids.count >= capacity {
            ids.removeFirst()
            certain = false
        }
        ids.append(id)
    }

    /// A frame carrying `re` arrived: that frame is answered, and so is every frame sent
    /// before it.
    mutating func answered(_ re: String) {
        guard let index = ids.firstIndex(of: re) else { return }
        ids.removeSubrange(...index)
        certain = true
    }

    /// An answer without `re` arrived: the id of the frame it answers, if it is known.
    mutating func answeredWithoutID() -> String? {
        guard certain, !ids.isEmpty else { return nil }
        return ids.removeFirst()
    }

    /// The connection is gone: its frames will never be answered on it.
    mutating func connectionLost() {
        ids.removeAll()
        certain = true
    }
}
