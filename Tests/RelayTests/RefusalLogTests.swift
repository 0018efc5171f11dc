import NIOCore
import Testing

@testable import Relay

/// A flood of refused connections writes one line per interval, counting the rest.
@Suite struct RefusalLogTests {
    @Test func theFirstIsLoggedThenOneLinePerIntervalWithTheCount() {
        var log = RefusalLog(interval: .seconds(10))
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        #expect(log.refused(at: start) == .log(leftOut: 0))
        for step in 1...500 {
            #expect(log.refused(at: start + .milliseconds(Int64(step))) == .leaveOut)
        }
        #expect(log.refused(at: start + .seconds(10)) == .log(leftOut: 500))
        #expect(log.refused(at: start + .seconds(11)) == .leaveOut)
        // Quiet for a while: the next one is logged at once, with what was left out.
        #expect(log.refused(at: start + .seconds(60)) == .log(leftOut: 1))
    }
}
