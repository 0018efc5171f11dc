/// A client mutation id (`mid`) as a dictionary key: equal to another only when the two are the
/// same bytes (UTF-8).
///
/// Swift compares strings by Unicode canonical equivalence, under which two different ids
/// (`é` as one scalar, or `e` and a combining accent) would be one, and the second write would
/// be taken for a retry of the first and not applied. PROTOCOL.md §9 keys on the id as the
/// client sent it, as the journal's unique index on `mid` does in both engines.
struct MutationKey: Hashable, Sendable {
    let mid: String

    init(_ mid: String) { self.mid = mid }

    static func == (lhs: MutationKey, rhs: MutationKey) -> Bool {
        lhs.mid.utf8.elementsEqual(rhs.mid.utf8)
    }

    func hash(into hasher: inout Hasher) {
        let hashed: Void? = mid.utf8.withContiguousStorageIfAvailable { bytes in
            hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
        }
        if hashed == nil {
            for byte in mid.utf8 { hasher.combine(byte) }
        }
    }
}
