import Testing

@testable import EventStream

@Suite struct TypePatternTests {
    @Test func exactNamesMatchOnlyThemselves() throws {
        let pattern = try #require(TypePattern("ResponseTodo"))
        #expect(pattern.matches("ResponseTodo"))
        #expect(!pattern.matches("ResponseTodos"))
        #expect(!pattern.isWildcard)
    }

    @Test func prefixPatternsMatchByPrefix() throws {
        let pattern = try #require(TypePattern("Response*"))
        #expect(pattern.matches("ResponseTodoViewModel"))
        #expect(pattern.matches("Response"))
        #expect(!pattern.matches("RequestTodoViewModels"))
        #expect(try #require(TypePattern("*")).matches("anything"))
    }

    @Test(arguments: ["", "Res*ponse", "**", "*Response"])
    func malformedPatternsAreRefused(_ text: String) {
        #expect(TypePattern(text) == nil)
    }
}

@Suite struct EventCatalogTests {
    let catalog = EventCatalog([
        EventDescriptor(name: "RequestA", layer: .view, direction: .request),
        EventDescriptor(name: "ResponseA", layer: .view, direction: .response),
        EventDescriptor(name: "RequestModel", layer: .model, direction: .request),
        EventDescriptor(name: "ResponseModel", layer: .model, direction: .response),
    ])

    func resolve(_ text: String, _ role: Role) throws -> EventCatalog.Resolution {
        catalog.resolve(try #require(TypePattern(text)), for: role)
    }

    @Test func viewWildcardsMeanViewResponses() throws {
        var expected = TypeSet()
        expected.insert(1)
        #expect(try resolve("*", .view) == .types(expected))
        #expect(try resolve("Response*", .view) == .types(expected))
    }

    @Test func monitorsSeeEverything() throws {
        #expect(try resolve("*", .monitor) == .types(TypeSet(bits: 0b1111)))
        #expect(try resolve("ResponseModel", .monitor) == .types(TypeSet(bits: 0b1000)))
    }

    @Test func modelEventsAreNotPermittedForViews() throws {
        #expect(try resolve("ResponseModel", .view) == .notPermitted)
        #expect(try resolve("RequestA", .view) == .notPermitted)
        #expect(try resolve("Request*", .view) == .notPermitted)
    }

    @Test func namesMatchingNothingAreUnknown() throws {
        #expect(try resolve("Nope", .monitor) == .unknown)
        #expect(try resolve("Nope*", .view) == .unknown)
    }
}
