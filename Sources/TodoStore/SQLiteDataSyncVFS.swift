import Foundation
import VaporCSQLite

/// The writer's VFS: SQLite's own unix VFS, except that its WAL is made durable with
/// `fdatasync(2)` instead of `fsync(2)`.
///
/// The SQLite that sqlite-nio bundles is built without `HAVE_FDATASYNC`, so every commit's sync
/// of the WAL is a full `fsync`, which on ext4 also commits the file system's journal whenever
/// the WAL's modification time has moved (every few milliseconds under load). `fdatasync`
/// still makes the WAL's data and its size durable, which is all a WAL commit needs; SQLite
/// built with `HAVE_FDATASYNC` (as Linux distributions build it) does the same, and so does
/// redis's `appendfsync always`. docs/DECISIONS.md has the figures.
///
/// Only WAL files are changed, and each one's first sync still goes through SQLite's own
/// (which, for a file it has just created, also syncs the directory). Every other file and
/// call is SQLite's unix VFS untouched: files are opened by it, with its own VFS object, so its
/// locks and shared memory are the ones the other connections of the process use.
final class SQLiteDataSyncVFS: @unchecked Sendable {
    // Invariant: `base` and `stateOffset` are set before the VFS is registered and never change;
    // `patched` changes only under `patchedLock`.
    static let name = "todostream-datasync"

    /// The registered VFS, or nil when SQLite has no unix VFS to wrap (then the default is used).
    static let shared: SQLiteDataSyncVFS? = make()

    /// SQLite's unix VFS, which opens every file.
    let base: UnsafeMutablePointer<sqlite3_vfs>
    /// Where this VFS's per-file state starts in a file object: after the unix file's own bytes.
    let stateOffset: Int
    /// The unix VFS's methods for the WAL files it opens, and the copy whose sync and close are
    /// ours (made for the first WAL file).
    private var patched: (unix: UnsafePointer<sqlite3_io_methods>, copy: UnsafeMutablePointer<sqlite3_io_methods>)?
    private let patchedLock = NSLock()

    /// What a WAL file of this VFS keeps after the unix file: the unix VFS's methods for it
    /// (which its sync and close end in), a descriptor of its own on the same file (for
    /// `fdatasync`), and whether the first sync, SQLite's own, has happened.
    struct FileState {
        let unix: UnsafePointer<sqlite3_io_methods>
        let descriptor: Int32
        var syncedOnce: Bool
    }

    private init(base: UnsafeMutablePointer<sqlite3_vfs>, stateOffset: Int) {
        self.base = base
        self.stateOffset = stateOffset
    }

    private static func make() -> SQLiteDataSyncVFS? {
        guard let base = sqlite_nio_sqlite3_vfs_find("unix"), base.pointee.xOpen != nil else { return nil }
        let alignment = MemoryLayout<FileState>.alignment
        let stateOffset = (Int(base.pointee.szOsFile) + alignment - 1) / alignment * alignment
        let vfs = SQLiteDataSyncVFS(base: base, stateOffset: stateOffset)
        let wrapper = UnsafeMutablePointer<sqlite3_vfs>.allocate(capacity: 1)
        wrapper.initialize(to: base.pointee)
        wrapper.pointee.szOsFile = Int32(stateOffset + MemoryLayout<FileState>.size)
        wrapper.pointee.zName = UnsafePointer(strdup(name))
        wrapper.pointee.pNext = nil
        wrapper.pointee.xOpen = dataSyncOpen
        guard sqlite_nio_sqlite3_vfs_register(wrapper, 0) == SQLITE_OK else { return nil }
        return vfs
    }

    /// The copy of `unix` (the methods the unix VFS gave a WAL file) with this VFS's sync and
    /// close; nil when the unix VFS gave another WAL file other methods (then this one is
    /// left as it is).
    func methods(replacing unix: UnsafePointer<sqlite3_io_methods>) -> UnsafeMutablePointer<sqlite3_io_methods>? {
        patchedLock.lock()
        defer { patchedLock.unlock() }
        if let patched { return patched.unix == unix ? patched.copy : nil }
        let copy = UnsafeMutablePointer<sqlite3_io_methods>.allocate(capacity: 1)
        copy.initialize(to: unix.pointee)
        copy.pointee.xSync = dataSyncSync
        copy.pointee.xClose = dataSyncClose
        patched = (unix, copy)
        return copy
    }

    func state(of file: UnsafeMutablePointer<sqlite3_file>) -> UnsafeMutablePointer<FileState> {
        UnsafeMutableRawPointer(file).advanced(by: stateOffset).assumingMemoryBound(to: FileState.self)
    }
}

/// SQLite's extended codes for a failed sync and close (`SQLITE_IOERR_FSYNC`,
/// `SQLITE_IOERR_CLOSE`), which Swift does not import.
private let ioErrorSync = SQLITE_IOERR | (4 << 8)
private let ioErrorClose = SQLITE_IOERR | (16 << 8)

/// Opens with the unix VFS; a WAL file also gets a descriptor of its own and the copy of the
/// methods whose sync is `fdatasync`.
private func dataSyncOpen(
    _ vfs: UnsafeMutablePointer<sqlite3_vfs>?,
    _ name: sqlite3_filename?,
    _ file: UnsafeMutablePointer<sqlite3_file>?,
    _ flags: Int32,
    _ outFlags: UnsafeMutablePointer<Int32>?
) -> Int32 {
    guard let shared = SQLiteDataSyncVFS.shared, let open = shared.base.pointee.xOpen else { return SQLITE_CANTOPEN }
    let opened = open(shared.base, name, file, flags, outFlags)
    guard opened == SQLITE_OK, flags & SQLITE_OPEN_WAL != 0, let name, let file, let unix = file.pointee.pMethods
    else { return opened }
    // A second descriptor on a file is safe only where the process holds no POSIX lock on it
    // (closing any descriptor drops them all): SQLite locks the database and its shared
    // memory, never the WAL, so this one is opened for WAL files only.
    let descriptor = Foundation.open(name, O_RDWR | O_CLOEXEC)
    guard descriptor >= 0 else { return opened }
    guard let methods = shared.methods(replacing: unix) else {
        close(descriptor)
        return opened
    }
    shared.state(of: file).initialize(to: .init(unix: unix, descriptor: descriptor, syncedOnce: false))
    file.pointee.pMethods = UnsafePointer(methods)
    return opened
}

/// Syncs a WAL file: the first time as SQLite does, then with `fdatasync`.
private func dataSyncSync(_ file: UnsafeMutablePointer<sqlite3_file>?, _ flags: Int32) -> Int32 {
    guard let file, let shared = SQLiteDataSyncVFS.shared else { return ioErrorSync }
    let state = shared.state(of: file)
    if !state.pointee.syncedOnce {
        guard let sync = state.pointee.unix.pointee.xSync else { return ioErrorSync }
        let synced = sync(file, flags)
        if synced == SQLITE_OK { state.pointee.syncedOnce = true }
        return synced
    }
    while true {
        if fdatasync(state.pointee.descriptor) == 0 { return SQLITE_OK }
        if errno != EINTR { return ioErrorSync }
    }
}

/// Closes a WAL file's own descriptor, then the file as SQLite does.
private func dataSyncClose(_ file: UnsafeMutablePointer<sqlite3_file>?) -> Int32 {
    guard let file, let shared = SQLiteDataSyncVFS.shared else { return ioErrorClose }
    let state = shared.state(of: file)
    guard let close = state.pointee.unix.pointee.xClose else { return ioErrorClose }
    Foundation.close(state.pointee.descriptor)
    state.deinitialize(count: 1)
    return close(file)
}
