import Testing

@testable import EventStream

@Suite struct SequenceOrdererTests {
    @Test func skippingGivesUpOnTheMissingSeqsAndReleasesWhatFollows() {
        var orderer = SequenceOrderer<UInt64>(after: 10)
        // 11…13 never come; 12 and 15, 16 are held back.
        #expect(orderer.accept(seq: 12, 12).isEmpty)
        #expect(orderer.accept(seq: 15, 15).isEmpty)
        #expect(orderer.accept(seq: 16, 16).isEmpty)
        #expect(orderer.skip(through: 13).isEmpty, "14 is still missing")
        #expect(orderer.heldBack == 2, "12 was dropped with the seqs given up")
        #expect(orderer.skip(through: 14) == [15, 16])
        #expect(orderer.next == 17)
        #expect(orderer.skip(through: 5).isEmpty, "skipping back is nothing")
        #expect(orderer.accept(seq: 16, 16).isEmpty, "a seq given up or released is dropped")
        #expect(orderer.accept(seq: 17, 17) == [17])
    }

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
