import NIOCore
import Testing

@testable import Relay

/// A session's own queue: whole frames only are dropped at a cut, including a frame that
/// comes in parts (a large list answer).
@Suite struct OutboundQueueTests {
    private func buffer(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    private func queue(_ parts: [(String, frames: Int, continuation: Bool)]) -> OutboundQueue {
        var queue = OutboundQueue()
        for part in parts {
            let action = queue.write(
                buffer(part.0),
                frames: part.frames,
                channelWritable: false,
                channelBacklog: 0,
                maxBytes: 1 << 20,
                maxFrames: 1 << 10,
                asked: true,
                continuation: part.continuation
            )
            #expect(action == .queued)
        }
        return queue
    }

    @Test func aCutDropsEveryWholeFrame() {
        var queue = queue([("{\"a\":1}\n", 1, false), ("{\"b\":2}\n{\"c\":3}\n", 2, false)])
        let unfinished = queue.takeUnfinished()
        let dropped = queue.dropAll()
        #expect(dropped == 3)
        #expect(unfinished.isEmpty)
        #expect(queue.isEmpty && queue.bytes == 0 && queue.frames == 0)
    }

    /// The head of a list answer went out; its rows and end wait: they go out at the cut (the
    /// client gets the whole frame, then the notice), the frames behind them do not.
    @Test func aCutKeepsTheRestOfAFrameBegun() {
        var queue = queue([
            ("[1,2,3]", 0, true), ("}\n", 0, true), ("{\"b\":2}\n", 1, false), ("{\"h\":", 1, false),
            ("[4]", 0, true), ("}\n", 0, true),
        ])
        let unfinished = queue.takeUnfinished()
        let dropped = queue.dropAll()
        #expect(unfinished.map { String(buffer: $0) } == ["[1,2,3]", "}\n"])
        #expect(dropped == 2)
        #expect(queue.isEmpty && queue.bytes == 0 && queue.frames == 0)
    }

    /// A frame whose head is still queued is dropped whole, its parts with it.
    @Test func aCutDropsAFrameNotBegunWithItsParts() {
        var queue = queue([("{\"h\":", 1, false), ("[4]", 0, true), ("}\n", 0, true)])
        let unfinished = queue.takeUnfinished()
        let dropped = queue.dropAll()
        #expect(unfinished.isEmpty)
        #expect(dropped == 1)
    }

    /// Parts come out in order, as queued.
    @Test func partsComeOutInOrder() {
        var queue = queue([("{\"h\":", 1, false), ("[4]", 0, true), ("}\n", 0, true)])
        var out = ""
        var continuations: [Bool] = []
        while let next = queue.next() {
            out += String(buffer: next.buffer)
            continuations.append(next.continuation)
        }
        #expect(out == "{\"h\":[4]}\n")
        #expect(continuations == [false, true, true])
        #expect(queue.bytes == 0 && queue.frames == 0)
    }
}
