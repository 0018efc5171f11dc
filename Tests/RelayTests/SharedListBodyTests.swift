import EventStream
import NIOCore
import Testing

@testable import Relay

/// A large list answer in parts: its own head and end around rows shared by every answer of
/// the same list on a loop, the same bytes as the frame made whole.
@Suite struct SharedListBodyTests {
    /// `count` rows of about `size` bytes each.
    private func rows(_ count: Int, size: Int) -> [[UInt8]] {
        (0..<count).map { index in Array(#"{"row":\#(index),"text":"\#(String(repeating: "x", count: size))"}"#.utf8) }
    }

    @Test func aSmallListIsWrittenWhole() {
        var bodies = SharedListBody()
        #expect(bodies.body(for: rows(10, size: 100)) == nil)
        #expect(bodies.body(for: []) == nil)
        #expect(bodies.joins == 0)
    }

    /// The same array (the row cache hands an unchanged list's array again) is joined once;
    /// equal rows in another array, or another list, are joined anew.
    @Test func theSameListIsJoinedOnce() {
        var bodies = SharedListBody()
        let list = rows(100, size: 1_000)
        let first = bodies.body(for: list)
        let again = bodies.body(for: list)
        #expect(bodies.joins == 1)
        #expect(first != nil && first == again)
        let copy = list.map { Array($0) } + []
        #expect(bodies.body(for: copy) == first)
        #expect(bodies.joins == 2)
        var changed = list
        changed[3] = Array("{\"row\":3}".utf8)
        let other = bodies.body(for: changed)
        #expect(bodies.joins == 3)
        #expect(other != nil && other != first)
    }

    @Test(arguments: [CorrelationID.string("list-1"), .integer(7), nil])
    func thePartsMakeTheFrameMadeWhole(correlation: CorrelationID?) throws {
        var bodies = SharedListBody()
        let list = rows(80, size: 1_000)
        let shared = bodies.body(for: list)
        let body = try #require(shared)
        let parts = SharedListBody.frameParts(
            type: "ResponseTodoViewModels",
            correlation: correlation,
            mark: nil,
            body: body
        )
        var joined = parts.head
        for part in parts.rest { joined.writeImmutableBuffer(part) }
        let whole = OutboundFrame.event(
            seq: nil,
            type: "ResponseTodoViewModels",
            correlation: correlation,
            mark: nil,
            body: .array(list)
        )
        #expect(joined == whole)
        #expect(parts.rest.count == 2)
    }
}
