import NIOCore

/// A client of todostreamd over TCP (newline-delimited JSON, PROTOCOL.md).
final class DaemonConnection: LineConnection {
    private var seqBase: UInt64 = 0
    private var requestPrefix: [UInt8] = []

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
            switch mode {
            case .publisher:
                if seq != seqBase + id { stats.seqMismatches += 1 }
                publishAcknowledged()
            case .requester:
                requestCompleted(id: id, now: now, failed: false)
            default:
                break
            }
        } else if line.hasPrefix(#"{"seq":"#), line.quoted(at: reAt + 7) == "c" {
            // The broadcast of this connection's todo creation: setup is done.
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
                sendCreate()
            case .requester:
                if settings.requestersSubscribed {
                    sendCreate()
                } else {
                    send(#"{"op":"unsubscribe","id":"u","types":["Response*"]}"# + "\n")
                }
            case .idle, .requestPublisher:
                markReady()
            }
        case "pong":
            if mode == .subscriber || mode == .slowSubscriber { markReady() }
        case "unsubscribed":
            sendCreate()
        case "error":
            handleError(line, now: now)
        default:
            stats.countError("op:\(name)")
        }
    }

    private func handleReply(_ line: UnsafeRawBufferPointer, now: UInt64) {
        let payloadAt = line.firstIndex(of: #","payload":"#, limit: 160) ?? min(line.count, 160)
        if line.firstIndex(of: #","error":{"#, limit: payloadAt) != nil {
            handleError(line, now: now)
        }
        // Replies without error (ResponseUpdateDetailViewModel of the creation) need nothing.
    }

    private func handleError(_ line: UnsafeRawBufferPointer, now: UInt64) {
        let code = line.firstIndex(of: #""code":""#).flatMap { line.quoted(at: $0 + 8) } ?? "unknown"
        stats.countError(code)
        guard let reAt = line.firstIndex(of: #""re":"#, limit: 200) else {
            if !isReady { failSetup("setup failed: \(code)") }
            return
        }
        if let (id, _) = line.decimal(at: reAt + 5) {
            switch mode {
            case .publisher: publishAcknowledged()
            case .requester: requestCompleted(id: id, now: now, failed: true)
            default: break
            }
        } else if !isReady {
            failSetup("setup failed: \(code)")
        }
    }

    // MARK: Frames out

    private func sendCreate() {
        let todo = settings.todoID
        send(
            #"{"type":"RequestUpdateDetailViewModel","id":"c","payload":{"todo":{"id":""# + todo
                + #"","version":0},"title":"Benchmark todo of the load tool","subtitle":"","priority":"high","#
                + #""completed":false,"deleted":false}}"# + "\n"
        )
    }

    private func writeToggle(id: Int) {
        if requestPrefix.isEmpty { requestPrefix = Array(#"{"type":"RequestToggleCompleteTodoViewModel","id":"#.utf8) }
        var buffer = allocator.buffer(capacity: requestPrefix.count + settings.todoID.utf8.count + 48)
        buffer.writeBytes(requestPrefix)
        buffer.writeString(String(id))
        buffer.writeString(#","payload":{"todo":{"id":""#)
        buffer.writeString(settings.todoID)
        buffer.writeString("\"}}}\n")
        send(buffer)
    }

    override func writePublish(id: Int, time: UInt64) {
        run.sendTimes.store(id, time)
        writeToggle(id: id)
    }

    override func writeRequest(id: Int, time: UInt64) {
        writeToggle(id: id)
        flushIfNeeded()
    }
}
