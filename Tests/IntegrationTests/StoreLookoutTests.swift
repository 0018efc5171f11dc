import NIOConcurrencyHelpers
import Testing

@testable import todostreamd

/// `/healthz` and `/metrics` ask the store through a `StoreLookout`: a store that does not
/// answer (its thread held by a storage stall) gets the stalled answer after the patience, and is
/// not asked again while the first question waits; callers that come meanwhile share its answer.
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

    /// Callers that come while a question is on its way share its answer: two health checks
    /// a moment apart both get the store's answer, not one of them "down" at once.
    @Test func callersThatComeTogetherShareTheAnswer() async {
        let lookout = StoreLookout(initial: true, patience: .seconds(30))
        let gate = Gate()
        async let first = lookout.value({ await gate.ask() }, stalled: { _ in false })
        while gate.asked.withLockedValue({ $0 }) == 0 { await Task.yield() }
        async let second = lookout.value({ await gate.ask() }, stalled: { _ in false })
        async let third = lookout.value({ await gate.ask() }, stalled: { _ in false })
        // The later callers are waiting on the first question (none of them asked again).
        try? await Task.sleep(for: .milliseconds(50))
        gate.open(true)
        let answers = await [first, second, third]
        #expect(answers == [true, true, true])
        #expect(gate.asked.withLockedValue { $0 } == 1)
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
