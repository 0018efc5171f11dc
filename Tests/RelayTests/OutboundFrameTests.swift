import EventStream
import Foundation
import NIOCore
import Testing

@testable import Relay

/// Event frames, written straight into their buffers: the same JSON a writer makes, each
/// string escaped where it needs it, every optional field in its place.
@Suite struct OutboundFrameTests {
    /// What the frame must be, made with `JSONWriter`.
    private func reference(
        seq: UInt64?,
        type: String,
        correlation: CorrelationID?,
        session: String?,
        mark: MutationMark?,
        body: EncodedBody
    ) -> String {
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
        }
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self) + "\n"
    }

    @Test func everyFieldIsWrittenAsAWriterWouldAndStringsAreEscapedWhereTheyNeedIt() throws {
        let texts = ["7", "", "plain-id", "quo\"te", "back\\slash", "line\nbreak", "tab\t", "\u{01}", "é ü 中"]
        let correlations: [CorrelationID?] =
            [nil, .integer(0), .integer(-42), .integer(Int64.max)]
            + texts.map { .string($0) }
        let marks: [MutationMark?] =
            [nil, MutationMark(mid: "m-1")]
            + texts.map { MutationMark(mid: $0, appliedSeq: 17) }
        let bodies: [EncodedBody] = [.payload(Array(#"{"a":[1,2]}"#.utf8)), .error(Array(#"{"code":"x"}"#.utf8))]
        var checked = 0
        for seq: UInt64? in [nil, 0, 1042, UInt64.max] {
            for type in ["ResponseTodoViewModel", "Odd\"Type"] {
                for correlation in correlations {
                    for session: String? in [nil, "5a0c1b9e-0000-4000-8000-000000000001", "s\"x"] {
                        for mark in marks {
                            for body in bodies {
                                let frame = OutboundFrame.event(
                                    seq: seq,
                                    type: type,
                                    correlation: correlation,
                                    session: session,
                                    mark: mark,
                                    body: body
                                )
                                let expected = reference(
                                    seq: seq,
                                    type: type,
                                    correlation: correlation,
                                    session: session,
                                    mark: mark,
                                    body: body
                                )
                                #expect(String(buffer: frame) == expected)
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
