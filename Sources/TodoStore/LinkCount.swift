import Foundation

/// How many names an open file has left: zero once it is deleted while open.
///
/// Asked with `statx(2)` for the link count alone, never with `fstat(2)`. On Linux 6.13 and
/// later a file system with multigrain timestamps (ext4, XFS, btrfs, tmpfs) gives a file whose
/// change time someone has read a fine-grained time at its next write: every write then changes
/// its modification time, which dirties the inode, and on ext4 without a journal the next
/// `fdatasync` writes the inode's block too. An `fstat` after every sync of the WAL (it reads
/// both times) cost each commit one more write to the disk (2.0 → 3.0 device writes per commit,
/// 150 → 220 µs, in a C loop on this machine's disk) and one client saving edits about a seventh
/// of its rate; `statx` asked for the link count only does not read the times.
enum LinkCount {
    /// The link count of the file open at `descriptor`, or nil when it cannot be read.
    static func of(descriptor: Int32) -> UInt32? {
        if let statx = statxFunction {
            // `struct statx` (linux/stat.h): 256 bytes, `stx_mask` at 0, `stx_nlink` at 16.
            let answered: UInt32? = withUnsafeTemporaryAllocation(byteCount: 256, alignment: 8) { buffer in
                guard let base = buffer.baseAddress else { return nil }
                base.initializeMemory(as: UInt8.self, repeating: 0, count: 256)
                guard statx(descriptor, "", emptyPath, nlinkMask, base) == 0,
                    base.load(fromByteOffset: 0, as: UInt32.self) & nlinkMask != 0
                else { return nil }
                return base.load(fromByteOffset: 16, as: UInt32.self)
            }
            if let answered { return answered }
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        return UInt32(truncatingIfNeeded: status.st_nlink)
    }

    /// Whether the link count is asked with `statx` (false: with `fstat`, which reads the
    /// times, where the C library has no `statx`).
    static var asksWithoutTimes: Bool { statxFunction != nil }

    private typealias Statx =
        @convention(c) (
            Int32, UnsafePointer<CChar>, Int32, UInt32, UnsafeMutableRawPointer
        ) -> Int32

    /// glibc's `statx` (2.28 and later), found at run time: Swift's Glibc module does not
    /// declare it.
    private static let statxFunction: Statx? = dlsym(nil, "statx").map { unsafeBitCast($0, to: Statx.self) }

    /// `AT_EMPTY_PATH` and `STATX_NLINK` (linux/fcntl.h, linux/stat.h).
    private static let emptyPath: Int32 = 0x1000
    private static let nlinkMask: UInt32 = 0x4
}
