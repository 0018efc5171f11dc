#if canImport(Glibc)
import Glibc
#endif

/// glibc's allocator, set for a daemon that builds large answers over and over.
///
/// A list answer holds every todo (600 KB with a thousand todos), and its body and frame are
/// fresh buffers each time. By default glibc gives an allocation that large pages of its own
/// (`mmap`) or hands freed memory at the top of a heap back to the kernel, so each answer
/// faulted its pages in again and had them zeroed: with 1,024 todos and a frontend's mix of
/// requests, about a tenth of the daemon's time. Kept in the heap, they are reused
/// (BENCHMARKS.md, "2026-11-27 (day)"). What the heap keeps is bounded by what was once in use,
/// and at most `trimThresholdBytes` of it free at the top of each heap.
enum MemoryAllocator {
    /// Allocations up to this size come from the heap (glibc's largest allowed).
    static let mmapThresholdBytes: Int32 = 32 << 20
    /// Free memory at the top of a heap kept for reuse, at most.
    static let trimThresholdBytes: Int32 = 64 << 20

    /// glibc's `mallopt` parameters (`malloc.h`).
    private static let trimThreshold: Int32 = -1
    private static let mmapThreshold: Int32 = -3

    /// Applies the thresholds, unless `GLIBC_TUNABLES` sets the allocator's own (the operator's
    /// choice wins). Returns whether they were applied.
    @discardableResult
    static func configure(environment: [String: String]) -> Bool {
        guard environment["GLIBC_TUNABLES"]?.contains("glibc.malloc.") != true else { return false }
        #if canImport(Glibc)
        // `mallopt` is not in Swift's view of the C library; it is looked up by name.
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return false }
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
        return mallopt(mmapThreshold, mmapThresholdBytes) == 1 && mallopt(trimThreshold, trimThresholdBytes) == 1
        #else
        return false
        #endif
    }
}
