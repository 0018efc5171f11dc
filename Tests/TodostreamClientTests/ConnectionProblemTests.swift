import NIOCore
import NIOHTTP1
import Testing

@testable import TodostreamClient

/// A failed connection attempt is said in a person's words, naming the likely mistake.
@Suite struct ConnectionProblemTests {
    @Test func aWrongPortForTheTransportIsNamed() {
        // ws:// to the NDJSON port: the answer is no HTTP.
        #expect(TodostreamClient.problem(HTTPParserError.invalidConstant).hasPrefix("no HTTP there"))
        // ws:// to a TLS listener.
        #expect(TodostreamClient.problem(ChannelError.inappropriateOperationForState).hasPrefix("no plain HTTP there"))
        #expect(TodostreamClient.problem(IOError(errnoCode: 111, reason: "connect")) == "connection refused")
    }
}
