import EventStream

/// A request a session hands to the sequencer: its event, decoded once, and what its answers
/// carry.
struct PreparedRequest<Event: StreamEvent> {
    let name: String
    let event: Event
    let re: CorrelationID?
    let mid: String?
}

/// What a session does with one client frame, decided from the frame and what the session
/// knows, with no I/O: the session carries the verdict out. The checks run in the order
/// PROTOCOL.md §3 and §7 give them: one JSON object in UTF-8; the rate limit; before
/// authentication, every frame but `ping` and `auth` is `unauthorized`, whatever else is wrong
/// with it; then `id` and `mid`; then exactly one of `type` and `op`. A publish is checked
/// against the session's role and the catalog; a `resume` needs its `epoch` and `after`.
///
/// Not generic over the app's codec: a publish's payload is decoded last, by the session
/// (`prepared`), so that the verdict on every frame, a ping's included, is a plain value, with
/// no generic type to look up or copy through its metadata (that cost a ping about 1 µs).
struct FrameTriage {
    let catalog: EventCatalog

    /// A publish that passed every check before its payload's: what decoding it needs.
    struct Publish {
        let name: String
        let root: JSONObject?
        let re: CorrelationID?
        let mid: String?
    }

    enum Verdict {
        case publish(Publish)
        case resume(epoch: String, after: UInt64, re: CorrelationID?)
        /// Any other op (`ping`, `subscribe`, `unsubscribe`, `auth`, or one not known).
        case control(op: String, frame: ClientFrame, re: CorrelationID?)
        case refuse(RelayErrorCode, String, re: CorrelationID?)

        /// Whether the frame ends the session's hold on live output: every frame but a resume
        /// does (a resume takes the hold over, and keeps what was held for after its replay).
        var endsStartHold: Bool {
            if case .resume = self { return false }
            return true
        }
    }

    /// What the session is, as far as a frame's verdict goes.
    struct Session {
        let isAuthenticated: Bool
        let role: Role
    }

    /// The verdict on `bytes`. `takeToken` takes one of the session's rate-limit tokens (at
    /// `ratePerSecond`), and is called only for a frame that is one JSON object.
    func verdict(
        on bytes: [UInt8],
        session: Session,
        ratePerSecond: Double,
        takeToken: () -> Bool
    ) -> Verdict {
        guard isValidUTF8(bytes), let parsed = ClientFrame.parse(bytes) else {
            return .refuse(.invalidJSON, "A frame must be one JSON object (UTF-8).", re: nil)
        }
        let frame = parsed.frame
        guard takeToken() else {
            return .refuse(.rateLimited, "Too many frames; at most \(Int(ratePerSecond)) a second.", re: frame.id.value)
        }
        if !session.isAuthenticated, !Self.isPingOrAuth(frame) {
            return .refuse(.unauthorized, "Authenticate first: {\"op\":\"auth\",\"token\":\"…\"}.", re: frame.id.value)
        }
        if case .invalid = frame.id {
            return .refuse(.invalidFrame, "id must be a string of 1 to 64 characters or an integer.", re: nil)
        }
        let re = frame.id.value
        if case .invalid = frame.mid {
            return .refuse(.invalidFrame, "mid must be a string of 1 to 64 characters.", re: re)
        }
        switch (frame.type, frame.op) {
        case (.value(let type), .absent):
            return publish(
                type: type,
                root: parsed.root,
                re: re,
                mid: frame.mid.value,
                role: session.role
            )
        case (.absent, .value("resume")):
            guard case .value(let epoch) = frame.epoch, case .value(let after) = frame.after else {
                return .refuse(
                    .invalidFrame,
                    "resume needs epoch (a string) and after (a non-negative integer).",
                    re: re
                )
            }
            return .resume(epoch: epoch, after: after, re: re)
        case (.absent, .value(let op)):
            return .control(op: op, frame: frame, re: re)
        case (.absent, .absent), (.value, .value), (.value, .invalid), (.invalid, .value), (.invalid, .invalid):
            return .refuse(.invalidFrame, "A frame needs exactly one of type (a string) or op (a string).", re: re)
        case (.invalid, .absent):
            return .refuse(.invalidFrame, "type must be a string.", re: re)
        case (.absent, .invalid):
            return .refuse(.invalidFrame, "op must be a string.", re: re)
        }
    }

    /// The publish in `bytes` when it is one that `verdict` would publish for an authenticated
    /// view session, before its payload is decoded; nil otherwise (what the session's fast path
    /// takes; it handles the rest one frame at a time). Takes no token.
    func publish(in bytes: [UInt8]) -> Publish? {
        let verdict = verdict(on: bytes, session: Session(isAuthenticated: true, role: .view), ratePerSecond: 0) {
            true
        }
        guard case .publish(let publish) = verdict else { return nil }
        return publish
    }

    /// `publish`'s request with its payload decoded by `codec` (`bytes`: the whole frame), or
    /// the refusal (`invalid_payload`, its message naming the field).
    static func prepared<Codec: EventCodec>(
        _ publish: Publish,
        bytes: [UInt8],
        codec: Codec
    ) throws(PayloadError) -> PreparedRequest<Codec.Event> {
        let event = try codec.decodeRequest(named: publish.name, frame: bytes, parsed: publish.root)
        return PreparedRequest(name: publish.name, event: event, re: publish.re, mid: publish.mid)
    }

    private func publish(
        type name: String,
        root: JSONObject?,
        re: CorrelationID?,
        mid: String?,
        role: Role
    ) -> Verdict {
        // A monitor publishes nothing: any `type` from it, known or not, is `not_permitted`.
        guard role == .view else { return .refuse(.notPermitted, "A monitor session may not publish events.", re: re) }
        guard let descriptor = catalog[name] else {
            return .refuse(
                .unknownType,
                name.isEmpty ? "The event type is empty." : "Unknown event type \(shown(name)).",
                re: re
            )
        }
        guard descriptor.isPublishableByView else {
            return .refuse(.notPermitted, "\(name) cannot be published by a client; only view requests can.", re: re)
        }
        return .publish(Publish(name: name, root: root, re: re, mid: mid))
    }

    /// A frame that is a `ping` or an `auth` op, and nothing else: the two a session may send
    /// before it is authenticated.
    private static func isPingOrAuth(_ frame: ClientFrame) -> Bool {
        guard case .absent = frame.type, case .value(let op) = frame.op else { return false }
        return op == "ping" || op == "auth"
    }
}

/// A name from a client as an error message shows it: at most 80 characters.
func shown(_ name: String) -> String {
    name.unicodeScalars.count <= 80 ? name : String(String.UnicodeScalarView(name.unicodeScalars.prefix(80))) + "…"
}
