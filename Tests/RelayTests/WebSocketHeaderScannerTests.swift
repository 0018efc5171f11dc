import NIOCore
import Testing

@testable import Relay

@Suite struct WebSocketHeaderScannerTests {
    /// A frame as a client sends it (masked), with the given length encoding.
    static func frame(payload: Int, extended: Int? = nil, masked: Bool = true) -> [UInt8] {
        var bytes: [UInt8] = [0x81]
        let mask: UInt8 = masked ? 0x80 : 0
        switch extended ?? (payload < 126 ? 0 : payload <= 0xFFFF ? 2 : 8) {
        case 0: bytes.append(mask | UInt8(payload))
        case 2: bytes += [mask | 126, UInt8(payload >> 8), UInt8(payload & 0xFF)]
        default: bytes += [mask | 127] + (0..<8).reversed().map { UInt8((payload >> ($0 * 8)) & 0xFF) }
        }
        if masked { bytes += [1, 2, 3, 4] }
        return bytes + [UInt8](repeating: 0x20, count: payload)
    }

    func verdicts(_ stream: [UInt8], cuts: [Int]) -> [WebSocketHeaderScanner.Verdict] {
        var scanner = WebSocketHeaderScanner()
        var verdicts: [WebSocketHeaderScanner.Verdict] = []
        var start = 0
        for end in (cuts + [stream.count]).sorted() where end >= start {
            verdicts.append(scanner.scan(ByteBuffer(bytes: stream[start..<end]).readableBytesView))
            start = end
        }
        return verdicts
    }

    /// Frames of every length encoding, masked or not, empty or not, cut anywhere: valid.
    @Test func framesCutAnywhereAreFollowed() {
        var stream: [UInt8] = []
        for (payload, extended) in [
            (0, nil), (5, nil), (125, nil), (126, nil), (300, nil), (70_000, nil), (3, 2), (4, 8),
        ] {
            stream += Self.frame(payload: payload, extended: extended)
            stream += Self.frame(payload: payload, extended: extended, masked: false)
        }
        var random = SystemRandomNumberGenerator()
        for _ in 0..<50 {
            let cuts = (0..<20).map { _ in Int.random(in: 0...stream.count, using: &random) }
            #expect(verdicts(stream, cuts: cuts).allSatisfy { $0 == .valid })
        }
        #expect(
            verdicts(stream, cuts: Array(0..<stream.count).filter { $0 % 997 == 0 || $0 < 200 }).allSatisfy {
                $0 == .valid
            }
        )
    }

    /// A 64-bit length with its top bit set is a violation where its first length byte is,
    /// however the bytes are cut, and nothing is read after it.
    @Test func aLengthWithItsTopBitSetIsAViolation() {
        let bad: [UInt8] = [0x81, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 5, 1, 2, 3, 4] + Array("hello".utf8)
        let stream = Self.frame(payload: 10) + bad + Self.frame(payload: 3)
        let at = Self.frame(payload: 10).count
        for cut in [at, at + 1, at + 2, at + 3, at + 5] {
            let result = verdicts(stream, cuts: [cut, cut + 20])
            #expect(result.contains(.violation), "cut at \(cut): \(result)")
            #expect(result.last != .valid, "cut at \(cut): \(result)")
        }
        // The largest length without it is no violation here (the decoder's cap handles it).
        let large: [UInt8] = [0x81, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3, 4, 0x20]
        #expect(verdicts(large, cuts: []) == [.valid])
    }
}
