import NIOCore

/// A client of todostreamd over TCP (newline-delimited JSON, docs/PROTOCOL.md).
///
/// Publishers and requesters send integer ids and keep every request until each frame it
/// causes for its sender has arrived (`RequestKind.expectsReply`, `.expectsBroadcast`), or an
/// error did.
final class DaemonConnection: LineConnection {
    private var seqBase: UInt64 = 0
    private lazy var writer = DaemonRequestWriter(todoIDs: settings.todoIDs, subtitleBytes: settings.payloadBytes)
    private lazy var schedule = RequestSchedule(publish: settings.publish, offset: settings.client * 37)

    /// A request sent and not yet answered.
    private struct Pending {
        var kind: RequestKind
        /// Publisher: the fan-out message (send-time slot) its broadcast is; 0 for none.
        var ordinal: Int
        var awaitingReply: Bool
        var awaitingBroadcast: Bool
    }

    private var pending: [UInt64: Pending] = [:]
    /// The publisher's request ids (its fan-out messages are numbered apart: with --publish
    /// mixed, reads go between them).
    private var lastWireID: UInt64 = 0

    /// Counts the todos the requests went to: the last one's is this modulo the todos
    /// (`DaemonRequestWriter` takes it so).
    private var todo = 0
    /// Creations of this connection's todos sent, and those whose broadcast has arrived.
    private var creationsSent = 0
    private var created = 0
    /// Creations sent and not yet answered at most.
    private static let creationWindow = 32

    override func requestsInFlight() -> Int { pending.count }

    override func handleLine(_ line: UnsafeRawBufferPointer, now: UInt64) {
        if line.hasPrefix(#"{"seq":"#) {
            handleBroadcast(line, now: now)
        } else if line.hasPrefix(#"{"op":""#) {
            handleOp(line, now: now)
        } else if line.hasPrefix(#"{"type":""#) {
            handleReply(line, now: now)
        } else if !line.isEmpty {
            stats.countError("unparsed_frame")
        }
    }

    // MARK: Frames in

    private func handleBroadcast(_ line: UnsafeRawBufferPointer, now: UInt64) {
        guard let (seq, afterSeq) = line.decimal(at: 7) else {
            stats.countError("unparsed_frame")
            return
        }
        let payloadAt = line.firstIndex(of: #","payload":"#, from: afterSeq, limit: 160) ?? min(line.count, 160)
        guard let reAt = line.firstIndex(of: #","re":"#, from: afterSeq, limit: payloadAt) else {
            // Everyone's copy: a fan-out delivery.
            guard mode == .subscriber || mode == .slowSubscriber, seq > seqBase else { return }
            let index = Int(seq - seqBase)
            recordDelivery(sendTime: run.sendTimes.load(index), seq: seq, now: now)
            return
        }
        if let (id, _) = line.decimal(at: reAt + 6) {
            guard var request = pending[id] else { return }
            if mode == .publisher, request.ordinal > 0, seq != seqBase + UInt64(request.ordinal) {
                stats.seqMismatches += 1
            }
            request.awaitingBroadcast = false
            progressed(id: id, request, now: now)
        } else if line.quoted(at: reAt + 7) == "c" {
            // The broadcast of one of this connection's todo creations: setup is done with the
            // last (they are sent one after another on one connection, so it comes last).
            created += 1
            guard created == settings.todoIDs.count else {
                sendCreations()
                return
            }
            if mode == .publisher {
                seqBase = seq
                run.seqBase.store(seq, ordering: .releasing)
            }
            markReady()
        }
    }

    private func handleOp(_ line: UnsafeRawBufferPointer, now: UInt64) {
        guard let name = line.quoted(at: 7) else { return }
        switch name {
        case "hello":
            seqBase = run.seqBase.load(ordering: .acquiring)
            switch mode {
            case .subscriber, .slowSubscriber:
                // Sending a frame first releases the daemon's 250 ms hold of live broadcasts.
                send(#"{"op":"ping","id":"w"}"# + "\n")
            case .publisher:
                sendCreations()
            case .requester:
                if settings.requestersSubscribed {
                    sendCreations()
                } else {
                    send(#"{"op":"unsubscribe","id":"u","types":["Response*"]}"# + "\n")
                }
            case .idle, .requestPublisher:
                markReady()
            }
        case "pong":
            if mode == .subscriber || mode == .slowSubscriber {
                markReady()
            } else {
                // A requester's ping (`--publish ping`).
                replyArrived(line, reBefore: line.count, now: now)
            }
        case "unsubscribed":
            sendCreations()
        case "error":
            handleError(line, now: now)
        default:
            stats.countError("op:\(name)")
        }
    }

    /// A reply: `{"type":T,"re":R,"payload":…}` or with `error`.
    private func handleReply(_ line: UnsafeRawBufferPointer, now: UInt64) {
        let payloadAt = line.firstIndex(of: #","payload":"#, limit: 160) ?? min(line.count, 160)
        if line.firstIndex(of: #","error":{"#, limit: payloadAt) != nil {
            handleError(line, now: now)
            return
        }
        // Replies to the setup (the creation's ResponseUpdateDetailViewModel, "re":"c") need nothing.
        replyArrived(line, reBefore: payloadAt, now: now)
    }

    /// The reply (or pong) to the request its `re` names, looked for before `limit`, arrived.
    private func replyArrived(_ line: UnsafeRawBufferPointer, reBefore limit: Int, now: UInt64) {
        guard let reAt = line.firstIndex(of: #","re":"#, limit: limit),
            let (id, _) = line.decimal(at: reAt + 6),
            var request = pending[id]
        else { return }
        request.awaitingReply = false
        progressed(id: id, request, now: now)
    }

    private func handleError(_ line: UnsafeRawBufferPointer, now: UInt64) {
        let code = line.firstIndex(of: #""code":""#).flatMap { line.quoted(at: $0 + 8) } ?? "unknown"
        stats.countError(code)
        guard let reAt = line.firstIndex(of: #""re":"#, limit: 200) else {
            if !isReady { failSetup("setup failed: \(code)") }
            return
        }
        if let (id, _) = line.decimal(at: reAt + 5) {
            // An error answers the request, whatever else it was waiting for.
            guard let request = pending.removeValue(forKey: id) else { return }
            answered(id: id, request, failed: true, now: now)
        } else if !isReady {
            failSetup("setup failed: \(code)")
        }
    }

    /// One of a request's frames arrived: keep waiting, or it is answered.
    private func progressed(id: UInt64, _ request: Pending, now: UInt64) {
        if request.awaitingReply || request.awaitingBroadcast {
            pending[id] = request
        } else {
            pending[id] = nil
            answered(id: id, request, failed: false, now: now)
        }
    }

    private func answered(id: UInt64, _ request: Pending, failed: Bool, now: UInt64) {
        switch mode {
        case .publisher: publishAcknowledged()
        case .requester: requestCompleted(id: id, now: now, failed: failed, kind: request.kind)
        default: break
        }
    }

    // MARK: Frames out

    /// Creates this connection's todos, at most `creationWindow` at a time.
    private func sendCreations() {
        while creationsSent < settings.todoIDs.count, creationsSent - created < Self.creationWindow {
            let todo = settings.todoIDs[creationsSent]
            creationsSent += 1
            send(
                #"{"type":"RequestUpdateDetailViewModel","id":"c","payload":{"todo":{"id":""# + todo
                    + #"","version":0},"title":"Benchmark todo of the load tool","subtitle":"","priority":"high","#
                    + #""completed":false,"deleted":false}}"# + "\n"
            )
        }
    }

    /// Writes request `id` of `kind` and remembers it.
    private func write(_ kind: RequestKind, id: UInt64, ordinal: Int) {
        pending[id] = Pending(
            kind: kind,
            ordinal: ordinal,
            awaitingReply: kind.expectsReply,
            awaitingBroadcast: kind.expectsBroadcast
        )
        // Each request is about the next todo, but a restore is about the todo just deleted.
        if kind != .restore { todo += 1 }
        send(writer.frame(kind, id: id, todo: todo, counter: id, allocator: allocator))
    }

    /// Fan-out message `id` is the next request that causes a broadcast; with --publish mixed,
    /// the reads the schedule puts before it go first.
    override func writePublish(id: Int, time: UInt64) {
        run.sendTimes.store(id, time)
        while !schedule.peek().expectsBroadcast {
            lastWireID += 1
            write(schedule.next(), id: lastWireID, ordinal: 0)
        }
        lastWireID += 1
        write(schedule.next(), id: lastWireID, ordinal: id)
    }

    override func writeRequest(id: Int, time: UInt64) {
        write(schedule.next(), id: UInt64(id), ordinal: 0)
        flushIfNeeded()
    }
}
