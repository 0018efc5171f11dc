import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// One daemon per SQLite data directory: an exclusive `flock` on `todostreamd.lock` in it,
/// held while the store is open. The kernel drops it when the process ends, however it ends
/// (`kill -9` included), so a stale lock file never keeps a daemon from starting. A second
/// daemon on the same directory would write the same journal seqs as the first: its start
/// fails instead, naming the process that holds the directory.
final class DirectoryLock: Sendable {
    static let fileName = "todostreamd.lock"

    private let descriptor: NIOLockedValueBox<Int32?>

    private init(descriptor: Int32) {
        self.descriptor = NIOLockedValueBox(descriptor)
    }

    /// Takes the lock on `directory` (which must exist), or throws `StoreError` saying who
    /// holds it.
    static func acquire(in directory: String) throws(StoreError) -> DirectoryLock {
        let path = (directory as NSString).appendingPathComponent(fileName)
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw StoreError(message: "cannot create the lock file \(path) in data directory \(directory)")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let holder = readHolder(descriptor)
            close(descriptor)
            throw StoreError(
                message: "data directory \(directory) is in use by another todostreamd"
                    + (holder.map { " (pid \($0))" } ?? "")
                    + "; one SQLite database serves one daemon (several daemons share PostgreSQL)"
            )
        }
        // Who holds it, for the message above; the lock itself is the flock.
        let pid = Array("\(getpid())\n".utf8)
        if ftruncate(descriptor, 0) == 0 {
            _ = pid.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        }
        return DirectoryLock(descriptor: descriptor)
    }

    /// Gives the directory up (closing the file drops the lock). Idempotent.
    func release() {
        guard
            let descriptor = descriptor.withLockedValue({ value -> Int32? in
                defer { value = nil }
                return value
            })
        else { return }
        close(descriptor)
    }

    deinit {
        release()
    }

    private static func readHolder(_ descriptor: Int32) -> Int32? {
        var bytes = [UInt8](repeating: 0, count: 32)
        let count = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let text = String(decoding: bytes[..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return Int32(text)
    }
}
