import Testing

@testable import todostreamd

/// The allocator's thresholds: applied (glibc accepts both), and left to the operator when
/// `GLIBC_TUNABLES` sets the allocator's own.
@Suite struct MemoryAllocatorTests {
    @Test func theThresholdsAreApplied() {
        #expect(MemoryAllocator.configure(environment: [:]))
        #expect(MemoryAllocator.configure(environment: ["GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=512"]))
    }

    @Test func anOperatorsAllocatorTunablesWin() {
        #expect(!MemoryAllocator.configure(environment: ["GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"]))
    }
}
