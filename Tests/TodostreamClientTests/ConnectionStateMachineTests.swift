import Testing

@testable import TodostreamClient

/// The machine with the seq as each broadcast's payload.
typealias Machine = ConnectionStateMachine<UInt64>

/// The seqs an action passes on, in order.
func delivered(_ action: Machine.Action) -> [UInt64] {
    switch action {
    case .deliver(_, let broadcasts), .ready(_, _, let broadcasts): return broadcasts.map(\.seq)
    default: return []
    }
}

extension Machine {
    mutating func broadcast(_ seq: UInt64) -> Action { broadcast(seq: seq, payload: seq) }

    /// The connection lost, the backoff waited, a new one made: waiting for its greeting.
    mutating func reconnect(random: Double = 0) {
        _ = disconnected(random: random)
        _ = waited()
        _ = connected()
    }
}

@Suite struct ConnectionStateMachineTests {
    let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(2))

    /// A machine started and connected: waiting for its greeting.
    func connectedMachine(authenticates: Bool) -> Machine {
        var machine = Machine(backoff: backoff, authenticates: authenticates)
        _ = machine.start()
        _ = machine.connected()
        return machine
    }

    @Test func firstConnectionStartsTheStreamAtTheGreeting() {
        var machine = Machine(backoff: backoff, authenticates: false)
        check(machine.start(), .connect)
        check(machine.connected(), .none)
        check(machine.hello(epoch: "e1", seq: 40), .ready(resumed: false, reset: nil, deliver: []))
        #expect(machine.isReady)
        #expect(machine.epoch == "e1")
        #expect(machine.lastSeq == 40)
    }

    @Test func reconnectResumesAfterTheLastSeqSeen() {
        var machine = connectedMachine(authenticates: false)
        _ = machine.hello(epoch: "e1", seq: 40)
        check(delivered(machine.broadcast(41)), [41])
        check(delivered(machine.broadcast(42)), [42])
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
        check(delivered(machine.broadcast(43)), [43])
        check(machine.broadcast(43), .none)
        check(machine.resumed(), .ready(resumed: true, reset: nil, deliver: []))
        #expect(machine.lastSeq == 43)
    }

    /// A session subscribed before `authenticated` (a WebSocket whose upgrade token was taken,
    /// a monitor token on TCP) gets live broadcasts then: they must not move the point the
    /// resume starts after, and the replay skips them (protocol §5), so they are held and
    /// passed on after the ones they follow.
    @Test func aLiveBroadcastBeforeAuthenticationDoesNotMoveTheResumePoint() {
        var machine = connectedMachine(authenticates: true)
        _ = machine.hello(epoch: "e", seq: 57)
        check(machine.authenticated(), .ready(resumed: false, reset: nil, deliver: []))
        machine.reconnect(random: 0)
        check(machine.hello(epoch: "e", seq: 60), .sendAuth)
        check(machine.broadcast(61), .none)
        check(machine.authenticated(), .sendResume(epoch: "e", after: 57))
        check(delivered(machine.broadcast(58)), [58])
        check(delivered(machine.broadcast(59)), [59])
        check(delivered(machine.broadcast(60)), [60, 61])
        check(machine.resumed(), .ready(resumed: true, reset: nil, deliver: []))
        check(machine.lastSeq, 61)
        check(machine.broadcast(61), .none)
        check(delivered(machine.broadcast(62)), [62])
    }

    /// Each seq is passed on once across reconnects, a connection lost mid-replay included.
    @Test func aLiveBroadcastBeforeTheReplayIsPassedOnOnceAfterIt() {
        var machine = Machine(backoff: backoff, authenticates: true)
        var passedOn: [UInt64] = []
        _ = machine.start()
        _ = machine.connected()
        _ = machine.hello(epoch: "e", seq: 10)
        _ = machine.authenticated()
        machine.reconnect(random: 0)
        _ = machine.hello(epoch: "e", seq: 14)
        check(machine.authenticated(), .sendResume(epoch: "e", after: 10))
        // 15 slips in live before the replay of 11...14: held until 14 has come.
        check(machine.broadcast(15), .none)
        passedOn += delivered(machine.broadcast(11))
        passedOn += delivered(machine.broadcast(12))
        check(passedOn, [11, 12])
        check(machine.lastSeq, 12)
        // Lost mid-replay: the next resume starts after the unbroken run, and what was held
        // comes again with the replay.
        machine.reconnect(random: 0)
        _ = machine.hello(epoch: "e", seq: 15)
        check(machine.authenticated(), .sendResume(epoch: "e", after: 12))
        check(machine.broadcast(12), .none)
        passedOn += delivered(machine.broadcast(13))
        check(machine.broadcast(16), .none)
        passedOn += delivered(machine.broadcast(14))
        passedOn += delivered(machine.broadcast(15))
        passedOn += delivered(machine.resumed())
        check(machine.lastSeq, 16)
        check(machine.broadcast(16), .none)
        passedOn += delivered(machine.broadcast(17))
        check(passedOn, [11, 12, 13, 14, 15, 16, 17])
    }

    /// What is still held when the resume is answered goes then, in seq order.
    @Test func theResumeAnswerReleasesWhatIsHeld() {
        var machine = connectedMachine(authenticates: false)
        _ = machine.hello(epoch: "e", seq: 10)
        machine.reconnect(random: 0)
        _ = machine.hello(epoch: "e", seq: 10)
        check(machine.broadcast(13), .none)
        check(machine.broadcast(12), .none)
        check(machine.broadcast(12), .none)
        check(delivered(machine.resumed()), [12, 13])
        check(machine.lastSeq, 13)
    }

    /// Past `holdCapacity` the held broadcasts are given up like a gap, never silently.
    @Test func overflowingTheHoldIsAReset() {
        var machine = Machine(backoff: backoff, authenticates: false, holdCapacity: 2)
        _ = machine.start()
        _ = machine.connected()
        _ = machine.hello(epoch: "e", seq: 10)
        machine.reconnect(random: 0)
        check(machine.hello(epoch: "e", seq: 10), .sendResume(epoch: "e", after: 10))
        check(machine.broadcast(21), .none)
        check(machine.broadcast(20), .none)
        check(machine.broadcast(22), .deliver(reset: 22, []))
        check(machine.heldCount, 0)
        check(machine.broadcast(11), .none)
        check(machine.resumed(), .ready(resumed: true, reset: nil, deliver: []))
        check(delivered(machine.broadcast(23)), [23])
    }

    @Test func gapAnsweringAResumeIsAReset() {
        var machine = connectedMachine(authenticates: false)
        _ = machine.hello(epoch: "e1", seq: 5)
        machine.reconnect(random: 0.5)
        check(machine.hello(epoch: "e2", seq: 9), .sendResume(epoch: "e1", after: 5))
        // A live broadcast after the gap's seq is passed on after the reset.
        check(machine.broadcast(10), .none)
        check(
            machine.gap(epoch: "e2", seq: 9, answersResume: true),
            .ready(resumed: true, reset: 9, deliver: [Machine.Broadcast(seq: 10, payload: 10)])
        )
        #expect(machine.epoch == "e2")
        #expect(machine.lastSeq == 10)
    }

    /// A live gap (several daemons sharing the database) is a reset and nothing more: the
    /// connection is not made ready again (which would send the outbox again), whatever the
    /// state it comes in.
    @Test func aLiveGapIsAResetOnly() {
        var machine = connectedMachine(authenticates: true)
        _ = machine.hello(epoch: "e", seq: 5)
        // On a first connection, authenticating: where the stream starts moves.
        check(machine.gap(epoch: "e", seq: 8, answersResume: false), .none)
        check(machine.authenticated(), .ready(resumed: false, reset: nil, deliver: []))
        check(machine.lastSeq, 8)
        // Ready: a reset, and the connection stays ready.
        check(machine.gap(epoch: "e", seq: 20, answersResume: false), .deliver(reset: 20, []))
        #expect(machine.isReady)
        check(machine.lastSeq, 20)
        // Authenticating on a later connection: the resume starts after the gap.
        machine.reconnect(random: 0)
        _ = machine.hello(epoch: "e", seq: 30)
        check(machine.gap(epoch: "e", seq: 25, answersResume: false), .deliver(reset: 25, []))
        check(machine.authenticated(), .sendResume(epoch: "e", after: 25))
        // Resuming: a reset, and the resume goes on; its answer makes the connection ready.
        check(machine.gap(epoch: "e", seq: 28, answersResume: false), .deliver(reset: 28, []))
        #expect(!machine.isReady)
        check(delivered(machine.broadcast(29)), [29])
        check(machine.resumed(), .ready(resumed: true, reset: nil, deliver: []))
    }

    /// A broadcast too large to read is given up like a gap at its seq; one whose seq is not
    /// known makes the caller refetch from where the stream stands.
    @Test func anUnreadableBroadcastIsAReset() {
        var machine = connectedMachine(authenticates: false)
        _ = machine.hello(epoch: "e", seq: 10)
        check(machine.unreadable(seq: 11), .deliver(reset: 11, []))
        check(machine.unreadable(seq: nil), .deliver(reset: 11, []))
        machine.reconnect(random: 0)
        _ = machine.hello(epoch: "e", seq: 14)
        check(machine.broadcast(13), .none)
        // The replay's 12 is unreadable: the run goes on after it.
        check(machine.unreadable(seq: 12), .deliver(reset: 12, [Machine.Broadcast(seq: 13, payload: 13)]))
        check(delivered(machine.broadcast(14)), [14])
        // A stream that cannot be resumed starts again on the next connection.
        machine.forgetPosition()
        machine.reconnect(random: 0)
        check(machine.hello(epoch: "e", seq: 20), .ready(resumed: false, reset: nil, deliver: []))
    }

    @Test func backoffGrowsWhileConnectsFailAndResetsOnceReady() {
        var machine = Machine(backoff: backoff, authenticates: false)
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
        var machine = connectedMachine(authenticates: false)
        _ = machine.hello(epoch: "e", seq: 0)
        machine.draining(reconnectAfterMilliseconds: 1234)
        check(machine.disconnected(random: 0), .wait(.milliseconds(1234)))
        _ = machine.waited()
        // The hint was used up: a failed connect backs off as usual.
        check(machine.disconnected(random: 0), .wait(.milliseconds(100)))
    }

    @Test func authenticationComesBeforeResume() {
        var machine = connectedMachine(authenticates: true)
        check(machine.hello(epoch: "e", seq: 3), .sendAuth)
        #expect(!machine.isReady)
        check(machine.authenticated(), .ready(resumed: false, reset: nil, deliver: []))
        machine.reconnect(random: 0)
        check(machine.hello(epoch: "e", seq: 8), .sendAuth)
        check(machine.authenticated(), .sendResume(epoch: "e", after: 3))
    }

    @Test func closeStopsEverything() {
        var machine = Machine(backoff: backoff, authenticates: false)
        _ = machine.start()
        check(machine.close(), .stop)
        check(machine.close(), .none)
        check(machine.disconnected(random: 0), .none)
        check(machine.waited(), .none)
        #expect(machine.isClosed)
    }

    @Test func outOfOrderInputsAreIgnored() {
        var machine = Machine(backoff: backoff, authenticates: false)
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

    /// A first wait of zero would make every wait zero (a reconnect loop without a pause): it
    /// is taken as the smallest one. And a wait is made in one step, whatever the attempt.
    @Test func noWaitIsZeroAndAnyAttemptIsAnswered() {
        for backoff in [Backoff(initial: .zero), Backoff(initial: .seconds(-1), maximum: .zero)] {
            #expect(backoff.delay(attempt: 0, random: 1) == .milliseconds(1))
            #expect(backoff.delay(attempt: 1_000_000, random: 0) > .zero)
        }
        var changed = Backoff()
        changed.initial = .zero
        #expect(changed.delay(attempt: 0, random: 1) == .milliseconds(1))
        let long = Backoff(initial: .seconds(3600), maximum: .seconds(86_400))
        #expect(long.delay(attempt: Int.max, random: 1) == .seconds(86_400))
        #expect(long.delay(attempt: 4, random: 1) == .seconds(57_600))
        #expect(long.delay(attempt: -3, random: 1) == .seconds(3600))
    }
}
