import Testing

@testable import Relay

@Suite struct AnswerAdmissionTests {
    private let list = 1
    private let toggle = 2

    /// One request of `type` answered alone, its replies `bytes` long.
    private func answerAlone(_ admission: inout AnswerAdmission, type: Int, bytes: Int) {
        admission.submitted(type: type)
        admission.replyWritten(bytes: bytes)
        admission.answered(count: 1)
    }

    @Test func aTypeNotSeenAnsweredNeverJoinsOthers() {
        var admission = AnswerAdmission()
        #expect(!admission.mayJoin(type: list, queuedBytes: 0, budget: 1 << 20))
        admission.submitted(type: list)
        #expect(!admission.mayJoin(type: list, queuedBytes: 0, budget: 1 << 20))
        #expect(admission.expectedBytes == 0)
    }

    @Test func aRequestAnsweredAloneTeachesItsTypesSize() {
        var admission = AnswerAdmission()
        admission.submitted(type: list)
        admission.replyWritten(bytes: 60_000)
        admission.replyWritten(bytes: 40_000)
        admission.answered(count: 1)
        #expect(admission.requestsInFlight == 0)
        // 100,000 bytes expected of each list: two fit in 250,000, three do not.
        #expect(admission.mayJoin(type: list, queuedBytes: 0, budget: 250_000))
        admission.submitted(type: list)
        #expect(admission.expectedBytes == 100_000)
        #expect(admission.mayJoin(type: list, queuedBytes: 0, budget: 250_000))
        admission.submitted(type: list)
        #expect(!admission.mayJoin(type: list, queuedBytes: 0, budget: 250_000))
        // What waits unsent counts too.
        admission.replyWritten(bytes: 200_000)
        admission.answered(count: 2)
        #expect(admission.expectedBytes == 0)
        #expect(!admission.mayJoin(type: list, queuedBytes: 200_000, budget: 250_000))
        #expect(admission.mayJoin(type: list, queuedBytes: 150_000, budget: 250_000))
    }

    @Test func requestsOfOneTypeAnsweredTogetherShareTheirBytes() {
        var admission = AnswerAdmission()
        answerAlone(&admission, type: list, bytes: 10)
        for _ in 0..<3 { admission.submitted(type: list) }
        #expect(admission.expectedBytes == 30)
        admission.replyWritten(bytes: 3_000)
        admission.answered(count: 3)
        // Each brought 1,000: the next is expected to bring as much.
        admission.submitted(type: list)
        #expect(admission.expectedBytes == 1_000)
    }

    @Test func aNewTypeAnsweredWithKnownOnesTakesWhatTheyDidNotBring() {
        var admission = AnswerAdmission()
        answerAlone(&admission, type: toggle, bytes: 0)
        // A list goes alone, toggles (known: nothing) join it.
        admission.submitted(type: list)
        #expect(admission.mayJoin(type: toggle, queuedBytes: 0, budget: 100))
        admission.submitted(type: toggle)
        admission.replyWritten(bytes: 5_000)
        admission.answered(count: 2)
        #expect(!admission.mayJoin(type: list, queuedBytes: 0, budget: 4_999))
        #expect(admission.mayJoin(type: list, queuedBytes: 0, budget: 5_000))
    }

    @Test func moreAnsweredThanInFlightIsIgnored() {
        var admission = AnswerAdmission()
        admission.answered(count: 3)
        #expect(admission.requestsInFlight == 0)
        admission.submitted(type: list)
        admission.replyWritten(bytes: 7)
        admission.answered(count: 5)
        #expect(admission.requestsInFlight == 0)
        #expect(admission.expectedBytes == 0)
        #expect(admission.mayJoin(type: list, queuedBytes: 0, budget: 7))
    }
}
