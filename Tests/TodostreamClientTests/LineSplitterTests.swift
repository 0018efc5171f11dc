import NIOCore
import Testing

@testable import TodostreamClient

@Suite struct LineSplitterTests {
    /// Every frame `splitter` finds in `buffer`, as text (a frame too large as its length).
    func frames(_ splitter: inout LineSplitter, _ buffer: inout ByteBuffer) -> [String] {
        var found: [String] = []
        while let frame = splitter.next(from: &buffer) {
            switch frame {
            case .frame(let line): found.append(String(buffer: line))
            case .tooLarge(let head, let length): found.append("too large: \(length), \(String(buffer: head))")
            }
        }
        return found
    }

    @Test func splitsLinesWithoutTheirEndsAndSkipsBlankOnes() {
        var splitter = LineSplitter(maxLineBytes: 100)
        var buffer = ByteBuffer(string: "{\"a\":1}\r\n\n{\"b\":2}\n{\"c\"")
        check(frames(&splitter, &buffer), [#"{"a":1}"#, #"{"b":2}"#])
        buffer.writeString(":3}\n")
        check(frames(&splitter, &buffer), [#"{"c":3}"#])
        check(buffer.readableBytes, 0)
    }

    /// A line that comes in many reads is searched for its newline once, not from its start
    /// again on every read.
    @Test func searchesEachByteOnce() {
        var splitter = LineSplitter(maxLineBytes: 1 << 20)
        var buffer = ByteBuffer()
        for _ in 0..<100 {
            buffer.writeString(String(repeating: "x", count: 10))
            check(splitter.next(from: &buffer) == nil, true)
            check(splitter.searched, buffer.readableBytes)
        }
        buffer.writeString("\n")
        check(frames(&splitter, &buffer), [String(repeating: "x", count: 1000)])
        check(splitter.searched, 0)
    }

    /// A line over the limit is skipped up to its newline, with its head kept, and the lines
    /// after it are read as usual: whole in one read, or dropped as it comes without being
    /// held.
    @Test func skipsALineOverTheLimit() {
        var splitter = LineSplitter(maxLineBytes: 10)
        var buffer = ByteBuffer(string: "short\n" + String(repeating: "a", count: 30) + "\nnext\n")
        check(frames(&splitter, &buffer), ["short", "too large: 30, " + String(repeating: "a", count: 30), "next"])

        buffer = ByteBuffer(string: "{\"re\":\"c1\"")
        check(frames(&splitter, &buffer), [])
        buffer.writeString(",\"payload\":[1,2,3")
        check(frames(&splitter, &buffer), [])
        // Over the limit: what came is dropped, not kept.
        check(buffer.readableBytes, 0)
        buffer.writeString(String(repeating: "4", count: 5000))
        check(frames(&splitter, &buffer), [])
        check(buffer.readableBytes, 0)
        buffer.writeString("]}\n{\"ok\":1}\n")
        check(frames(&splitter, &buffer), [#"too large: 5029, {"re":"c1","payload":[1,2,3"#, #"{"ok":1}"#])
    }
}

@Suite struct FrameHeadTests {
    @Test func readsTheEnvelopeBeforeThePayload() {
        check(
            FrameHead(Array(#"{"seq":42,"type":"ResponseTodoViewModel","re":"c7","payload":{"#.utf8)),
            FrameHead(re: "c7", seq: 42)
        )
        check(
            FrameHead(Array(#"{"type":"ResponseTodoViewModels","re":"c1","payload":[{"re":"x"#.utf8)),
            FrameHead(re: "c1")
        )
        // Fields of the payload are not the frame's.
        check(FrameHead(Array(#"{"type":"T","payload":{"re":"c9","seq":3},"seq":5}"#.utf8)), FrameHead(seq: 5))
        check(FrameHead(Array(#"{"type":"T","payload":[{"seq":3}],"#.utf8)), FrameHead())
        // A value cut off is not read.
        check(FrameHead(Array(#"{"seq":12"#.utf8)), FrameHead())
        check(FrameHead(Array(#"{"re":"c1"#.utf8)), FrameHead())
        check(FrameHead(Array(#"not json"#.utf8)), FrameHead())
    }
}
