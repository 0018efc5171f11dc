import EventStream
import Foundation
import NIOCore
import SQLiteNIO
import Testing

@testable import TodoApp
@testable import TodoStore

func temporaryDirectory() -> String {
    let path = NSTemporaryDirectory() + "todostream-test-" + UUID().uuidString
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

func create(_ store: GroupCommitStore, _ title: String) async throws -> SavedTodo {
    try await store.write(TodoWrite(id: UUID(), expectedVersion: 0, change: .update(TodoEdit(title: title)))).get()
}

@Suite struct SQLiteStoreTests {
    @Test func writesSurviveAProcessThatNeverClosedItsHandles() async throws {
        let directory = temporaryDirectory()
        // Without the directory's lock, which the kernel would drop at the kill.
        let first = try await GroupCommitStore.sqlite(directory: directory, lockDirectory: false)
        let saved = try await create(first, "Survive")
        _ = try await first.write(TodoWrite(id: saved.todo.id, expectedVersion: 1, change: .toggleComplete)).get()
        // `first` is abandoned without close, as after kill -9: a new store must see the commit.
        let second = try await GroupCommitStore.sqlite(directory: directory)
        let todos = try await second.readTodos(id: nil)
        #expect(todos.map(\.title) == ["Survive"])
        #expect(todos.first?.complete == true)
        #expect(todos.first?.version == 2)
        let position = try await second.position()
        #expect(position.head == 2)
        #expect(position.epoch == (try await first.position()).epoch)
        let entries = try await second.entries(after: 0, through: 2)
        #expect(entries.map(\.seq) == [1, 2])
        #expect(entries.last?.payload == TodoWireCodec.broadcastRecord(for: todos[0]).payload)
        await second.close()
        await first.close()
    }

    /// Another process with the database open in a read transaction (a backup, an operator's
    /// `sqlite3`) neither blocks writes nor holds up the close: the WAL is left for the next
    /// start (sqlite-nio's own busy handler would have waited for the reader for ever).
    @Test(.timeLimit(.minutes(1))) func aReaderInAnotherConnectionDoesNotHoldUpTheClose() async throws {
        let directory = temporaryDirectory()
        let store = try await GroupCommitStore.sqlite(directory: directory)
        _ = try await create(store, "Before the backup")
        let path = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName)
        let backup = try await SQLiteConnection.open(storage: .file(path: path))
        try await backup.exec("BEGIN")
        let counted = try await backup.query("SELECT count(*) AS n FROM journal").first?.column("n")?.integer
        #expect(counted == 1)
        _ = try await create(store, "During the backup")
        await store.close()
        try await backup.exec("COMMIT")
        try await backup.close()
        let again = try await GroupCommitStore.sqlite(directory: directory)
        #expect(try await again.readTodos(id: nil).count == 2)
        await again.close()
    }

    /// A database of the schema before rows could wait (version 9): its rows and journal are
    /// what the store opens with, and its writes go on after them.
    @Test func aDatabaseFromBeforeRowsCouldWaitOpensWithItsRowsAndJournal() async throws {
        let directory = temporaryDirectory()
        let path = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName)
        let connection = try await SQLiteConnection.open(storage: .file(path: path))
        try await connection.exec("PRAGMA journal_mode=WAL")
        for step in Migrations.steps[..<9] {
            for statement in step { try await connection.exec(statement) }
        }
        try await connection.exec("PRAGMA user_version = 9")
        let old = Todo(createdAt: Timestamp(millisecondsSince1970: 1_700_000_000_000), title: "old", version: 1)
        let record = TodoWireCodec.broadcastRecord(for: old)
        try await connection.exec(
            "INSERT INTO todos VALUES (?, 1, ?, 'old', '', 'normal', NULL, 0, 1)",
            [.text(old.id.lowercased), .integer(1_700_000_000_000)]
        )
        try await connection.exec(
            "INSERT INTO journal (seq, type, payload, recorded_at) VALUES (1, ?, ?, 1)",
            [.text(record.type), .blob(ByteBuffer(bytes: record.payload))]
        )
        try await connection.exec("UPDATE meta SET value = '1' WHERE key = 'head'")
        try await connection.close()

        // Without the directory's lock, which the kernel would drop at the kill below.
        let store = try await GroupCommitStore.sqlite(directory: directory, lockDirectory: false)
        #expect(try await store.readTodos(id: nil) == [old])
        #expect(try await store.position().head == 1)
        let saved = try await store.write(TodoWrite(id: old.id, expectedVersion: 1, change: .toggleComplete)).get()
        #expect(saved.seq == 2)
        // Abandoned as after kill -9: the change is in the journal only, and the next store applies it.
        let next = try await GroupCommitStore.sqlite(directory: directory)
        #expect(try await next.readTodos(id: nil) == [saved.todo])
        await next.close()
        await store.close()
    }

    /// One store per directory: a second open while the first holds it fails, naming the
    /// process; once the first is closed, the directory opens again.
    @Test func aSecondStoreOnTheSameDirectoryIsRefused() async throws {
        let directory = temporaryDirectory()
        let first = try await GroupCommitStore.sqlite(directory: directory)
        _ = try await create(first, "held")
        do {
            let second = try await GroupCommitStore.sqlite(directory: directory)
            await second.close()
            Issue.record("a second store opened a directory in use")
        } catch let error as StoreError {
            #expect(error.message.contains("is in use by another todostreamd (pid \(getpid()))"), "\(error.message)")
        }
        // The refused open changed nothing: the first writes on.
        #expect(try await create(first, "still mine").seq == 2)
        await first.close()
        let again = try await GroupCommitStore.sqlite(directory: directory)
        #expect(try await again.readTodos(id: nil).count == 2)
        await again.close()
    }

    @Test func concurrentWritesGetGaplessSeqsAndMatchingJournalEntries() async throws {
        let directory = temporaryDirectory()
        let store = try await GroupCommitStore.sqlite(directory: directory)
        let seqs = try await withThrowingTaskGroup(of: UInt64.self) { group in
            for index in 0..<300 { group.addTask { try await create(store, "todo \(index)").seq } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(seqs.sorted() == Array(1...300))
        let entries = try await store.entries(after: 0, through: 300)
        #expect(entries.map(\.seq) == Array(1...300))
        let todos = try await store.readTodos(id: nil)
        #expect(todos.count == 300)
        // Newest first: createdAt descending, creation order breaking ties.
        let createdAt = todos.map(\.createdAt)
        #expect(createdAt == createdAt.sorted(by: >))
        await store.close()
    }

    @Test func aFailedWriteInABatchDoesNotTakeASeq() async throws {
        let store = try await GroupCommitStore.sqlite(directory: temporaryDirectory())
        let saved = try await create(store, "a")
        let conflict = await store.write(TodoWrite(id: saved.todo.id, expectedVersion: 7, change: .delete))
        #expect((try? conflict.get()) == nil)
        #expect(try await create(store, "b").seq == 2)
        await store.close()
    }

    /// Under a steady stream of commits the WAL starts over after the checkpoints copy it, so
    /// its file stays bounded. Before, each background copy ended with newer frames behind it,
    /// the WAL never restarted, and this run left a WAL of about 55 MiB (a steady load grew it
    /// by hundreds of MiB in minutes). The run writes about 24,000 frames (100 MiB); whatever the
    /// copies do, the writer copies the tail at `limitFrames` (`CheckpointStateMachine`), so the
    /// file stays under that and one commit's frames more.
    @Test(arguments: [false, true])
    func theWALStartsOverUnderASteadyStreamOfCommits(synchronousFull: Bool) async throws {
        let directory = temporaryDirectory()
        let store = try await GroupCommitStore.sqlite(directory: directory, synchronousFull: synchronousFull)
        for index in 0..<6_000 { _ = try await create(store, "t\(index)") }
        let wal = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName + "-wal")
        let size = try #require(try FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int)
        // A frame is a page and a 24-byte header; the file has a 32-byte header.
        let pageBytes = GroupCommitStore.defaultSQLitePageBytes
        let frameBytes = pageBytes + 24
        let limitFrames = SQLiteBackend.limitFrames(pageBytes: pageBytes)
        #expect(size <= (limitFrames + 64) * frameBytes + 32, "the WAL grew to \(size) bytes")
        #expect(try await store.readTodos(id: nil).count == 6_000)
        await store.close()
    }

    /// The page size the database file has, read on a connection of its own.
    private func pageSize(in directory: String) async throws -> Int? {
        let path = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName)
        let connection = try await SQLiteConnection.open(storage: .file(path: path))
        defer { Task { try? await connection.close() } }
        return try await connection.query("PRAGMA page_size").first?.column("page_size")?.integer
    }

    /// A database created now gets the page size asked for (8 KiB unless told otherwise), and
    /// keeps its commits across a reopening.
    @Test(arguments: [nil, 4_096, 16_384])
    func aNewDatabaseHasThePageSizeAskedFor(pageBytes: Int?) async throws {
        let directory = temporaryDirectory()
        let store =
            if let pageBytes {
                try await GroupCommitStore.sqlite(directory: directory, pageBytes: pageBytes)
            } else {
                try await GroupCommitStore.sqlite(directory: directory)
            }
        for index in 0..<200 { _ = try await create(store, "t\(index)") }
        await store.close()
        #expect(try await pageSize(in: directory) == pageBytes ?? 8_192)
        let reopened = try await GroupCommitStore.sqlite(directory: directory)
        #expect(try await reopened.readTodos(id: nil).count == 200)
        #expect(try await reopened.entries(after: 0, through: 200).map(\.seq) == Array(1...200))
        await reopened.close()
    }

    /// A database keeps the page size it was created with when a store asks for another one
    /// later: its todos and journal read as before, and its writes go on.
    @Test func anExistingDatabaseKeepsItsPageSize() async throws {
        let directory = temporaryDirectory()
        let first = try await GroupCommitStore.sqlite(directory: directory, pageBytes: 4_096)
        for index in 0..<50 { _ = try await create(first, "t\(index)") }
        await first.close()
        let second = try await GroupCommitStore.sqlite(directory: directory, pageBytes: 16_384)
        for index in 50..<100 { _ = try await create(second, "t\(index)") }
        #expect(try await second.readTodos(id: nil).count == 100)
        #expect(try await second.position().head == 100)
        await second.close()
        #expect(try await pageSize(in: directory) == 4_096)
    }

    @Test(arguments: [0, 256, 6_000, 131_072])
    func aPageSizeSQLiteWouldNotTakeIsRefused(pageBytes: Int) async throws {
        let directory = temporaryDirectory()
        await #expect(throws: StoreError.self) {
            _ = try await GroupCommitStore.sqlite(directory: directory, pageBytes: pageBytes)
        }
        // Refused before anything was made.
        let path = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName)
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test func theJournalIsPrunedToItsRetention() async throws {
        let store = try await GroupCommitStore.sqlite(
            directory: temporaryDirectory(),
            retention: JournalRetention(maxEntries: 10, maxAgeSeconds: 0)
        )
        for index in 0..<130 { _ = try await create(store, "t\(index)") }
        let position = try await store.position()
        #expect(position.head == 130)
        #expect(position.oldest > 1)
        #expect(position.oldest <= 121)
        await store.close()
    }

    /// A retention lowered at a restart holds from the first commit after it, not only once
    /// the commits have come round to the next prune (64 later).
    @Test func aRetentionLoweredAtARestartHoldsFromTheFirstCommit() async throws {
        let directory = temporaryDirectory()
        let first = try await GroupCommitStore.sqlite(directory: directory)
        for index in 0..<100 { _ = try await create(first, "t\(index)") }
        await first.close()
        let store = try await GroupCommitStore.sqlite(
            directory: directory,
            retention: JournalRetention(maxEntries: 5, maxAgeSeconds: 0)
        )
        _ = try await create(store, "after the restart")
        let position = try await store.position()
        #expect(position.head == 101)
        #expect(position.oldest == 97)
        await store.close()
    }

    @Test func theInMemoryJournalIsPrunedToItsRetentionAndStillReadsInOrder() async throws {
        let (store, _) = await GroupCommitStore.inMemory(retention: JournalRetention(maxEntries: 10, maxAgeSeconds: 0))
        // A prune rides along every 64 commits: past 2,100 commits the pruned entries are also
        // dropped from the journal's array (more than 1,024, and half of it).
        for index in 0..<2_200 { _ = try await create(store, "t\(index)") }
        let position = try await store.position()
        #expect(position.head == 2_200)
        #expect(position.oldest > 2_100 && position.oldest <= 2_191)
        let kept = try await store.entries(after: position.oldest - 1, through: position.head)
        #expect(kept.map(\.seq) == Array(position.oldest...position.head))
        #expect(try await store.entries(after: 0, through: position.oldest - 1).isEmpty, "pruned entries are gone")
        await store.close()
    }

    @Test func anUnusableDataDirectoryIsAClearError() async throws {
        let file = temporaryDirectory() + "/file"
        _ = FileManager.default.createFile(atPath: file, contents: Data())
        await #expect {
            try await GroupCommitStore.sqlite(directory: file + "/data")
        } throws: { error in
            (error as? StoreError)?.message
                == "cannot create data directory \(file)/data: \(file)/data: not a directory"
        }
        // A directory the daemon makes is its user's alone, every missing level of it.
        let made = temporaryDirectory() + "/new/data"
        let store = try await GroupCommitStore.sqlite(directory: made)
        await store.close()
        for path in [made, (made as NSString).deletingLastPathComponent] {
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
            #expect(mode == 0o700, "\(path): \(String(mode ?? 0, radix: 8))")
        }
        await #expect {
            try await GroupCommitStore.sqlite(directory: file)
        } throws: { error in
            (error as? StoreError)?.message.contains("is not a directory") == true
        }
    }

    @Test func listReadsSeeEveryCommittedChangeAndTheirOwnBatchsWrites() async throws {
        let (store, _) = await GroupCommitStore.inMemory()
        let first = try await create(store, "first")
        #expect(try await store.readTodos(id: nil).map(\.title) == ["first"])
        // A list read after a create, a toggle and a failed commit sees what is committed.
        let second = try await create(store, "second")
        #expect(try await store.readTodos(id: nil).map(\.title) == ["second", "first"])
        _ = try await store.write(TodoWrite(id: first.todo.id, expectedVersion: nil, change: .toggleComplete)).get()
        #expect(try await store.readTodos(id: nil).map(\.complete) == [false, true])
        // Inside one batch a list read sees the writes staged before it, and the next one
        // (after the commit) sees them too.
        let third = UUID()
        let answers = await store.execute([
            .write(TodoWrite(id: third, expectedVersion: 0, change: .update(TodoEdit(title: "third")))),
            .read(ReadTodos(id: nil, purpose: .list)),
        ])
        guard case .read(.success(let listed)) = answers.last else {
            Issue.record("expected a list, got \(answers)")
            return
        }
        #expect(listed.map(\.title) == ["third", "second", "first"])
        #expect(try await store.readTodos(id: nil).map(\.title) == ["third", "second", "first"])
        _ = try await store.write(TodoWrite(id: second.todo.id, expectedVersion: nil, change: .delete)).get()
        #expect(try await store.readTodos(id: nil).map(\.deleted) == [false, true, false])
        // Writes to stored todos only, then a list read in the same batch: each todo in its
        // place, with what was staged for it (no new todo, so the committed order holds).
        let edits = await store.execute([
            .write(
                TodoWrite(id: first.todo.id, expectedVersion: nil, change: .update(TodoEdit(title: "first, edited")))
            ),
            .write(TodoWrite(id: second.todo.id, expectedVersion: nil, change: .update(TodoEdit(deleted: false)))),
            .read(ReadTodos(id: nil, purpose: .list)),
            .write(TodoWrite(id: third, expectedVersion: nil, change: .toggleComplete)),
            .read(ReadTodos(id: nil, purpose: .list)),
        ])
        guard case .read(.success(let before)) = edits[2], case .read(.success(let after)) = edits[4] else {
            Issue.record("expected two lists, got \(edits)")
            return
        }
        #expect(before.map(\.title) == ["third", "second", "first, edited"])
        #expect(before.map(\.deleted) == [false, false, false])
        #expect(before.map(\.complete) == [false, false, true], "the first todo was toggled earlier")
        #expect(after.map(\.complete) == [true, false, true])
        #expect(try await store.readTodos(id: nil) == after)
    }

    /// A list read in a batch with writes to stored todos puts each staged version in its
    /// place, found by creation time and row (many of these todos share a millisecond): the
    /// list answered before the commit is the one read after it.
    @Test func aListInABatchPutsEachStagedTodoInItsPlace() async throws {
        let (store, _) = await GroupCommitStore.inMemory()
        var saved: [SavedTodo] = []
        for index in 0..<30 { saved.append(try await create(store, "todo \(index)")) }
        let edited = [2, 11, 17, 29].map { saved[$0].todo.id }
        var batch: [ModelRequest] = edited.map {
            .write(TodoWrite(id: $0, expectedVersion: nil, change: .update(TodoEdit(title: "edited"))))
        }
        batch.insert(.write(TodoWrite(id: saved[5].todo.id, expectedVersion: nil, change: .toggleComplete)), at: 1)
        batch.append(.read(ReadTodos(id: nil, purpose: .list)))
        let answers = await store.execute(batch)
        guard case .read(.success(let listed)) = answers.last else {
            Issue.record("expected a list, got \(answers)")
            return
        }
        #expect(listed.count == 30)
        #expect(Set(listed.filter { $0.title == "edited" }.map(\.id)) == Set(edited))
        #expect(listed.filter(\.complete).map(\.id) == [saved[5].todo.id])
        #expect(try await store.readTodos(id: nil) == listed)
    }

    /// The search behind it: every todo found at its place in list order, among todos created
    /// in the same millisecond too; none for a row or a time not there.
    @Test func aTodoIsFoundInListOrderByItsCreationTimeAndRow() {
        let (early, late) = (Timestamp(millisecondsSince1970: 1_000), Timestamp(millisecondsSince1970: 2_000))
        var todos: [UUID: (rowID: Int64, todo: Todo)] = [:]
        for row in 1...40 {
            let todo = Todo(createdAt: row % 3 == 0 ? late : early, title: "todo \(row)")
            todos[todo.id] = (Int64(row), todo)
        }
        let sorted = GroupCommitStore.listOrder(todos)
        let (order, rowIDs) = (sorted.map(\.todo), sorted.map(\.rowID))
        for (index, entry) in sorted.enumerated() {
            #expect(GroupCommitStore.place(of: entry.todo.createdAt, entry.rowID, in: order, rowIDs) == index)
        }
        #expect(GroupCommitStore.place(of: early, 41, in: order, rowIDs) == nil)
        #expect(GroupCommitStore.place(of: late, 1, in: order, rowIDs) == nil, "row 1 is an early one")
        #expect(GroupCommitStore.place(of: Timestamp(millisecondsSince1970: 1_500), 3, in: order, rowIDs) == nil)
        #expect(GroupCommitStore.place(of: early, 1, in: [], []) == nil)
    }

    @Test func aStoreFailureAnswersUnavailableAndChangesNothing() async throws {
        let (store, faults) = await GroupCommitStore.inMemory()
        let saved = try await create(store, "kept")
        faults.failCommits(true)
        let failed = await store.write(TodoWrite(id: saved.todo.id, expectedVersion: nil, change: .delete))
        guard case .failure(let error) = failed else {
            Issue.record("expected unavailable")
            return
        }
        #expect(error.code == .unavailable)
        #expect(await store.isHealthy == false)
        #expect(try await store.readTodos(id: nil).first?.deleted == false)
        faults.failCommits(false)
        let retried = try await store.write(TodoWrite(id: saved.todo.id, expectedVersion: nil, change: .delete)).get()
        #expect(retried.seq == 2)
        #expect(await store.isHealthy)
    }

    /// After a failed commit the store is unhealthy until storage takes a write again, which a
    /// look at its health finds out by itself (a probe write): no client's write is needed.
    @Test func healthComesBackWithoutAWriteOnceStorageTakesWritesAgain() async throws {
        let (store, faults) = await GroupCommitStore.inMemory()
        await store.setProbeInterval(.zero)
        let saved = try await create(store, "kept")
        faults.failCommits(true)
        _ = await store.write(TodoWrite(id: saved.todo.id, expectedVersion: nil, change: .delete))
        #expect(await store.isHealthy == false)
        #expect(await store.isHealthy == false, "the probe fails too while storage refuses writes")
        faults.failCommits(false)
        #expect(await store.isHealthy)
        #expect(try await store.readTodos(id: nil).first?.deleted == false, "the probe changed no todo")
    }

    /// The probe of a SQLite store is a real write: it succeeds on a healthy database and
    /// leaves the journal and the todos as they were.
    @Test func aSQLiteProbeWritesNothingTheStoreReads() async throws {
        let directory = temporaryDirectory()
        let store = try await GroupCommitStore.sqlite(directory: directory)
        _ = try await create(store, "kept")
        try await store.probeForTests()
        #expect(try await store.readTodos(id: nil).map(\.title) == ["kept"])
        #expect(try await store.entries(after: 0, through: 10).map(\.seq) == [1])
        await store.close()
    }
}

@Suite struct SQLiteSchemaTests {
    @Test func theJournalsAgePruneReadsFromTheOldestEntryAndNoIndexOnRecordedAtIsKept() async throws {
        let directory = temporaryDirectory()
        let store = try await GroupCommitStore.sqlite(directory: directory)
        await store.close()
        let connection = try await SQLiteConnection.open(
            storage: .file(path: (directory as NSString).appendingPathComponent(SQLiteBackend.fileName))
        )
        // In seq order, with no sort: it can stop at the first entry it finds.
        let plan = try await connection.rows("EXPLAIN QUERY PLAN " + SQLiteWriter.firstRecentSQL, [.integer(1)])
        let details = plan.compactMap { $0.column("detail")?.string }
        #expect(details == ["SCAN journal"], "\(details)")
        let indexes = try await connection.rows("SELECT name FROM sqlite_master WHERE type = 'index'", [])
        #expect(!indexes.contains { $0.column("name")?.string == "journal_recorded_at" })
        try await connection.close()
    }

    @Test func aDatabaseWithTheRecordedAtIndexLosesItAndKeepsItsJournal() async throws {
        let directory = temporaryDirectory()
        let path = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName)
        let store = try await GroupCommitStore.sqlite(directory: directory)
        let saved = try await create(store, "kept")
        await store.close()
        // As schema step 10 left it.
        let connection = try await SQLiteConnection.open(storage: .file(path: path))
        try await connection.exec("CREATE INDEX journal_recorded_at ON journal (recorded_at)")
        try await connection.exec("PRAGMA user_version = 10")
        try await connection.close()
        let reopened = try await GroupCommitStore.sqlite(directory: directory)
        #expect(try await reopened.entries(after: 0, through: 10).map(\.seq) == [saved.seq])
        await reopened.close()
        let check = try await SQLiteConnection.open(storage: .file(path: path))
        let indexes = try await check.rows("SELECT name FROM sqlite_master WHERE type = 'index'", [])
        #expect(!indexes.contains { $0.column("name")?.string == "journal_recorded_at" })
        let version = try await check.rows("PRAGMA user_version", [])
        #expect(version.first?.column("user_version")?.integer == Migrations.steps.count)
        try await check.close()
    }
}
