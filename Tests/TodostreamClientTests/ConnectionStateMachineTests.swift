import Testing

@testable import TodostreamClient

@Suite struct ConnectionStateMachineTests {
    let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(2))

    @Test func firstConnectionStartsTheStreamAtTheGreeting() {
        var machine = ConnectionStateMachine(backoff: backoff, authenticates: false)
        check(machine.start(), .connect)
        check(machine.connected(), .none)
        check(machine.hello(epoch: "e1", seq: 40), .ready(resumed: false, reset: nil))
        #expect(machine.isReady)
        #expect(machine.epoch == "e1")
        #expect(machine.lastSeq == 40)
    }

    @Test func reconnectResumesAfterTheLastSeqSeen() {
        var machine = ConnectionStateMachine(backoff: backoff, authenticates: false)
        _ = machine.start()
        _ = machine.connected()
        _ = machine.hello(epoch: "e1", seq: 40)
        check(machine.broadcast(seq: 41), true)
        check(machine.broadcast(seq: 42), true)
        guard case .wait(let delay) = machine.disconnected(random: 0) else {
            Issue.record("expected a wait")
            return
        }
        #expect(delay == .milliseconds(50))
        check(machine.waited(), .connect)
        _ = machine.connected()
        check(machine.hello(epoch: "e1", seq: 45), .sendResume(epoch: "e1", after: 42))
        #expect(!machine.isReady)
        // Replayed broadcasts move the position; one seen already is dropped.
        check(machine.broadcast(seq: 43), true)
        check(machine.broadcast(seq: 43), false)
        check(machine.resumed(), .ready(resumed: true, reset: nil))
        #expect(machine.lastSeq == 43)
    }

    @Test func aLiveBroadcastBeforeTheReplayDropsNothing() {
        var machine = ConnectionStateMachine(backoff: backoff, authenticates: true)
        _ = machine.start()
        _ = machine.connected()
        _ = machine.hello(epoch: "e", seq: 10)
        _ = machine.authenticated()
        _ = machine.disconnected(random: 0)
        _ = machine.waited()
        _ = machine.connected()
        _ = machine.hello(epoch: "e", seq: 14)
        check(machine.authenticated(), .sendResume(epoch: "e", after: 10))
        // 15 slips in live before the replay of 11...14; all of them are passed on.
        check(machine.broadcast(seq: 15), true)
        check(machine.broadcast(seq: 11), true)
        check(machine.broadcast(seq: 12), true)
        check(machine.lastSeq, 12)
        // Lost mid-replay: the next resume starts after the unbroken run.
        _ = machine.disconnected(random: 0)
        _ = machine.waited()
        _ = machine.connected()
        _ = machine.hello(epoch: "e", seq: 15)
        check(machine.authenticated(), .sendResume(epoch: "e", after: 12))
        check(machine.broadcast(seq: 12), false)
        check(machine.broadcast(seq: 13), true)
        check(machine.broadcast(seq: 16), true)
        check(machine.broadcast(seq: 14), true)
        check(machine.broadcast(seq: 15), true)
        check(machine.resumed(), .ready(resumed: true, reset: nil))
        check(machine.lastSeq, 16)
        check(machine.broadcast(seq: 16), false)
        check(machine.broadcast(seq: 17), true)
    }

    @Test func gapAnsweringAResumeIsAReset() {
        var machine = ConnectionStateMachine(backoff: backoff, authenticates: false)
        _ = machine.start()
        _ = machine.connected()
        _ = machine.hello(epoch: "e1", seq: 5)
        _ = machine.disconnected(random: 0.5)
        _ = machine.waited()
        _ = machine.connected()
        check(machine.hello(epoch: "e2", seq: 9), .sendResume(epoch: "e1", after: 5))
        check(machine.gap(epoch: "e2", seq: 9), .ready(resumed: true, reset: 9))
        #expect(machine.epoch == "e2")
        #expect(machine.lastSeq == 9)
        // A live gap (several daemons) resets too, and keeps the connection ready.
        check(machine.gap(epoch: "e2", seq: 20), .ready(resumed: true, reset: 20))
        #expect(machine.isReady)
    }

    @Test func backoffGrowsWhileConnectsFailAndResetsOnceReady() {
        var machine = ConnectionStateMachine(backoff: backoff, authenticates: false)
        _ = machine.start()
        var delays: [Duration] = []
        for _ in 0..<7 {
            guard case .wait(let delay) = machine.disconnected(random: 1) else {
                Issue.record("expected a wait")
                return
            }
            delays.append(delay)
            check(machine.waited(), .connect)
        }
        #expect(
            delays == [100, 200, 400, 800, 1600, 2000, 2000].map { Duration.milliseconds($0) }
        )
        _ = machine.connected()
        _ = machine.hello(epoch: "e", seq: 0)
        check(machine.disconnected(random: 1), .wait(.milliseconds(100)))
    }

    @Test func drainingSetsTheNextWaitOnce() {
        var machine = ConnectionStateMachine(backoff: backoff, authenticates: false)
        _ = machine.start()
        _ = machine.connected()
        _ = machine.hello(epoch: "e", seq: 0)
        machine.draining(reconnectAfterMilliseconds: 1234)
        check(machine.disconnected(random: 0), .wait(.milliseconds(1234)))
        _ = machine.waited()
        // The hint was used up: a failed connect backs off as usual.
        check(machine.disconnected(random: 0), .wait(.milliseconds(100)))
    }

    @Test func authenticationComesBeforeResume() {
        var machine = ConnectionStateMachine(backoff: backoff, authenticates: true)
        _ = machine.start()
        _ = machine.connected()
        check(machine.hello(epoch: "e", seq: 3), .sendAuth)
        #expect(!machine.isReady)
        check(machine.authenticated(), .ready(resumed: false, reset: nil))
        _ = machine.disconnected(random: 0)
        _ = machine.waited()
        _ = machine.connected()
        check(machine.hello(epoch: "e", seq: 8), .sendAuth)
        check(machine.authenticated(), .sendResume(epoch: "e", after: 3))
    }

    @Test func closeStopsEverything() {
        var machine = ConnectionStateMachine(backoff: backoff, authenticates: false)
        _ = machine.start()
        check(machine.close(), .stop)
        check(machine.close(), .none)
        check(machine.disconnected(random: 0), .none)
        check(machine.waited(), .none)
        #expect(machine.isClosed)
    }

    @Test func outOfOrderInputsAreIgnored() {
        var machine = ConnectionStateMachine(backoff: backoff, authenticates: false)
        check(machine.hello(epoch: "e", seq: 1), .none)
        check(machine.resumed(), .none)
        check(machine.waited(), .none)
        _ = machine.start()
        check(machine.resumed(), .none)
    }
}

@Suite struct BackoffTests {
    @Test func jitterStaysBetweenHalfAndAllOfTheCeiling() {
        let backoff = Backoff(initial: .milliseconds(250), maximum: .seconds(30))
        for attempt in 0..<20 {
            let ceiling = min(Duration.milliseconds(250) * (1 << min(attempt, 10)), .seconds(30))
            #expect(backoff.delay(attempt: attempt, random: 0) == ceiling / 2)
            #expect(backoff.delay(attempt: attempt, random: 1) == ceiling)
            let middle = backoff.delay(attempt: attempt, random: 0.5)
            #expect(middle > ceiling / 2 && middle < ceiling)
        }
    }
}
