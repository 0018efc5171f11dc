import Foundation
import VaporCSQLite

/// The writer's VFS: SQLite's own unix VFS, except that its WAL is made durable with
/// `fdatasync(2)` instead of `fsync(2)`, and, where the writer asks for it, the WAL frames of a
/// commit reach the file in one `pwrite(2)` instead of two per frame.
///
/// **fdatasync.** The SQLite that sqlite-nio bundles is built without `HAVE_FDATASYNC`, so
/// every commit's sync of the WAL is a full `fsync`, which on ext4 also commits the file
/// system's journal whenever the WAL's modification time has moved (every few milliseconds
/// under load). `fdatasync` still makes the WAL's data and its size durable, which is all a WAL
/// commit needs; SQLite built with `HAVE_FDATASYNC` (as Linux distributions build it) does the
/// same, and so does redis's `appendfsync always`. docs/DECISIONS.md has the figures.
///
/// **Gathered frame writes.** SQLite writes each WAL frame as two calls (its 24-byte header,
/// then the page), all of a commit's frames one after the other, and then syncs. With a write
/// buffer (`name(writeBufferBytes:)`), writes that continue the previous one are gathered in
/// memory and reach the file as one write, made before anything else is done with the file: a
/// sync, a read, a size, a truncation, a file control, a close, or a write elsewhere in it (and
/// whenever the buffer is full). So the sync still covers every frame before it, and nothing
/// reads the file past a write that has not reached it. This is safe only where every commit
/// syncs the WAL (`synchronous=FULL`): only the sync makes the frames of a commit reach the
/// file before other connections are told of them (through the WAL index), so the writer asks
/// for a buffer only then.
///
/// Only WAL files are changed, and each one's first sync still goes through SQLite's own
/// (which, for a file it has just created, also syncs the directory). Every other file and
/// call is SQLite's unix VFS untouched: files are opened by it, with its own VFS object, so its
/// locks and shared memory are the ones the other connections of the process use.
final class SQLiteDataSyncVFS: @unchecked Sendable {
    // Invariant: `base` and `stateOffset` are set before the VFS is registered and never change;
    // `patched` and `registered` change only under `lock`.
    static let name = "todostream-datasync"

    /// The registered VFS, or nil when SQLite has no unix VFS to wrap (then the default is used).
    static let shared: SQLiteDataSyncVFS? = make()

    /// A WAL write buffer larger than this is made this size (one commit's frames of a batch of
    /// a few hundred requests fit in far less).
    static let maxWriteBufferBytes = 64 << 20

    /// SQLite's unix VFS, which opens every file.
    let base: UnsafeMutablePointer<sqlite3_vfs>
    /// Where this VFS's per-file state starts in a file object: after the unix file's own bytes.
    let stateOffset: Int
    /// The unix VFS's methods for the WAL files it opens, and the copy whose methods are ours
    /// (made for the first WAL file).
    private var patched: (unix: UnsafePointer<sqlite3_io_methods>, copy: UnsafeMutablePointer<sqlite3_io_methods>)?
    /// The VFS registered for each write buffer size other than none (`name(writeBufferBytes:)`),
    /// by size. Each is registered once and stays for the process.
    private var registered: [Int: String] = [:]
    private let lock = NSLock()

    /// What a WAL file of this VFS keeps after the unix file: the unix VFS's methods for it
    /// (which every method ends in), a descriptor of its own on the same file (for
    /// `fdatasync`), whether the first sync, SQLite's own, has happened, and the writes gathered
    /// and not yet made.
    struct FileState {
        let unix: UnsafePointer<sqlite3_io_methods>
        let descriptor: Int32
        var syncedOnce: Bool
        var gathered: GatheredWrites
    }

    /// Writes that continue one another, held until the file is used otherwise (`capacity`
    /// zero: none are held). The memory is allocated at the first write and freed at close.
    struct GatheredWrites {
        let capacity: Int
        var bytes: UnsafeMutableRawPointer?
        /// Where in the file the held bytes go, and how many there are.
        var offset: Int64 = 0
        var count = 0
        /// Since the file opened: SQLite's writes that were held, and the writes that made them.
        var held = 0
        var made = 0
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
        guard vfs.register(name: name, writeBufferBytes: 0) else { return nil }
        return vfs
    }

    /// Registers a wrapper of the unix VFS under `name` whose WAL files gather writes in a
    /// buffer of `writeBufferBytes` (kept in the wrapper's `pAppData`, which SQLite leaves to
    /// the VFS).
    private func register(name: String, writeBufferBytes: Int) -> Bool {
        let wrapper = UnsafeMutablePointer<sqlite3_vfs>.allocate(capacity: 1)
        wrapper.initialize(to: base.pointee)
        wrapper.pointee.szOsFile = Int32(stateOffset + MemoryLayout<FileState>.size)
        wrapper.pointee.zName = UnsafePointer(strdup(name))
        wrapper.pointee.pNext = nil
        wrapper.pointee.pAppData = UnsafeMutableRawPointer(bitPattern: writeBufferBytes)
        wrapper.pointee.xOpen = dataSyncOpen
        return sqlite_nio_sqlite3_vfs_register(wrapper, 0) == SQLITE_OK
    }

    /// The name of the VFS whose WAL files gather writes in a buffer of `writeBufferBytes`
    /// (at most `maxWriteBufferBytes`; zero or less: none), registered at the first call for
    /// that size; nil when it cannot be.
    func name(writeBufferBytes: Int) -> String? {
        let size = min(max(writeBufferBytes, 0), Self.maxWriteBufferBytes)
        guard size > 0 else { return Self.name }
        lock.lock()
        defer { lock.unlock() }
        if let name = registered[size] { return name }
        let name = "\(Self.name)-gathered-\(size)"
        guard register(name: name, writeBufferBytes: size) else { return nil }
        registered[size] = name
        return name
    }

    /// The copy of `unix` (the methods the unix VFS gave a WAL file) with this VFS's methods;
    /// nil when the unix VFS gave another WAL file other methods (then this one is left as it
    /// is).
    func methods(replacing unix: UnsafePointer<sqlite3_io_methods>) -> UnsafeMutablePointer<sqlite3_io_methods>? {
        lock.lock()
        defer { lock.unlock() }
        if let patched { return patched.unix == unix ? patched.copy : nil }
        let copy = UnsafeMutablePointer<sqlite3_io_methods>.allocate(capacity: 1)
        copy.initialize(to: unix.pointee)
        copy.pointee.xSync = dataSyncSync
        copy.pointee.xClose = dataSyncClose
        copy.pointee.xWrite = gatheringWrite
        copy.pointee.xRead = gatheringRead
        copy.pointee.xTruncate = gatheringTruncate
        copy.pointee.xFileSize = gatheringFileSize
        copy.pointee.xFileControl = gatheringFileControl
        if unix.pointee.iVersion >= 3, unix.pointee.xFetch != nil { copy.pointee.xFetch = gatheringFetch }
        patched = (unix, copy)
        return copy
    }

    /// The link count of `file` when it is a WAL file of this VFS (its methods are ours), asked
    /// on the VFS's own descriptor (`LinkCount`); nil for any other file.
    func walLinkCount(_ file: UnsafeMutablePointer<sqlite3_file>) -> UInt32? {
        let copy = lock.withLock { patched?.copy }
        guard let copy, let methods = file.pointee.pMethods, methods == UnsafePointer(copy) else { return nil }
        return LinkCount.of(descriptor: state(of: file).pointee.descriptor)
    }

    func state(of file: UnsafeMutablePointer<sqlite3_file>) -> UnsafeMutablePointer<FileState> {
        UnsafeMutableRawPointer(file).advanced(by: stateOffset).assumingMemoryBound(to: FileState.self)
    }
}

/// SQLite's extended codes for a failed read, write, sync, truncation, size and close
/// (`SQLITE_IOERR_READ`, `_WRITE`, `_FSYNC`, `_TRUNCATE`, `_FSTAT`, `_CLOSE`), which Swift does
/// not import.
private let ioErrorRead = SQLITE_IOERR | (1 << 8)
private let ioErrorWrite = SQLITE_IOERR | (3 << 8)
private let ioErrorSync = SQLITE_IOERR | (4 << 8)
private let ioErrorTruncate = SQLITE_IOERR | (6 << 8)
private let ioErrorFileSize = SQLITE_IOERR | (7 << 8)
private let ioErrorClose = SQLITE_IOERR | (16 << 8)

/// Opens with the unix VFS; a WAL file also gets a descriptor of its own, the copy of the
/// methods whose sync is `fdatasync`, and the write buffer of the VFS it was opened with.
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
    let capacity = Int(bitPattern: vfs?.pointee.pAppData)
    shared.state(of: file).initialize(
        to: .init(unix: unix, descriptor: descriptor, syncedOnce: false, gathered: .init(capacity: capacity))
    )
    file.pointee.pMethods = UnsafePointer(methods)
    return opened
}

/// Makes the writes a WAL file holds, with `pwrite(2)` on the file's own descriptor (the unix
/// VFS's write takes less than 128 KiB at once); SQLite's result code.
private func writeGathered(_ state: UnsafeMutablePointer<SQLiteDataSyncVFS.FileState>) -> Int32 {
    let gathered = state.pointee.gathered
    guard gathered.count > 0, let bytes = gathered.bytes else { return SQLITE_OK }
    state.pointee.gathered.count = 0
    state.pointee.gathered.made += 1
    var written = 0
    while written < gathered.count {
        let result = pwrite(
            state.pointee.descriptor,
            bytes + written,
            gathered.count - written,
            off_t(gathered.offset) + off_t(written)
        )
        if result > 0 {
            written += result
        } else if result < 0, errno == EINTR {
            continue
        } else {
            return result < 0 && errno != ENOSPC ? ioErrorWrite : SQLITE_FULL
        }
    }
    return SQLITE_OK
}

/// Runs `body` on a WAL file with its held writes made first; their result code when they
/// fail (`fallback` when there is no file).
private func afterHeldWrites(
    _ file: UnsafeMutablePointer<sqlite3_file>?,
    fallback: Int32,
    _ body: (UnsafeMutablePointer<sqlite3_file>, UnsafePointer<sqlite3_io_methods>) -> Int32
) -> Int32 {
    guard let file, let shared = SQLiteDataSyncVFS.shared else { return fallback }
    let state = shared.state(of: file)
    let made = writeGathered(state)
    guard made == SQLITE_OK else { return made }
    return body(file, state.pointee.unix)
}

/// Holds a write that continues the held ones (or starts them) while the buffer has room;
/// otherwise makes the held ones, then this one (held, when it fits the buffer).
private func gatheringWrite(
    _ file: UnsafeMutablePointer<sqlite3_file>?,
    _ data: UnsafeRawPointer?,
    _ amount: Int32,
    _ offset: sqlite3_int64
) -> Int32 {
    guard let file, let data, let shared = SQLiteDataSyncVFS.shared else { return ioErrorWrite }
    let state = shared.state(of: file)
    let capacity = state.pointee.gathered.capacity
    let count = Int(amount)
    /// The write made as it is, after the held ones.
    func writeThrough() -> Int32 {
        afterHeldWrites(file, fallback: ioErrorWrite) { file, unix in
            unix.pointee.xWrite.map { $0(file, data, amount, offset) } ?? ioErrorWrite
        }
    }
    guard capacity > 0, count <= capacity else { return writeThrough() }
    let gathered = state.pointee.gathered
    let continues = gathered.count > 0 && offset == gathered.offset + Int64(gathered.count)
    if !continues || gathered.count + count > capacity {
        let made = writeGathered(state)
        guard made == SQLITE_OK else { return made }
        state.pointee.gathered.offset = offset
    }
    if state.pointee.gathered.bytes == nil {
        guard let bytes = malloc(capacity) else { return writeThrough() }
        state.pointee.gathered.bytes = bytes
    }
    guard let bytes = state.pointee.gathered.bytes else { return ioErrorWrite }
    (bytes + state.pointee.gathered.count).copyMemory(from: data, byteCount: count)
    state.pointee.gathered.count += count
    state.pointee.gathered.held += 1
    return SQLITE_OK
}

private func gatheringRead(
    _ file: UnsafeMutablePointer<sqlite3_file>?,
    _ data: UnsafeMutableRawPointer?,
    _ amount: Int32,
    _ offset: sqlite3_int64
) -> Int32 {
    afterHeldWrites(file, fallback: ioErrorRead) { file, unix in
        unix.pointee.xRead.map { $0(file, data, amount, offset) } ?? ioErrorRead
    }
}

private func gatheringTruncate(_ file: UnsafeMutablePointer<sqlite3_file>?, _ size: sqlite3_int64) -> Int32 {
    afterHeldWrites(file, fallback: ioErrorTruncate) { file, unix in
        unix.pointee.xTruncate.map { $0(file, size) } ?? ioErrorTruncate
    }
}

private func gatheringFileSize(
    _ file: UnsafeMutablePointer<sqlite3_file>?,
    _ size: UnsafeMutablePointer<sqlite3_int64>?
) -> Int32 {
    afterHeldWrites(file, fallback: ioErrorFileSize) { file, unix in
        unix.pointee.xFileSize.map { $0(file, size) } ?? ioErrorFileSize
    }
}

private func gatheringFileControl(
    _ file: UnsafeMutablePointer<sqlite3_file>?,
    _ operation: Int32,
    _ argument: UnsafeMutableRawPointer?
) -> Int32 {
    afterHeldWrites(file, fallback: SQLITE_NOTFOUND) { file, unix in
        unix.pointee.xFileControl.map { $0(file, operation, argument) } ?? SQLITE_NOTFOUND
    }
}

private func gatheringFetch(
    _ file: UnsafeMutablePointer<sqlite3_file>?,
    _ offset: sqlite3_int64,
    _ amount: Int32,
    _ pages: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> Int32 {
    afterHeldWrites(file, fallback: ioErrorRead) { file, unix in
        unix.pointee.xFetch.map { $0(file, offset, amount, pages) } ?? ioErrorRead
    }
}

/// Syncs a WAL file, its held writes made first: the first time as SQLite does, then with
/// `fdatasync`.
private func dataSyncSync(_ file: UnsafeMutablePointer<sqlite3_file>?, _ flags: Int32) -> Int32 {
    guard let file, let shared = SQLiteDataSyncVFS.shared else { return ioErrorSync }
    let state = shared.state(of: file)
    let made = writeGathered(state)
    guard made == SQLITE_OK else { return made }
    if !state.pointee.syncedOnce {
        guard let sync = state.pointee.unix.pointee.xSync else { return ioErrorSync }
        let synced = sync(file, flags)
        if synced == SQLITE_OK { state.pointee.syncedOnce = true }
        return synced
    }
    while true {
        if fdatasync(state.pointee.descriptor) == 0 { break }
        if errno != EINTR { return ioErrorSync }
    }
    // A WAL deleted while open (no link left) takes every commit in it with it at the next
    // start: the commit fails instead of being acknowledged (SQLite updates its WAL index only
    // after the sync, so the frames written are not part of the database). Asked without
    // reading the file's times, which would make the next sync write its inode (`LinkCount`).
    if LinkCount.of(descriptor: state.pointee.descriptor) == 0 { return ioErrorSync }
    return SQLITE_OK
}

/// Makes a WAL file's held writes, closes its own descriptor and frees its buffer, then closes
/// the file as SQLite does.
private func dataSyncClose(_ file: UnsafeMutablePointer<sqlite3_file>?) -> Int32 {
    guard let file, let shared = SQLiteDataSyncVFS.shared else { return ioErrorClose }
    let state = shared.state(of: file)
    guard let close = state.pointee.unix.pointee.xClose else { return ioErrorClose }
    let made = writeGathered(state)
    Foundation.close(state.pointee.descriptor)
    free(state.pointee.gathered.bytes)
    state.deinitialize(count: 1)
    let closed = close(file)
    return made == SQLITE_OK ? closed : made
}
