import EventStream
import Foundation
import NIOCore
import Testing

@testable import Relay

/// Event frames, written straight into their buffers: the same JSON a writer makes, each
/// string escaped where it needs it, every optional field in its place.
@Suite struct OutboundFrameTests {
    /// One frame's fields.
    private struct Fields {
        let seq: UInt64?
        let type: String
        let correlation: CorrelationID?
        let session: String?
        let mark: MutationMark?
        let body: EncodedBody

        init(
            _ seq: UInt64?,
            _ type: String,
            _ correlation: CorrelationID?,
            _ session: String?,
            _ mark: MutationMark?,
            _ body: EncodedBody
        ) {
            (self.seq, self.type, self.correlation, self.session, self.mark, self.body) =
                (seq, type, correlation, session, mark, body)
        }

        var frame: ByteBuffer {
            OutboundFrame.event(
                seq: seq,
                type: type,
                correlation: correlation,
                session: session,
                mark: mark,
                body: body
            )
        }

        /// What the frame must be, made with `JSONWriter`.
        var reference: String {
            var writer = JSONWriter()
            writer.beginObject()
            if let seq { writer.field("seq", seq) }
            writer.field("type", type)
            OutboundFrame.writeCorrelation(&writer, correlation)
            if let session { writer.field("session", session) }
            if let mark {
                writer.field("mid", mark.mid)
                if let appliedSeq = mark.appliedSeq {
                    writer.field("duplicate", true)
                    writer.field("applied_seq", appliedSeq)
                }
            }
            switch body {
            case .payload(let bytes):
                writer.key("payload")
                writer.raw(bytes)
            case .error(let bytes):
                writer.key("error")
                writer.raw(bytes)
            case .array(let elements):
                // Each element as the writer puts a value in an array.
                writer.key("payload")
                writer.beginArray()
                for element in elements { writer.raw(element) }
                writer.endArray()
            }
            writer.endObject()
            return String(decoding: writer.bytes, as: UTF8.self) + "\n"
        }
    }

    @Test func everyFieldIsWrittenAsAWriterWouldAndStringsAreEscapedWhereTheyNeedIt() throws {
        let texts = ["7", "", "plain-id", "quo\"te", "back\\slash", "line\nbreak", "tab\t", "\u{01}", "é ü 中"]
        let correlations: [CorrelationID?] =
            [nil, .integer(0), .integer(-42), .integer(Int64.max)]
            + texts.map { .string($0) }
        let marks: [MutationMark?] =
            [nil, MutationMark(mid: "m-1")]
            + texts.map { MutationMark(mid: $0, appliedSeq: 17) }
        let bodies: [EncodedBody] = [
            .payload(Array(#"{"a":[1,2]}"#.utf8)), .error(Array(#"{"code":"x"}"#.utf8)), .array([]),
            .array([Array(#"{"a":1}"#.utf8)]), .array([Array(#"{"a":1}"#.utf8), Array("2".utf8), Array(#""é""#.utf8)]),
        ]
        var checked = 0
        for seq: UInt64? in [nil, 0, 1042, UInt64.max] {
            for type in ["ResponseTodoViewModel", "Odd\"Type"] {
                for correlation in correlations {
                    for session: String? in [nil, "5a0c1b9e-0000-4000-8000-000000000001", "s\"x"] {
                        for mark in marks {
                            for body in bodies {
                                let fields = Fields(seq, type, correlation, session, mark, body)
                                #expect(String(buffer: fields.frame) == fields.reference)
                                checked += 1
                            }
                        }
                    }
                }
            }
        }
        #expect(checked > 1_000)
        // And the JSON parses, escapes included.
        let frame = OutboundFrame.event(
            seq: 1,
            type: "T",
            correlation: .string("a\"b\n"),
            mark: MutationMark(mid: "\\", appliedSeq: 2),
            body: .payload(Array("{}".utf8))
        )
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(String(buffer: frame).utf8)) as? [String: Any]
        )
        #expect(object["re"] as? String == "a\"b\n")
        #expect(object["mid"] as? String == "\\")
        #expect(object["applied_seq"] as? Int == 2)
    }
}
