import Foundation
import Testing

@testable import TodoStore

/// The link count of an open file, as the WAL's sync asks it after each `fdatasync`.
@Suite struct LinkCountTests {
    /// On Linux the count is asked with `statx` for it alone: `fstat` reads the file's times,
    /// which makes the next sync write the inode too (one more disk write per commit).
    @Test func isAskedWithoutReadingTheTimes() {
        #expect(LinkCount.asksWithoutTimes)
    }

    @Test func countsTheNamesOfAnOpenFileAndNoneOnceItIsDeleted() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("linkcount-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("wal").path
        let descriptor = open(path, O_RDWR | O_CREAT, 0o600)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        #expect(LinkCount.of(descriptor: descriptor) == 1)
        let second = directory.appendingPathComponent("second name").path
        #expect(link(path, second) == 0)
        #expect(LinkCount.of(descriptor: descriptor) == 2)
        #expect(unlink(path) == 0)
        #expect(unlink(second) == 0)
        #expect(LinkCount.of(descriptor: descriptor) == 0)
    }

    @Test func aDescriptorThatIsNotOpenHasNoCount() {
        #expect(LinkCount.of(descriptor: -1) == nil)
    }
}
