import Testing

@testable import TodoStore

/// One lease raced against its timeouts and its server's retirement (`LeaseRace`): exactly one
/// answer reaches the caller, a connection that comes too late runs nothing, and a body given up
/// on has its connection closed.
@Suite struct LeaseRaceTests {
    @Test func aLeaseThatGetsItsConnectionRunsAndIsAnsweredByItsBody() {
        var race = LeaseRace(answer: "caller")
        #expect(!race.entered && !race.answered)
        #expect(race.connected() == .run)
        #expect(race.entered && !race.answered)
        #expect(race.finished() == "caller")
        #expect(race.answered && race.entered)
        #expect(race.finished() == nil, "answered once")
        #expect(race.giveUp() == .none, "a timer that fires after the answer does nothing")
    }

    @Test func givenUpWhileWaitingTheCallerIsAnsweredAndALateConnectionRunsNothing() {
        var race = LeaseRace(answer: "caller")
        #expect(race.giveUp() == .answerAndStopWaiting("caller"))
        #expect(race.answered && !race.entered, "not entered: may be tried on another server")
        #expect(race.connected() == .refuse)
        #expect(!race.entered)
        #expect(race.finished() == nil, "the lease's own failure answers no one")
        #expect(race.giveUp() == .none)
    }

    @Test func givenUpWhileRunningTheConnectionIsClosedAndTheBodysResultDropped() {
        var race = LeaseRace(answer: "caller")
        #expect(race.connected() == .run)
        #expect(race.giveUp() == .answerAndClose("caller"))
        #expect(race.answered && race.entered, "entered: never tried again elsewhere")
        #expect(race.giveUp() == .none, "a retirement after a timeout answers no one")
        #expect(race.finished() == nil, "the body's late result is dropped")
    }

    @Test func aFailureToGetAConnectionAnswersTheCaller() {
        var race = LeaseRace(answer: "caller")
        #expect(race.finished() == "caller")
        #expect(!race.entered)
        #expect(race.connected() == .refuse)
    }

    @Test func aCancelledCallerStopsWaitingForAConnectionButNotForAStartedBody() {
        var waiting = LeaseRace(answer: "caller")
        #expect(waiting.cancelled() == .answerAndStopWaiting("caller"))
        #expect(waiting.connected() == .refuse)
        var running = LeaseRace(answer: "caller")
        #expect(running.connected() == .run)
        #expect(running.cancelled() == .none, "a commit under way is not cut short")
        #expect(running.finished() == "caller", "its body answers")
    }
}
