import EventStream
import Testing

@testable import TodoStore

/// The mids a SQLite store remembers live exactly as long as their journal entries.
@Suite struct RememberedMutationsTests {
    @Test func rememberedMutationsAreTrimmedWithTheJournal() {
        func applied(_ seq: UInt64, _ mid: String?, at time: Int64) -> RememberedMutations.Applied {
            RememberedMutations.Applied(
                entry: JournalEntry(seq: seq, type: "T", payload: [], mid: mid),
                recordedAt: time
            )
        }
        var mutations = RememberedMutations([
            applied(3, "c", at: 300), applied(1, "a", at: 100), applied(2, "b", at: 200),
        ])
        mutations.remember(applied(4, nil, at: 400))
        mutations.remember(applied(5, "e", at: 500))
        #expect(mutations.count == 4)
        // Keep the newest 4 entries (seq 2…5): "a" goes.
        mutations.trim(JournalPrune(head: 5, retention: JournalRetention(maxEntries: 4, maxAgeSeconds: 0), now: 0))
        #expect(mutations["a"] == nil && mutations["b"]?.entry.seq == 2 && mutations.count == 3)
        // Entries recorded more than 1 s before 1,350 ms go: "b" (200) and "c" (300).
        mutations.trim(JournalPrune(head: 5, retention: JournalRetention(maxEntries: 100, maxAgeSeconds: 1), now: 1350))
        #expect(mutations["b"] == nil && mutations["c"] == nil)
        #expect(mutations["e"]?.entry.seq == 5 && mutations.count == 1)
    }

    @Test func midsAreKeptApartByTheirBytesNotByCanonicalEquivalence() {
        let composed = "m-\u{E9}"
        let decomposed = "m-e\u{301}"
        #expect(composed == decomposed, "Swift's String equality, which a key must not use")
        #expect(MutationKey(composed) != MutationKey(decomposed))
        #expect(MutationKey(composed) == MutationKey("m-" + "\u{E9}"))
        var mutations = RememberedMutations()
        mutations.remember(
            RememberedMutations.Applied(
                entry: JournalEntry(seq: 1, type: "T", payload: [], mid: composed),
                recordedAt: 0
            )
        )
        #expect(mutations[composed]?.entry.seq == 1)
        #expect(mutations[decomposed] == nil)
    }
}
