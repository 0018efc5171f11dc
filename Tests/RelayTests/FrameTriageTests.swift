import EventStream
import Testing

@testable import Relay

/// The verdict on one client frame, with no session and no socket: the order of the checks
/// (PROTOCOL.md §3, §7) and what each refusal says.
@Suite struct FrameTriageTests {
    /// An app of three events: a view request (its payload needs `n`, an integer), a view
    /// response, and a model-layer request.
    private struct Event: StreamEvent {
        let name: String
        let n: Int
    }

    private struct Codec: EventCodec {
        let catalog = EventCatalog([
            EventDescriptor(name: "RequestThing", layer: .view, direction: .request),
            EventDescriptor(name: "ResponseThing", layer: .view, direction: .response),
            EventDescriptor(name: "RequestModel", layer: .model, direction: .request),
        ])

        func decodeRequest(named name: String, frame: [UInt8]) throws(PayloadError) -> Event {
            guard case .object(let root) = JSONValue.parse(frame), case .object(let payload)? = root["payload"],
                case .integer(let n)? = payload["n"]
            else { throw PayloadError(message: "payload.n must be an integer") }
            return Event(name: name, n: Int(n))
        }

        func encodeBody(_ event: Event) -> EncodedBody { .payload([]) }
    }

    private let triage = FrameTriage(catalog: Codec().catalog)
    private let view = FrameTriage.Session(isAuthenticated: true, role: .view)

    /// The verdict on `text`; `tokens` says whether a rate-limit token is left, and how many
    /// were taken is counted.
    private func verdict(
        _ text: String,
        session: FrameTriage.Session? = nil,
        tokens: Bool = true,
        taken: inout Int
    ) -> FrameTriage.Verdict {
        triage.verdict(on: Array(text.utf8), session: session ?? view, ratePerSecond: 50) {
            taken += 1
            return tokens
        }
    }

    private func refusal(
        _ text: String,
        session: FrameTriage.Session? = nil,
        tokens: Bool = true
    ) -> (code: String, message: String, re: CorrelationID?)? {
        var taken = 0
        guard
            case .refuse(let code, let message, let re) = verdict(text, session: session, tokens: tokens, taken: &taken)
        else { return nil }
        return (code.rawValue, message, re)
    }

    @Test func aViewRequestIsPublishedDecodedOnceWithItsIdAndMid() throws {
        var taken = 0
        let text = #"{"type":"RequestThing","id":7,"mid":"m-1","payload":{"n":3}}"#
        let result = verdict(text, taken: &taken)
        guard case .publish(let publish) = result else {
            Issue.record("not published: \(result)")
            return
        }
        #expect(publish.root != nil, "the frame is parsed once, and its payload decoded from that")
        let request = try FrameTriage.prepared(publish, bytes: Array(text.utf8), codec: Codec())
        #expect(request.name == "RequestThing")
        #expect(request.event.n == 3)
        #expect(request.re == .integer(7))
        #expect(request.mid == "m-1")
        #expect(taken == 1)
        #expect(result.endsStartHold)
    }

    @Test func whatIsNotOneJSONObjectInUTF8IsInvalidJSONAndTakesNoToken() {
        for bytes: [UInt8] in [Array("[1]".utf8), Array("{".utf8), [0x7B, 0xFF, 0x7D], []] {
            var taken = 0
            let result = triage.verdict(on: bytes, session: view, ratePerSecond: 50) {
                taken += 1
                return true
            }
            guard case .refuse(let code, _, let re) = result else {
                Issue.record("\(bytes) was not refused")
                continue
            }
            #expect(code == .invalidJSON)
            #expect(re == nil)
            #expect(taken == 0)
        }
    }

    @Test func theRateLimitComesBeforeEveryOtherCheck() {
        let refused = refusal(
            #"{"op":"nonsense","id":"a"}"#,
            session: .init(isAuthenticated: false, role: .view),
            tokens: false
        )
        #expect(refused?.code == "rate_limited")
        #expect(refused?.message == "Too many frames; at most 50 a second.")
        #expect(refused?.re == .string("a"))
    }

    @Test func beforeAuthenticationOnlyPingAndAuthPassWhateverElseIsWrong() {
        let waiting = FrameTriage.Session(isAuthenticated: false, role: .view)
        for text in [
            #"{"type":"RequestThing","payload":{"n":1},"id":"x"}"#, #"{"op":"resume","id":"x"}"#,
            #"{"op":"ping","type":"RequestThing","id":"x"}"#, #"{"id":"x","mid":5}"#,
        ] {
            let refused = refusal(text, session: waiting)
            #expect(refused?.code == "unauthorized", "\(text)")
            #expect(refused?.re == .string("x"), "\(text)")
        }
        var taken = 0
        guard case .control("ping", _, _) = verdict(#"{"op":"ping"}"#, session: waiting, taken: &taken),
            case .control("auth", _, _) = verdict(#"{"op":"auth","token":"t"}"#, session: waiting, taken: &taken)
        else {
            Issue.record("ping or auth refused before authentication")
            return
        }
    }

    @Test func aBadIdIsAnsweredWithoutItAndABadMidWithIt() {
        let badID = refusal(#"{"op":"ping","id":""}"#)
        #expect(badID?.code == "invalid_frame")
        #expect(badID?.re == nil)
        let badMid = refusal(#"{"type":"RequestThing","id":"r","mid":12,"payload":{"n":1}}"#)
        #expect(badMid?.code == "invalid_frame")
        #expect(badMid?.message == "mid must be a string of 1 to 64 characters.")
        #expect(badMid?.re == .string("r"))
    }

    @Test func exactlyOneOfTypeAndOp() {
        #expect(refusal(#"{"id":1}"#)?.code == "invalid_frame")
        #expect(refusal(#"{"type":"RequestThing","op":"ping"}"#)?.code == "invalid_frame")
        #expect(refusal(#"{"type":5}"#)?.message == "type must be a string.")
        #expect(refusal(#"{"op":true}"#)?.message == "op must be a string.")
    }

    @Test func aPublishIsCheckedAgainstTheRoleThenTheCatalogThenItsPayload() {
        let monitor = FrameTriage.Session(isAuthenticated: true, role: .monitor)
        #expect(refusal(#"{"type":"Nothing"}"#, session: monitor)?.code == "not_permitted")
        #expect(refusal(#"{"type":"Nothing"}"#)?.message == #"Unknown event type Nothing."#)
        #expect(refusal(#"{"type":""}"#)?.message == "The event type is empty.")
        let long = String(repeating: "é", count: 100)
        #expect(
            refusal(#"{"type":"\#(long)"}"#)?.message == "Unknown event type \(String(repeating: "é", count: 80))…."
        )
        #expect(refusal(#"{"type":"ResponseThing"}"#)?.code == "not_permitted")
        #expect(refusal(#"{"type":"RequestModel"}"#)?.code == "not_permitted")
        // The payload last, when the session decodes it.
        let text = #"{"type":"RequestThing","id":"p","payload":{"n":"three"}}"#
        var taken = 0
        guard case .publish(let publish) = verdict(text, taken: &taken) else {
            Issue.record("a bad payload refused before it is decoded")
            return
        }
        #expect(publish.re == .string("p"))
        #expect(throws: PayloadError(message: "payload.n must be an integer")) {
            try FrameTriage.prepared(publish, bytes: Array(text.utf8), codec: Codec())
        }
    }

    /// A resume keeps the start hold, unless it is refused; one without its fields is.
    @Test func aResumeNeedsItsEpochAndAfterAndOnlyAValidOneKeepsTheHold() {
        var taken = 0
        let valid = verdict(#"{"op":"resume","epoch":"e","after":41,"id":"r"}"#, taken: &taken)
        guard case .resume("e", 41, .string("r")) = valid else {
            Issue.record("\(valid)")
            return
        }
        #expect(!valid.endsStartHold)
        for text in [#"{"op":"resume","after":41}"#, #"{"op":"resume","epoch":"e","after":-1}"#] {
            let refused = verdict(text, taken: &taken)
            guard case .refuse(.invalidFrame, _, _) = refused else {
                Issue.record("\(text): \(refused)")
                continue
            }
            #expect(refused.endsStartHold)
        }
        let rated = verdict(#"{"op":"resume","epoch":"e","after":41}"#, tokens: false, taken: &taken)
        #expect(rated.endsStartHold)
    }

    @Test func otherOpsAreLeftToTheSessionWithTheirFrame() {
        var taken = 0
        guard
            case .control("subscribe", let frame, .integer(2)) = verdict(
                #"{"op":"subscribe","types":["Response*"],"id":2}"#,
                taken: &taken
            )
        else {
            Issue.record("subscribe not passed on")
            return
        }
        #expect(frame.types == .value(["Response*"]))
        guard case .control("frobnicate", _, _) = verdict(#"{"op":"frobnicate"}"#, taken: &taken) else {
            Issue.record("an unknown op is the session's to answer")
            return
        }
    }

    /// The fast path takes a frame only when the verdict would publish it, and takes the same.
    @Test func theFastPathTakesExactlyTheFramesThatWouldBePublished() {
        let frames = [
            #"{"type":"RequestThing","id":1,"payload":{"n":1}}"#, #"{"type":"RequestThing","payload":{"n":"x"}}"#,
            #"{"type":"RequestThing","id":"q","mid":"m","payload":{"n":2}}"#,
            #"{"type":"ResponseThing"}"#, #"{"type":"RequestThing","id":"","payload":{"n":1}}"#,
            #"{"type":"RequestThing","mid":"","payload":{"n":1}}"#, #"{"op":"ping"}"#, "not json",
            #"{"type":"Nothing"}"#, #"{"type":"RequestThing","op":"ping","payload":{"n":1}}"#,
        ]
        for text in frames {
            var taken = 0
            let published: Bool
            if case .publish = verdict(text, taken: &taken) { published = true } else { published = false }
            let fast = triage.publish(in: Array(text.utf8))
            #expect((fast != nil) == published, "\(text)")
            if case .publish(let publish) = verdict(text, taken: &taken), let fast {
                #expect(fast.name == publish.name && fast.re == publish.re && fast.mid == publish.mid, "\(text)")
            }
        }
    }
}
