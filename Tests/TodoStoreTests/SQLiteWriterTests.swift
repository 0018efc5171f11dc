import EventStream
import Foundation
import SQLiteNIO
import Testing

@testable import TodoApp
@testable import TodoStore

/// The synchronous writer on its own thread: what a commit stores, what a failed one leaves.
@Suite struct SQLiteWriterTests {
    /// A migrated, empty database and a writer on `thread`.
    private func open(_ thread: StoreThread) async throws -> (SQLiteWriter, SQLiteConnection, String) {
        let directory = temporaryDirectory()
        let store = try await GroupCommitStore.sqlite(directory: directory)
        await store.close()
        let path = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName)
        let writer = try await thread.perform { try SQLiteWriter.open(path: path, synchronousFull: true) }
        let reader = try await SQLiteConnection.open(storage: .file(path: path))
        return (writer, reader, directory)
    }

    private func record(seq: UInt64, rowID: Int64, todo: Todo, mid: String? = nil) -> CommitRecord {
        let broadcast = TodoWireCodec.broadcastRecord(for: todo)
        return CommitRecord(
            rowID: rowID,
            todo: todo,
            entry: JournalEntry(seq: seq, type: broadcast.type, payload: broadcast.payload, mid: mid)
        )
    }

    /// Commits each (seq, recorded at) on its own, a todo titled after its seq, with `prune`.
    private func commitEach(
        _ entries: [(seq: UInt64, recordedAt: Int64)],
        _ writer: SQLiteWriter,
        _ thread: StoreThread,
        created: Timestamp,
        prune: JournalPrune? = nil
    ) async throws {
        for (seq, recordedAt) in entries {
            let todo = Todo(createdAt: created, title: "t\(seq)", version: 1)
            try await thread.perform {
                try writer.commit(
                    [self.record(seq: seq, rowID: Int64(seq), todo: todo)],
                    recordedAt: recordedAt,
                    prune: prune
                )
            }
        }
    }

    @Test func aCommitStoresTodosJournalAndHeadWithTextKeptWhole() async throws {
        let thread = StoreThread()
        let (writer, reader, directory) = try await open(thread)
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_123)
        let first = Todo(createdAt: created, title: "a\u{0}b", subtitle: "", version: 1)
        let second = Todo(createdAt: created, title: "ünïcode", subtitle: "s", completedAt: created, version: 1)
        let batch = [record(seq: 1, rowID: 1, todo: first, mid: "m-1"), record(seq: 2, rowID: 2, todo: second)]
        try await thread.perform { try writer.commit(batch, recordedAt: 42, prune: nil) }

        let todos = try await reader.rows(
            """
            SELECT id, title, hex(title) AS bytes, completed_at, version, typeof(subtitle) AS kind
            FROM todos ORDER BY seq_no
            """,
            []
        )
        #expect(todos.map { $0.column("id")?.string } == [first.id.lowercased, second.id.lowercased])
        // Bound with its length: text holding U+0000 is stored whole (sqlite-nio reads text up to it).
        #expect(todos.map { $0.column("bytes")?.string } == ["610062", "C3BC6EC3AF636F6465"])
        #expect(todos.map { $0.column("title")?.string } == ["a", "ünïcode"])
        // An empty subtitle is stored as empty text, not NULL.
        #expect(todos.map { $0.column("kind")?.string } == ["text", "text"])
        #expect(todos.map { $0.column("completed_at")?.integer } == [nil, 1_700_000_000_123])
        let journal = try await reader.rows("SELECT seq, payload, recorded_at, mid FROM journal ORDER BY seq", [])
        #expect(journal.map { $0.column("seq")?.integer } == [1, 2])
        #expect(journal.map { $0.column("mid")?.string } == ["m-1", nil])
        #expect(journal.map { $0.column("recorded_at")?.integer } == [42, 42])
        var payload = try #require(journal.first?.column("payload")?.blob)
        #expect(payload.readBytes(length: payload.readableBytes) == batch[0].entry.payload)
        // The stored head is written with prunes and at close, not with this commit: the
        // journal's newest entry is the head until then.
        let head = try await reader.rows("SELECT value FROM meta WHERE key = 'head'", [])
        #expect(head.first?.column("value")?.string == "0")
        #expect(try await thread.perform { writer.head } == 2)

        try await reader.close()
        try await thread.perform { writer.close() }
        // The store reopens what the writer committed, the head read from the journal.
        let store = try await GroupCommitStore.sqlite(directory: directory)
        #expect(try await store.readTodos(id: nil).count == 2)
        #expect(try await store.position().head == 2)
        await store.close()
    }

    @Test func aFailedCommitStoresNothingAndTheWriterGoesOn() async throws {
        let thread = StoreThread()
        let (writer, reader, _) = try await open(thread)
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        let kept = Todo(createdAt: created, title: "kept", version: 1)
        try await thread.perform {
            try writer.commit([self.record(seq: 1, rowID: 1, todo: kept)], recordedAt: 1, prune: nil)
        }

        // The second record reuses seq 1: the journal's key refuses it, after the first record
        // of the batch was already written inside the transaction.
        let lost = Todo(createdAt: created, title: "lost", version: 1)
        var edited = kept
        edited.title = "edited"
        edited.version = 2
        let failing = [record(seq: 2, rowID: 2, todo: lost), record(seq: 1, rowID: 1, todo: edited)]
        await #expect(throws: SQLiteWriter.Failure.self) {
            try await thread.perform { try writer.commit(failing, recordedAt: 2, prune: nil) }
        }
        let titles = try await reader.rows("SELECT title FROM todos ORDER BY seq_no", [])
        #expect(titles.map { $0.column("title")?.string } == ["kept"])
        let seqs = try await reader.rows("SELECT seq FROM journal ORDER BY seq", [])
        #expect(seqs.map { $0.column("seq")?.integer } == [1])
        #expect(try await thread.perform { writer.head } == 1)

        // No transaction is left open: the next commit goes through.
        try await thread.perform {
            try writer.commit([self.record(seq: 2, rowID: 2, todo: lost)], recordedAt: 3, prune: nil)
        }
        let after = try await reader.rows("SELECT count(*) AS n FROM journal", [])
        #expect(after.first?.column("n")?.integer == 2)

        try await thread.perform { writer.close() }
        await #expect(throws: SQLiteWriter.Failure.self) {
            try await thread.perform {
                try writer.commit([self.record(seq: 3, rowID: 3, todo: kept)], recordedAt: 4, prune: nil)
            }
        }
        try await reader.close()
    }

    /// The writer's own checkpoint (the tail) copies every frame, and the next commit starts
    /// the WAL over: the file stops growing.
    @Test func theWritersCheckpointCopiesEveryFrameAndTheWALStartsOver() async throws {
        let thread = StoreThread()
        let (writer, reader, directory) = try await open(thread)
        let wal = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName + "-wal")
        func walSize() throws -> Int? { try FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int }
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        func commit(_ seq: UInt64) async throws {
            let todo = Todo(createdAt: created, title: "t\(seq)", version: 1)
            try await thread.perform {
                try writer.commit([self.record(seq: seq, rowID: Int64(seq), todo: todo)], recordedAt: 1, prune: nil)
            }
        }
        for seq in UInt64(1)...50 { try await commit(seq) }
        let (walFrames, copied) = try await thread.perform { try writer.checkpoint() }
        #expect(walFrames > 50)
        #expect(copied == walFrames)
        let size = try walSize()
        // The next commit writes the WAL from its start: a few frames, and the file keeps its size.
        try await commit(51)
        let next = try await thread.perform { try writer.checkpoint() }
        #expect(next.walFrames < 10)
        #expect(try walSize() == size)
        for seq in UInt64(52)...100 { try await commit(seq) }
        let count = try await reader.rows("SELECT count(*) AS n FROM todos", [])
        #expect(count.first?.column("n")?.integer == 100)
        try await reader.close()
        try await thread.perform { writer.close() }
        await #expect(throws: SQLiteWriter.Failure.self) { try await thread.perform { try writer.checkpoint() } }
    }

    /// The writer opens its WAL through the VFS that syncs it with fdatasync: that file then
    /// has one descriptor more (the one `fdatasync` is called on), which closing the writer
    /// closes; what the writer committed is read back by a connection of SQLite's own VFS.
    @Test func theWritersWALHasADescriptorForFdatasyncThatClosingReleases() async throws {
        #expect(SQLiteDataSyncVFS.shared != nil)
        let thread = StoreThread()
        let directory = temporaryDirectory()
        let store = try await GroupCommitStore.sqlite(directory: directory)
        await store.close()
        let path = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName)
        let wal = path + "-wal"
        func walDescriptors() throws -> Int {
            try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count { entry in
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)"))?.hasPrefix(wal)
                    == true
            }
        }
        #expect(try walDescriptors() == 0)
        let writer = try await thread.perform { try SQLiteWriter.open(path: path, synchronousFull: true) }
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        for seq in UInt64(1)...3 {
            let todo = Todo(createdAt: created, title: "t\(seq)", version: 1)
            try await thread.perform {
                try writer.commit([self.record(seq: seq, rowID: Int64(seq), todo: todo)], recordedAt: 1, prune: nil)
            }
        }
        // SQLite's descriptor and the VFS's own.
        #expect(try walDescriptors() == 2)
        let reader = try await SQLiteConnection.open(storage: .file(path: path))
        let count = try await reader.rows("SELECT count(*) AS n FROM todos", [])
        #expect(count.first?.column("n")?.integer == 3)
        try await reader.close()
        try await thread.perform { writer.close() }
        #expect(try walDescriptors() == 0)
    }

    @Test func theWritersPageCacheIsTheConfiguredSize() async throws {
        let thread = StoreThread()
        let (writer, reader, directory) = try await open(thread)
        try await reader.close()
        #expect(try await thread.perform { try writer.cacheSize() } == -GroupCommitStore.defaultSQLiteCacheKiB)
        try await thread.perform { writer.close() }
        let path = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName)
        for (asked, expected) in [(512, -512), (1, -64)] {
            let sized = try await thread.perform {
                try SQLiteWriter.open(path: path, synchronousFull: true, cacheKiB: asked)
            }
            #expect(try await thread.perform { try sized.cacheSize() } == expected, "asked for \(asked) KiB")
            try await thread.perform { sized.close() }
        }
    }

    @Test func aPruneDropsTheJournalEntriesItNamesInTheSameTransaction() async throws {
        let thread = StoreThread()
        let (writer, reader, _) = try await open(thread)
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        try await commitEach((1...5).map { (UInt64($0), Int64($0)) }, writer, thread, created: created)
        let prune = JournalPrune(head: 6, retention: JournalRetention(maxEntries: 3, maxAgeSeconds: 0), now: 6)
        let seqs = try await commitPruning(6, recordedAt: 6, prune, writer, reader, thread, created: created)
        #expect(seqs == [4, 5, 6])
        try await reader.close()
        try await thread.perform { writer.close() }
    }

    /// Commits entry `seq` with `prune`; the seqs the journal holds then.
    private func commitPruning(
        _ seq: UInt64,
        recordedAt: Int64,
        _ prune: JournalPrune,
        _ writer: SQLiteWriter,
        _ reader: SQLiteConnection,
        _ thread: StoreThread,
        created: Timestamp
    ) async throws -> [Int?] {
        try await commitEach([(seq, recordedAt)], writer, thread, created: created, prune: prune)
        return try await reader.rows("SELECT seq FROM journal ORDER BY seq", []).map { $0.column("seq")?.integer }
    }

    @Test func anAgePruneDropsTheOldestEntriesUpToTheFirstOneRecordedLateEnough() async throws {
        let thread = StoreThread()
        let (writer, reader, _) = try await open(thread)
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        // Entry 4 was recorded after the clock was set back: older than entry 3.
        try await commitEach(
            [(1, 1_000), (2, 2_000), (3, 3_000), (4, 1_500), (5, 5_000)],
            writer,
            thread,
            created: created
        )
        // Entries recorded before 2,500 go, from the oldest on.
        let prune = JournalPrune(head: 6, retention: JournalRetention(maxEntries: 100, maxAgeSeconds: 1), now: 3_500)
        #expect(prune.cutoff == 2_500)
        let seqs = try await commitPruning(6, recordedAt: 6_000, prune, writer, reader, thread, created: created)
        #expect(seqs == [3, 4, 5, 6], "entry 4 waits behind entry 3")
        // Once entry 3 is old enough, entry 4 goes with it.
        let later = JournalPrune(head: 7, retention: JournalRetention(maxEntries: 100, maxAgeSeconds: 1), now: 4_500)
        let after = try await commitPruning(7, recordedAt: 7_000, later, writer, reader, thread, created: created)
        #expect(after == [5, 6, 7])
        try await reader.close()
        try await thread.perform { writer.close() }
    }

    @Test func anAgePruneReadsOnlyTheEntriesItDropsWithNoIndexToKeepUp() async throws {
        let thread = StoreThread()
        let (writer, reader, _) = try await open(thread)
        let indexes = try await reader.rows(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'journal'",
            []
        )
        #expect(!indexes.contains { $0.column("name")?.string == "journal_recorded_at" })
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        func batch(_ seqs: ClosedRange<UInt64>) -> [CommitRecord] {
            seqs.map {
                self.record(seq: $0, rowID: Int64($0), todo: Todo(createdAt: created, title: "t\($0)", version: 1))
            }
        }
        let (old, young) = (batch(1...1_000), batch(1_001...2_000))
        try await thread.perform {
            try writer.commit(old, recordedAt: 1_000, prune: nil)
            try writer.commit(young, recordedAt: 10_000, prune: nil)
        }
        let retention = JournalRetention(maxEntries: 100_000, maxAgeSeconds: 5)
        // The steps of a prune at 10,000 (so of entries recorded before 5,000) with entry `seq`.
        func stepsOfAPrune(with seq: UInt64) async throws -> Int {
            let records = batch(seq...seq)
            return try await thread.perform {
                let prune = JournalPrune(head: seq, retention: retention, now: 10_000)
                try writer.commit(records, recordedAt: 10_000, prune: prune)
                return writer.agePruneSteps
            }
        }
        let dropping = try await stepsOfAPrune(with: 2_001)
        let keeping = try await stepsOfAPrune(with: 2_002)
        let count = try await reader.rows("SELECT count(*) AS n, min(seq) AS oldest FROM journal", [])
        #expect(count.first?.column("n")?.integer == 1_002)
        #expect(count.first?.column("oldest")?.integer == 1_001)
        // Dropping 1,000 entries reads them; with none to drop, the prune reads the first entry
        // and stops, whatever the journal's length.
        #expect(dropping > 1_000)
        #expect(keeping > 0 && keeping < 50, "\(keeping) steps")
        try await reader.close()
        try await thread.perform { writer.close() }
    }

    // MARK: Rows that wait (DeferredRows)

    /// A migrated database, and a writer on it whose todos may wait for their rows.
    private func openDeferring(
        _ thread: StoreThread,
        limit: Int
    ) async throws -> (SQLiteWriter, SQLiteConnection, String) {
        let (plain, reader, directory) = try await open(thread)
        try await thread.perform { plain.close() }
        let path = (directory as NSString).appendingPathComponent(SQLiteBackend.fileName)
        let writer = try await thread.perform {
            try SQLiteWriter.open(path: path, synchronousFull: true, deferredTodos: limit)
        }
        return (writer, reader, directory)
    }

    private func meta(_ key: String, _ reader: SQLiteConnection) async throws -> String? {
        try await reader.rows("SELECT value FROM meta WHERE key = ?", [.text(key)]).first?.column("value")?.string
    }

    private func titles(_ reader: SQLiteConnection) async throws -> [String?] {
        try await reader.rows("SELECT title FROM todos ORDER BY seq_no", []).map { $0.column("title")?.string }
    }

    @Test func rowsWaitInTheJournalUntilDueAndTheWatermarkSaysHowFarTheTableGoes() async throws {
        let thread = StoreThread()
        let (writer, reader, _) = try await openDeferring(thread, limit: 2)
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        let first = Todo(createdAt: created, title: "t1", version: 1)
        let second = Todo(createdAt: created, title: "t2", version: 1)
        let third = Todo(createdAt: created, title: "t3", version: 1)
        try await thread.perform {
            try writer.commit(
                [self.record(seq: 1, rowID: 1, todo: first), self.record(seq: 2, rowID: 2, todo: second)],
                recordedAt: 1,
                prune: nil
            )
        }
        // Both wait: the journal holds them, with their row ids; the rows hold nothing yet.
        #expect(try await titles(reader).isEmpty)
        #expect(try await meta("materialized", reader) == "0")
        let rowIDs = try await reader.rows("SELECT row_id FROM journal ORDER BY seq", [])
        #expect(rowIDs.map { $0.column("row_id")?.integer } == [1, 2])

        // A third todo passes the limit: the oldest waiting (t1, with its newest change) is
        // written. The head and the watermark are stored with a prune (this one drops nothing).
        let edited = Todo(id: first.id, createdAt: created, title: "t1 edited", version: 2)
        let prune = JournalPrune(head: 4, retention: JournalRetention(maxEntries: 100, maxAgeSeconds: 0), now: 2)
        try await thread.perform {
            try writer.commit(
                [self.record(seq: 3, rowID: 1, todo: edited), self.record(seq: 4, rowID: 3, todo: third)],
                recordedAt: 2,
                prune: prune
            )
        }
        #expect(try await titles(reader) == ["t1 edited"])
        #expect(try await meta("head", reader) == "4")
        #expect(try await meta("materialized", reader) == "1")
        #expect(try await thread.perform { writer.deferredCount } == 2)

        // Closing writes the rest, and the watermark reaches the head.
        try await thread.perform { try writer.writeDeferred() }
        #expect(try await titles(reader) == ["t1 edited", "t2", "t3"])
        #expect(try await meta("materialized", reader) == "4")
        #expect(try await meta("head", reader) == "4")
        #expect(try await thread.perform { writer.deferredCount } == 0)
        try await reader.close()
        try await thread.perform { writer.close() }
    }

    /// A writer that stops without writing what waits (kill -9): the store that opens the
    /// database next applies the journal after the watermark, and its own writer reads back what
    /// waits, so the next commits move the watermark on from there.
    @Test func theNextStoreAppliesTheJournalAfterTheWatermarkToTheRows() async throws {
        let thread = StoreThread()
        let (writer, reader, directory) = try await openDeferring(thread, limit: 100)
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        let first = Todo(createdAt: created, title: "first", version: 1)
        let second = Todo(createdAt: created, title: "second", subtitle: "s", version: 1)
        let done = Todo(id: first.id, createdAt: created, title: "first", completedAt: created, version: 2)
        try await thread.perform {
            try writer.commit(
                [self.record(seq: 1, rowID: 1, todo: first), self.record(seq: 2, rowID: 2, todo: second)],
                recordedAt: 1,
                prune: nil
            )
            try writer.commit([self.record(seq: 3, rowID: 1, todo: done)], recordedAt: 2, prune: nil)
        }
        try await thread.perform { writer.close() }
        #expect(try await titles(reader).isEmpty)

        let store = try await GroupCommitStore.sqlite(directory: directory)
        // Newest first, the later row first among todos created together.
        #expect(try await store.readTodos(id: nil) == [second, done])
        #expect(try await store.position().head == 3)
        var renamed = second
        renamed.title = "second, renamed"
        renamed.version = 2
        let saved = try await store.write(
            TodoWrite(id: second.id, expectedVersion: 1, change: .update(TodoEdit(title: "second, renamed")))
        ).get()
        #expect(saved.seq == 4)
        #expect(saved.todo == renamed)
        await store.close()
        // Closed in order: every row written, and nothing after the watermark.
        #expect(try await titles(reader) == ["first", "second, renamed"])
        #expect(try await meta("materialized", reader) == "4")
        let reopened = try await GroupCommitStore.sqlite(directory: directory)
        #expect(try await reopened.readTodos(id: nil) == [renamed, done])
        await reopened.close()
        try await reader.close()
    }

    /// The head is stored with each prune, so a journal that a prune emptied still says where
    /// the seqs go on after a stop without a close (kill -9); with entries after the prune, the
    /// newest of them is the head.
    @Test func theHeadOutlivesAJournalThatAPruneEmptied() async throws {
        let thread = StoreThread()
        let (writer, reader, directory) = try await open(thread)
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        try await commitEach([(1, 1), (2, 2), (3, 3)], writer, thread, created: created)
        // Every entry goes (the rows hold every change: this writer defers none).
        let prune = JournalPrune(head: 4, retention: JournalRetention(maxEntries: 0, maxAgeSeconds: 0), now: 4)
        #expect(try await commitPruning(4, recordedAt: 4, prune, writer, reader, thread, created: created).isEmpty)
        try await thread.perform { writer.close() }
        // Without the directory's lock, which the kernel would drop at the kill.
        let store = try await GroupCommitStore.sqlite(directory: directory, lockDirectory: false)
        #expect(try await store.position().head == 4)
        #expect(try await store.readTodos(id: nil).count == 4)
        let saved = try await create(store, "after the prune")
        #expect(saved.seq == 5)
        // Abandoned without a close: the entry after the prune is the head.
        let next = try await GroupCommitStore.sqlite(directory: directory)
        #expect(try await next.position().head == 5)
        #expect(try await next.readTodos(id: nil).count == 5)
        #expect(try await create(next, "next").seq == 6)
        await next.close()
        await store.close()
        try await reader.close()
    }

    /// A failed commit noted its batch as waiting: the next commit reads back what the database
    /// holds, so the failed batch's todos are never written.
    @Test func afterAFailedCommitOnlyWhatWasStoredIsWritten() async throws {
        let thread = StoreThread()
        let (writer, reader, _) = try await openDeferring(thread, limit: 100)
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        let kept = Todo(createdAt: created, title: "kept", version: 1)
        let lost = Todo(createdAt: created, title: "lost", version: 1)
        let edited = Todo(id: kept.id, createdAt: created, title: "edited", version: 2)
        try await thread.perform {
            try writer.commit([self.record(seq: 1, rowID: 1, todo: kept)], recordedAt: 1, prune: nil)
        }
        await #expect(throws: SQLiteWriter.Failure.self) {
            try await thread.perform {
                try writer.commit(
                    [self.record(seq: 2, rowID: 2, todo: lost), self.record(seq: 1, rowID: 1, todo: edited)],
                    recordedAt: 2,
                    prune: nil
                )
            }
        }
        let other = Todo(createdAt: created, title: "other", version: 1)
        try await thread.perform {
            try writer.commit([self.record(seq: 2, rowID: 2, todo: other)], recordedAt: 3, prune: nil)
            try writer.writeDeferred()
        }
        #expect(try await titles(reader) == ["kept", "other"])
        #expect(try await meta("materialized", reader) == "2")
        try await reader.close()
        try await thread.perform { writer.close() }
    }

    /// A prune never drops the entry of a change that its row does not hold yet: the todos
    /// whose entries it drops are written in the same commit first.
    @Test func aPruneWritesTheRowsWhoseEntriesItDrops() async throws {
        let thread = StoreThread()
        let (writer, reader, _) = try await openDeferring(thread, limit: 100)
        let created = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        for seq in UInt64(1)...5 {
            let todo = Todo(createdAt: created, title: "t\(seq)", version: 1)
            try await thread.perform {
                try writer.commit([self.record(seq: seq, rowID: Int64(seq), todo: todo)], recordedAt: 1, prune: nil)
            }
        }
        #expect(try await titles(reader).isEmpty)
        let todo = Todo(createdAt: created, title: "t6", version: 1)
        let prune = JournalPrune(head: 6, retention: JournalRetention(maxEntries: 3, maxAgeSeconds: 0), now: 6)
        try await thread.perform {
            try writer.commit([self.record(seq: 6, rowID: 6, todo: todo)], recordedAt: 6, prune: prune)
        }
        #expect(try await titles(reader) == ["t1", "t2", "t3"])
        #expect(try await meta("materialized", reader) == "3")
        let seqs = try await reader.rows("SELECT seq FROM journal ORDER BY seq", [])
        #expect(seqs.map { $0.column("seq")?.integer } == [4, 5, 6])
        try await reader.close()
        try await thread.perform { writer.close() }
    }
}

@Suite struct StoreThreadTests {
    /// An actor run by the thread, recording where and in which order its calls ran.
    actor Recorder {
        let thread: StoreThread
        var calls: [Int] = []
        var offThread = 0

        init(thread: StoreThread) { self.thread = thread }
        nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

        func record(_ value: Int) {
            if !thread.isCurrent { offThread += 1 }
            calls.append(value)
        }
    }

    @Test func anActorOnTheThreadRunsThereAndSeesItsCallsInOrder() async throws {
        let thread = StoreThread()
        let recorder = Recorder(thread: thread)
        for value in 0..<1_000 { await recorder.record(value) }
        await withTaskGroup(of: Void.self) { group in
            for value in 1_000..<1_200 { group.addTask { await recorder.record(value) } }
        }
        let calls = await recorder.calls
        #expect(Array(calls.prefix(1_000)) == Array(0..<1_000))
        #expect(calls.sorted() == Array(0..<1_200))
        #expect(await recorder.offThread == 0)
        #expect(!thread.isCurrent)
    }

    struct Planted: Error {}

    @Test func performRunsOnTheThreadAndHandsBackResultsAndErrors() async throws {
        let thread = StoreThread()
        #expect(try await thread.perform { thread.isCurrent })
        #expect(try await thread.perform { 41 + 1 } == 42)
        await #expect(throws: Planted.self) { try await thread.perform { throw Planted() } }
        // Work queued after a failure still runs.
        #expect(try await thread.perform { "after" } == "after")
    }

    /// Resumed from another thread, a task that prefers the thread as its task executor goes
    /// on there, not on the global pool (the sequencer waking for requests).
    @Test func aTaskThatPrefersTheThreadIsResumedOnIt() async throws {
        let thread = StoreThread()
        let resumedOnTheThread = await withTaskExecutorPreference(thread.tasks) {
            var answers: [Bool] = []
            for _ in 0..<20 {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    Thread { continuation.resume() }.start()
                }
                answers.append(thread.isCurrent)
            }
            return answers
        }
        #expect(resumedOnTheThread == Array(repeating: true, count: 20))
        #expect(!thread.isCurrent)
    }

    /// Work that follows within the spin finds the thread awake: it does not go to sleep
    /// between one piece of work and the next. Without a spin it sleeps between them.
    @Test(.timeLimit(.minutes(1))) func aSpinningThreadStaysAwakeForWorkThatFollowsSoon() async throws {
        let spinning = StoreThread(spin: .seconds(30))
        _ = try await spinning.perform { 0 }
        let before = spinning.sleeps
        for value in 0..<200 { #expect(try await spinning.perform { value } == value) }
        #expect(spinning.sleeps == before)

        let sleeping = StoreThread()
        var slept = 0
        for value in 0..<200 {
            #expect(try await sleeping.perform { value } == value)
            // Waits until the thread sleeps again (it does at once), so each piece of work
            // below finds it asleep.
            while sleeping.sleeps == slept { await Task.yield() }
            slept = sleeping.sleeps
        }
        #expect(sleeping.sleeps >= 200)
    }

    /// Work that comes later than the spin stops the thread spinning: after one spin that
    /// found nothing it sleeps at once, as long as work keeps coming later than a spin would
    /// last. Work that comes within a spin of its sleep starts it spinning again.
    @Test(.timeLimit(.minutes(1))) func aThreadStopsSpinningForWorkThatComesLaterThanItsSpin() async throws {
        // No wake-up through the kernel takes less than a microsecond.
        let thread = StoreThread(spin: .microseconds(1))
        var slept = thread.sleeps
        for value in 0..<100 {
            #expect(try await thread.perform { value } == value)
            while thread.sleeps == slept { await Task.yield() }
            slept = thread.sleeps
        }
        // Without the rule it would have spun after each piece of work.
        #expect(thread.spins <= 5)

        // A spin longer than anything here. The first after the work finds nothing (the test
        // waits for the sleep after it); the work after that sleep came a spin and more after
        // the thread went idle, so it sleeps at once after it. Work sent right after that
        // sleep began comes within a spin: the thread spins after it.
        let patient = StoreThread(spin: .seconds(5))
        _ = try await patient.perform { 0 }
        while patient.sleeps == 0 { await Task.yield() }
        let spun = patient.spins
        _ = try await patient.perform { 1 }
        while patient.sleeps == 1 { await Task.yield() }
        #expect(patient.spins == spun)
        _ = try await patient.perform { 2 }
        while patient.spins == spun { await Task.yield() }
        #expect(patient.spins == spun + 1)
    }

    /// Work from many threads at once, while the thread spins and after it has gone to sleep
    /// (a short spin), all runs: no append is missed between the spin and the sleep.
    @Test(.timeLimit(.minutes(1))) func nothingIsMissedBetweenTheSpinAndTheSleep() async throws {
        let thread = StoreThread(spin: .microseconds(50))
        func runAll() async throws {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for value in 0..<2_000 { group.addTask { try await thread.perform { value } } }
                var seen: [Int] = []
                for try await value in group { seen.append(value) }
                #expect(seen.sorted() == Array(0..<2_000))
            }
        }
        try await runAll()
        // With nothing more to do, the thread spins, then sleeps; the next work must wake it.
        while thread.sleeps == 0 { await Task.yield() }
        try await runAll()
    }

    @Test func theThreadIsReleasedWithItsLastUser() async throws {
        weak var released: StoreThread?
        do {
            let thread = StoreThread()
            released = thread
            let recorder = Recorder(thread: thread)
            await recorder.record(1)
        }
        #expect(released == nil)
    }
}
