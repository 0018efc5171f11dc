import NIOConcurrencyHelpers
import Testing

@testable import todostreamd

/// `/healthz` and `/metrics` ask the store through a `StoreLookout`: a store that does not
/// answer (its thread held by a storage stall) gets the stalled answer after the patience, and is
/// not asked again while the first question waits.
@Suite struct StoreLookoutTests {
    /// A question that is answered only when the test says so.
    final class Gate: Sendable {
        private let waiting = NIOLockedValueBox<[CheckedContinuation<Bool, Never>]>([])
        let asked = NIOLockedValueBox(0)

        func ask() async -> Bool {
            asked.withLockedValue { $0 += 1 }
            return await withCheckedContinuation { continuation in
                waiting.withLockedValue { $0.append(continuation) }
            }
        }

        func open(_ answer: Bool) {
            let all = waiting.withLockedValue { list in
                defer { list = [] }
                return list
            }
            for continuation in all {
                continuation.resume(returning: answer)
            }
        }
    }

    @Test func aStoreThatAnswersIsAskedEachTime() async {
        let lookout = StoreLookout(initial: true, patience: .seconds(30))
        #expect(await lookout.value({ false }, stalled: { _ in true }) == false)
        #expect(await lookout.value({ true }, stalled: { _ in false }) == true)
    }

    @Test func aStalledStoreGetsTheStalledAnswerAndOneQuestionOnly() async {
        let lookout = StoreLookout(initial: true, patience: .milliseconds(50))
        let gate = Gate()
        #expect(await lookout.value({ await gate.ask() }, stalled: { _ in false }) == false)
        // Still waiting on the store: answered at once, without a second question.
        let clock = ContinuousClock()
        let started = clock.now
        #expect(await lookout.value({ await gate.ask() }, stalled: { _ in false }) == false)
        #expect(clock.now - started < .seconds(5))
        #expect(gate.asked.withLockedValue { $0 } == 1)
        // The store answers again: the next question reaches it.
        gate.open(true)
        var answer = false
        while !answer {
            answer = await lookout.value({ true }, stalled: { _ in false })
        }
        #expect(answer)
    }
}
