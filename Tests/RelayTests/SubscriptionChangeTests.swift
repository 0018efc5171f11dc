import EventStream
import Testing

@testable import Relay

/// What `subscribe` and `unsubscribe` make of a session's patterns, with no session.
@Suite struct SubscriptionChangeTests {
    private let catalog = EventCatalog([
        EventDescriptor(name: "RequestThing", layer: .view, direction: .request),
        EventDescriptor(name: "ResponseThing", layer: .view, direction: .response),
        EventDescriptor(name: "ResponseOther", layer: .view, direction: .response),
        EventDescriptor(name: "ResponseModel", layer: .model, direction: .response),
    ])

    private func patterns(_ names: String...) -> [TypePattern] { names.compactMap(TypePattern.init) }

    private func change(
        _ subscribe: Bool,
        _ names: [String]?,
        current: [TypePattern]? = nil,
        role: Role = .view,
        max: Int = 4
    ) -> SubscriptionChange.Outcome {
        SubscriptionChange.outcome(
            subscribe: subscribe,
            types: names.map { .value($0) } ?? .invalid,
            current: current ?? patterns("Response*"),
            role: role,
            catalog: catalog,
            maxSubscriptions: max
        )
    }

    @Test func subscribingAddsEachNewPatternOnceInTheOrderAsked() {
        #expect(
            change(true, ["ResponseThing", "Response*", "ResponseOther", "ResponseThing"])
                == .apply(patterns("Response*", "ResponseThing", "ResponseOther"))
        )
    }

    @Test func unsubscribingRemovesWhatIsNamedAndNothingElse() {
        #expect(
            change(false, ["Response*"], current: patterns("Response*", "ResponseThing"))
                == .apply(patterns("ResponseThing"))
        )
        #expect(change(false, ["ResponseOther"]) == .apply(patterns("Response*")))
    }

    @Test func typesMustBeAListOfNamesOrPatterns() {
        guard case .refuse(let code, let message) = change(true, nil) else {
            Issue.record("no types accepted")
            return
        }
        #expect(code == .invalidFrame)
        #expect(message == "subscribe needs types: a list of event type names or patterns ending in *.")
        guard case .refuse(.invalidFrame, let bad) = change(false, ["Resp*nse"]) else {
            Issue.record("a * inside a name accepted")
            return
        }
        #expect(bad == "\"Resp*nse\" is not an event type name or a pattern ending in *.")
    }

    @Test func aNameThatMatchesNothingIsUnknownAndChangesNothing() {
        #expect(
            change(true, ["ResponseThing", "Nothing*"]) == .refuse(.unknownType, "No event type matches Nothing*.")
        )
        #expect(change(false, ["Nothing"]) == .refuse(.unknownType, "No event type matches Nothing."))
    }

    /// A view client may not subscribe to model-layer events, but may name them to unsubscribe.
    @Test func whatTheRoleIsNotGivenIsRefusedOnlyToSubscribe() {
        #expect(
            change(true, ["ResponseModel"]) == .refuse(.notPermitted, "ResponseModel is not delivered to view clients.")
        )
        #expect(change(false, ["ResponseModel"]) == .apply(patterns("Response*")))
        #expect(
            change(true, ["ResponseModel"], role: .monitor) == .apply(patterns("Response*", "ResponseModel"))
        )
    }

    @Test func theListHasABound() {
        let full = patterns("Response*", "ResponseThing", "ResponseOther", "RequestThing")
        #expect(change(true, ["ResponseThing"], current: full) == .apply(full))
        #expect(
            change(true, ["ResponseThing"], current: full, max: 3)
                == .refuse(.notPermitted, "At most 3 subscriptions per session.")
        )
    }
}
