import NIOCore

/// Bounds the bytes of the answers a session's requests in flight may bring, so that a client
/// that pipelines requests with large answers (lists) and does not read them cannot make the
/// daemon hold more than about the outbound bound for it.
///
/// A request joins those in flight only when the answers they are expected to bring, with its
/// own, fit in the budget beside what already waits unsent. What a request type's answer
/// brings is learnt from this session's own answers: the reply bytes written between two
/// answered marks, shared among the requests answered then. A type not seen answered yet
/// never joins others: it goes alone (when nothing is in flight), and its answer teaches its
/// size. A request alone is always admitted, so every client makes progress; the bound is
/// then the budget plus one answer.
struct AnswerAdmission {
    /// The requests in flight, in the order sent: type index and the bytes expected of it.
    private var inFlight = CircularBuffer<(type: Int, expected: Int)>()
    /// The sum of `expected` over `inFlight`.
    private(set) var expectedBytes = 0
    /// Reply bytes written since the last answered mark, not yet put down to a request.
    private var unattributed = 0
    /// The reply bytes one request of each type brought, as last learnt.
    private var learnt: [Int: Int] = [:]

    var requestsInFlight: Int { inFlight.count }

    /// Whether a request of `type` may join those in flight, with `queuedBytes` waiting unsent
    /// and `budget` bytes allowed for both.
    func mayJoin(type: Int, queuedBytes: Int, budget: Int) -> Bool {
        guard let expected = learnt[type] else { return false }
        return queuedBytes + expectedBytes + expected <= budget
    }

    /// A request of `type` went to the sequencer.
    mutating func submitted(type: Int) {
        let expected = learnt[type] ?? 0
        inFlight.append((type, expected))
        expectedBytes += expected
    }

    /// A reply of `bytes` was written to the session.
    mutating func replyWritten(bytes: Int) {
        unattributed += bytes
    }

    /// `count` requests in flight, the oldest, had every answer.
    mutating func answered(count: Int) {
        let count = min(count, inFlight.count)
        guard count > 0 else { return }
        var types: [Int] = []
        types.reserveCapacity(count)
        var knownBytes = 0
        var unknown = 0
        for _ in 0..<count {
            let request = inFlight.removeFirst()
            expectedBytes -= request.expected
            types.append(request.type)
            if let size = learnt[request.type] { knownBytes += size } else { unknown += 1 }
        }
        let bytes = unattributed
        unattributed = 0
        if let first = types.first, types.allSatisfy({ $0 == first }) {
            // All of one type: each brought an equal share.
            learnt[first] = (bytes + count - 1) / count
        } else if unknown > 0 {
            // Types not seen yet take what the known ones did not bring.
            let share = (max(0, bytes - knownBytes) + unknown - 1) / unknown
            for type in types where learnt[type] == nil { learnt[type] = share }
        }
    }
}
