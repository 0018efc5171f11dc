import Testing

@testable import EventStream

@Suite struct SequenceOrdererTests {
    @Test func releasesInOrderAsTheyArrive() {
        var orderer = SequenceOrderer<UInt64>(after: 10)
        #expect(orderer.accept(seq: 11, 11) == [11])
        #expect(orderer.accept(seq: 12, 12) == [12])
        #expect(orderer.next == 13)
    }

    @Test func holdsBackEarlyArrivalsUntilTheGapFills() {
        var orderer = SequenceOrderer<UInt64>(after: 0)
        #expect(orderer.accept(seq: 3, 3) == [])
        #expect(orderer.accept(seq: 2, 2) == [])
        #expect(orderer.heldBack == 2)
        #expect(orderer.accept(seq: 1, 1) == [1, 2, 3])
        #expect(orderer.heldBack == 0)
    }

    @Test func dropsWhatWasAlreadyReleased() {
        var orderer = SequenceOrderer<UInt64>(after: 5)
        #expect(orderer.accept(seq: 5, 5) == [])
        #expect(orderer.accept(seq: 6, 6) == [6])
        #expect(orderer.accept(seq: 6, 6) == [])
    }

    @Test func anyPermutationComesOutSorted() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<50 {
            var orderer = SequenceOrderer<UInt64>(after: 0)
            var out: [UInt64] = []
            for seq in Array(UInt64(1)...200).shuffled(using: &generator) {
                out += orderer.accept(seq: seq, seq)
            }
            #expect(out == Array(1...200))
        }
    }
}

@Suite struct SequenceOrdererPreferenceTests {
    @Test func aHeldSeqKeepsTheCopyThePolicyPrefers() {
        var orderer = SequenceOrderer<String>(after: 0)
        #expect(orderer.accept(seq: 2, "origin", replaces: { _ in true }).isEmpty)
        // A second copy without an origin does not replace the one with it.
        #expect(orderer.accept(seq: 2, "plain", replaces: { held in held != "origin" }).isEmpty)
        #expect(orderer.accept(seq: 1, "first") == ["first", "origin"])
        // Already released: dropped.
        #expect(orderer.accept(seq: 2, "late", replaces: { _ in true }).isEmpty)
    }
}
