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

    /// A conflict's error carries the stored todo (`current`): its fields are redacted as in
    /// a payload (they reached monitors and taps in clear); the error's code is not a field of
    /// the todo and stays.
    @Test func aConflictsStoredTodoIsRedactedToo() {
        let frame =
            #"{"type":"ResponseTodoViewModel","re":"y","payload":{"todo":{"id":"a","version":1}},"#
            + #""error":{"code":"conflict","message":"changed","current":{"id":"a","title":"Secret","subtitle":"s","version":2}}}"#
        #expect(
            redact(frame, ["title", "subtitle"])
                == #"{"type":"ResponseTodoViewModel","re":"y","payload":{"todo":{"id":"a","version":1}},"#
                + #""error":{"code":"conflict","message":"changed","current":{"id":"a","title":"[redacted]","subtitle":"[redacted]","version":2}}}"#
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
