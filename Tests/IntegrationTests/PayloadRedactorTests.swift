import NIOCore
import Testing

@testable import Relay

@Suite struct PayloadRedactorTests {
    func redact(_ text: String, _ fields: [String]) -> String {
        guard let redactor = PayloadRedactor(fields: fields) else { return text }
        return String(buffer: redactor.redact(ByteBuffer(string: text)))
    }

    @Test func onlyTheNamedPayloadFieldsChangeAndTheRestKeepsItsBytes() {
        let frame =
            #"{"type":"ResponseTodoViewModel","seq":7,"re":"x","payload":{"todo":{"id":"a","title":"secret \"quoted\" \\ text","subtitle":"s","version":2},"title":"secret","complete":false,"tags":[{"title":{"nested":[1,2]}},3]}}"#
            + "\n"
        #expect(
            redact(frame, ["title"])
                == #"{"type":"ResponseTodoViewModel","seq":7,"re":"x","payload":{"todo":{"id":"a","title":"[redacted]","subtitle":"s","version":2},"title":"[redacted]","complete":false,"tags":[{"title":"[redacted]"},3]}}"#
                + "\n"
        )
    }

    @Test func theEnvelopeIsNeverRedactedAndOddInputPassesThrough() {
        let frame = #"{"type":"RequestTodoViewModels","id":"title","session":"s1"}"#
        #expect(redact(frame, ["type", "id", "session", "title"]) == frame)
        #expect(
            redact(#"{"payload":[{"title":null}, {"title":true}]}"#, ["title"])
                == #"{"payload":[{"title":"[redacted]"}, {"title":"[redacted]"}]}"#
        )
        for odd in ["", "not json", #"{"payload":{"title":"unterminated"#, "[1,2]", #"{"payload":{"title" 1}}"#] {
            #expect(redact(odd, ["title"]) == odd)
        }
        #expect(PayloadRedactor(fields: []) == nil)
    }
}
