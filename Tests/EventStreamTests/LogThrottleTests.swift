import Testing

@testable import EventStream

/// A flood of like events (refused connections, failed commits) writes one line per interval,
/// counting the rest.
@Suite struct LogThrottleTests {
    @Test func theFirstIsLoggedThenOneLinePerIntervalWithTheCount() {
        var log = LogThrottle(interval: .seconds(10))
        let start = ContinuousClock.now
        #expect(log.happened(at: start) == .log(leftOut: 0))
        for step in 1...500 {
            #expect(log.happened(at: start + .milliseconds(step)) == .leaveOut)
        }
        #expect(log.happened(at: start + .seconds(10)) == .log(leftOut: 500))
        #expect(log.happened(at: start + .seconds(11)) == .leaveOut)
        // Quiet for a while: the next one is logged at once, with what was left out.
        #expect(log.happened(at: start + .seconds(60)) == .log(leftOut: 1))
    }
}
