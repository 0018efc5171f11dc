import Logging
import PostgresNIO

/// The PostgreSQL schema, versioned like the SQLite one (`Migrations`): version N here is the
/// same schema as version N there, step for step, so both engines say the same thing about a
/// database's version. The version is kept in `todostream_schema`; every daemon migrates under
/// one transaction-scoped advisory lock, so several starting at once migrate exactly once.
enum PostgresMigrations {
    /// `pg_advisory_xact_lock` key: "todostrm" in ASCII.
    static let lockKey: Int64 = 0x746F_646F_7374_726D
    /// The commit advisory lock (see step 4): "todocomm" in ASCII.
    static let commitLockKey: Int64 = 0x746F_646F_636F_6D6D
    /// The listen key (see step 9): "todolist" in ASCII. A journal follower that wants
    /// notifications holds it shared, on its LISTEN connection.
    static let listenKey: Int64 = 0x746F_646F_6C69_7374

    static let steps: [[String]] = [
        // 1: todos, the broadcast journal, and the epoch and head of the one global order.
        [
            """
            CREATE TABLE todos (
              id TEXT PRIMARY KEY NOT NULL,
              seq_no BIGINT NOT NULL,
              created_at BIGINT NOT NULL,
              title TEXT NOT NULL,
              subtitle TEXT NOT NULL,
              priority TEXT NOT NULL,
              completed_at BIGINT,
              deleted BOOLEAN NOT NULL,
              version BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE journal (
              seq BIGINT PRIMARY KEY NOT NULL,
              type TEXT NOT NULL,
              payload BYTEA NOT NULL,
              recorded_at BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE stream_state (
              id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
              epoch TEXT NOT NULL,
              head BIGINT NOT NULL
            )
            """,
            "INSERT INTO stream_state (id, epoch, head) VALUES (1, replace(gen_random_uuid()::text, '-', ''), 0)",
        ],
        // 2: in SQLite, the commit_log view that writes a group commit in one statement.
        // PostgreSQL's commit is one statement already (see PostgresStore+Commit), so the
        // tables stay as they are; the step exists to keep both engines' versions in step.
        ["SELECT 1"],
        // 3: the journal's age prune finds old entries by index, not by reading every entry.
        ["CREATE INDEX IF NOT EXISTS journal_recorded_at ON journal (recorded_at)"],
        // 4: each journal entry names the batch that wrote it (`INSTANCE:N`, see LocalClaims),
        // and a batch commits in one statement: `CALL todostream_commit(…)` locks stream_state,
        // checks that the todos the batch read still have the versions it read (each statement
        // of a procedure sees what committed before it), takes the next seqs, writes todos and
        // journal, moves the head, notifies and COMMITs, all before it answers: the lock that
        // orders every daemon's commits is held while the database runs the statement and
        // flushes the commit, never across a round trip to a daemon, and the answer means
        // durable. p_head comes back as the new head, or -1 (nothing written) when a todo
        // changed. Every call first takes the commit advisory lock shared; a batch that lost
        // that race too often takes it exclusively for its read and commit (PostgresStore).
        [
            "ALTER TABLE journal ADD COLUMN origin TEXT",
            """
            CREATE OR REPLACE PROCEDURE todostream_commit(
              p_origin TEXT, p_check_ids TEXT[], p_check_versions BIGINT[],
              p_ids TEXT[], p_offsets BIGINT[], p_created BIGINT[], p_titles TEXT[], p_subtitles TEXT[],
              p_priorities TEXT[], p_completed BIGINT[], p_has_completed BOOLEAN[], p_deleted BOOLEAN[],
              p_versions BIGINT[], p_types TEXT[], p_payloads BYTEA[], p_recorded_at BIGINT,
              INOUT p_head BIGINT DEFAULT NULL
            ) LANGUAGE plpgsql AS $$
            DECLARE
              v_matching INTEGER;
            BEGIN
              PERFORM pg_advisory_xact_lock_shared(\(commitLockKey));
              SELECT head INTO p_head FROM stream_state WHERE id = 1 FOR UPDATE;
              IF p_head IS NULL THEN
                RAISE EXCEPTION 'the database has no stream_state row';
              END IF;
              SELECT count(*) INTO v_matching
                FROM unnest(p_check_ids, p_check_versions) AS c(id, version)
                LEFT JOIN todos t ON t.id = c.id
                WHERE (c.version < 0 AND t.id IS NULL) OR t.version = c.version;
              IF v_matching <> coalesce(cardinality(p_check_ids), 0) THEN
                p_head := -1;
                ROLLBACK;
                RETURN;
              END IF;
              INSERT INTO todos (id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version)
                SELECT r.id, p_head + r.first, r.created, r.title, r.subtitle, r.priority,
                  CASE WHEN r.has_completed THEN r.completed END, r.deleted, r.version
                FROM unnest(p_ids, p_offsets, p_created, p_titles, p_subtitles, p_priorities, p_completed,
                  p_has_completed, p_deleted, p_versions)
                  AS r(id, first, created, title, subtitle, priority, completed, has_completed, deleted, version)
              ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at, title = excluded.title,
                subtitle = excluded.subtitle, priority = excluded.priority,
                completed_at = excluded.completed_at, deleted = excluded.deleted, version = excluded.version;
              INSERT INTO journal (seq, type, payload, recorded_at, origin)
                SELECT p_head + j.n, j.type, j.payload, p_recorded_at, p_origin
                FROM unnest(p_types, p_payloads) WITH ORDINALITY AS j(type, payload, n);
              p_head := p_head + coalesce(cardinality(p_types), 0);
              UPDATE stream_state SET head = p_head WHERE id = 1;
              PERFORM pg_notify('todostream_journal', p_head::text);
              COMMIT;
            END
            $$
            """,
        ],
        // 5: idempotent writes. A journal entry keeps the client mutation id (`mid`) of the
        // write that caused it, unique among the entries retained, and `todostream_commit`
        // takes the batch's mids (`p_mids`, '' for a write without one): when one of them is
        // in the journal already, nothing is written and p_head comes back -1, as for a todo
        // that changed; the batch reads again and finds the earlier write (PostgresStore).
        // This is a new procedure beside step 4's (another argument list): daemons of the
        // previous version still running during an upgrade keep calling theirs.
        [
            "ALTER TABLE journal ADD COLUMN mid TEXT",
            "CREATE UNIQUE INDEX journal_mid ON journal (mid) WHERE mid IS NOT NULL",
            """
            CREATE OR REPLACE PROCEDURE todostream_commit(
              p_origin TEXT, p_check_ids TEXT[], p_check_versions BIGINT[],
              p_ids TEXT[], p_offsets BIGINT[], p_created BIGINT[], p_titles TEXT[], p_subtitles TEXT[],
              p_priorities TEXT[], p_completed BIGINT[], p_has_completed BOOLEAN[], p_deleted BOOLEAN[],
              p_versions BIGINT[], p_types TEXT[], p_payloads BYTEA[], p_mids TEXT[], p_recorded_at BIGINT,
              INOUT p_head BIGINT DEFAULT NULL
            ) LANGUAGE plpgsql AS $$
            DECLARE
              v_matching INTEGER;
            BEGIN
              PERFORM pg_advisory_xact_lock_shared(\(commitLockKey));
              SELECT head INTO p_head FROM stream_state WHERE id = 1 FOR UPDATE;
              IF p_head IS NULL THEN
                RAISE EXCEPTION 'the database has no stream_state row';
              END IF;
              SELECT count(*) INTO v_matching
                FROM unnest(p_check_ids, p_check_versions) AS c(id, version)
                LEFT JOIN todos t ON t.id = c.id
                WHERE (c.version < 0 AND t.id IS NULL) OR t.version = c.version;
              IF v_matching <> coalesce(cardinality(p_check_ids), 0)
                OR EXISTS (SELECT 1 FROM journal WHERE mid = ANY(p_mids)) THEN
                p_head := -1;
                ROLLBACK;
                RETURN;
              END IF;
              INSERT INTO todos (id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version)
                SELECT r.id, p_head + r.first, r.created, r.title, r.subtitle, r.priority,
                  CASE WHEN r.has_completed THEN r.completed END, r.deleted, r.version
                FROM unnest(p_ids, p_offsets, p_created, p_titles, p_subtitles, p_priorities, p_completed,
                  p_has_completed, p_deleted, p_versions)
                  AS r(id, first, created, title, subtitle, priority, completed, has_completed, deleted, version)
              ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at, title = excluded.title,
                subtitle = excluded.subtitle, priority = excluded.priority,
                completed_at = excluded.completed_at, deleted = excluded.deleted, version = excluded.version;
              INSERT INTO journal (seq, type, payload, recorded_at, origin, mid)
                SELECT p_head + j.n, j.type, j.payload, p_recorded_at, p_origin, NULLIF(j.mid, '')
                FROM unnest(p_types, p_payloads, p_mids) WITH ORDINALITY AS j(type, payload, mid, n);
              p_head := p_head + coalesce(cardinality(p_types), 0);
              UPDATE stream_state SET head = p_head WHERE id = 1;
              PERFORM pg_notify('todostream_journal', p_head::text);
              COMMIT;
            END
            $$
            """,
        ],
        // 6: a commit is ordered under the lock and flushed after it. `todostream_commit_flush`
        // does what step 5's procedure does, but its transaction commits with
        // `synchronous_commit = off`: the lock on stream_state (which orders every daemon's
        // commits) is released as soon as the commit is written, not after the disk flush.
        // A second transaction in the same CALL then writes this backend's row of
        // `todostream_durable` (the head it wrote) and COMMITs synchronously, inside the
        // procedure and so before the CALL answers (left open, it would commit at Sync, after
        // the answer, as step 4 says; the failover test caught exactly that). Its flush covers
        // everything written before it, the batch included, and on a synchronous standby too.
        // So the CALL answers once the batch is durable, as before, while the next batch,
        // from any daemon, can take the lock during the flush, and flushes of several
        // daemons' batches go to disk together. A committed head is durable once the largest
        // head in `todostream_durable` reaches it: that is how far journal followers and
        // reads trust what they see (PostgresStore+Durability). Notifications go out from the
        // second transaction, once durable. An error after the first commit is raised as
        // SQLSTATE TSF01: committed, durability not confirmed (the daemon asks, as for a lost
        // answer). Step 5's procedure, which daemons of the previous version keep calling
        // during an upgrade, moves its backend's row too, inside its one synchronous commit.
        // Both plan their statements with sequential scans off: plpgsql keeps a session's
        // plans, made when the tables may still have been small, and step 5's check for
        // repeated mids (an EXISTS, planned to stop at a first match) then read the whole
        // journal on every commit.
        [
            "CREATE TABLE todostream_durable (backend INTEGER PRIMARY KEY NOT NULL, head BIGINT NOT NULL)",
            "INSERT INTO todostream_durable (backend, head) SELECT 0, head FROM stream_state WHERE id = 1",
            commitProcedure(name: "todostream_commit", flushAfterOrdering: false),
            commitProcedure(name: "todostream_commit_flush", flushAfterOrdering: true),
        ],
        // 7: a batch that answers reads from the todos the daemon knows commits only at the
        // head it read them at. `todostream_commit_flush` gains `p_expect_head` (a new
        // overload; NULL expects nothing): when the head under the lock is another, nothing is
        // written and p_head comes back -1, as for a todo that changed.
        [commitProcedure(name: "todostream_commit_flush", flushAfterOrdering: true, expectHead: true)],
        // 8: a commit brings back the journal entries that precede its batch and that the
        // daemon has not followed yet (`todostream_commit_follow`: step 7's procedure with
        // `p_follow_after`, `p_own_prefix` and `p_follow_limit`, and five INOUT arrays). They
        // are read in the second transaction, after the lock is released, and are durable once
        // its synchronous commit returns: they were committed before the batch, so their WAL
        // comes before its. The daemon's own entries come without their payloads. Nothing is
        // read when `p_follow_after` is NULL, already at the batch, or more than
        // `p_follow_limit` entries behind it (the journal follower reads those). So a daemon
        // that keeps committing learns the other daemons' entries from its own commits, without
        // waiting for its journal follower's read (JournalFollower).
        [commitProcedure(name: "todostream_commit_follow", flushAfterOrdering: true, expectHead: true, follow: true)],
        // 9: a commit notifies only when some journal follower wants to hear of it
        // (`todostream_commit_batch`: step 8's procedure and arguments). A follower wants to
        // unless its own daemon's commits keep bringing it the journal; while it wants to, it
        // holds the listen key shared on its LISTEN connection (JournalFollower), so a follower
        // that is gone wants nothing. The procedure tries the key exclusively in its first
        // transaction, under the stream_state row lock: if the try fails, someone wants, and the
        // second transaction notifies. A follower that starts wanting takes the key (waiting out
        // a first transaction that holds it) and then reads the journal, so a commit that did
        // not notify it was committed before that read. Two daemons that keep committing then
        // send no notifications at all: each listening backend woke, and woke its daemon, on
        // every commit of every daemon, about a fifth of the throughput of two daemons on one
        // 2-core machine. The second transaction also loses step 6's exception block (a
        // subtransaction per commit): an error of this procedure is in doubt to the daemon,
        // which asks the journal whether the batch committed (PostgresStore.refused).
        // Daemons of earlier versions keep calling step 8's procedure, which notifies every
        // time; a follower of theirs holds no listen key, so while it does not commit it
        // learns of this version's commits from its periodic read.
        [
            commitProcedure(
                name: "todostream_commit_batch",
                flushAfterOrdering: true,
                expectHead: true,
                follow: true,
                notifyWhenWanted: true
            )
        ],
        // 10: in SQLite, a todo's row may be written after the commit of its change. Nothing
        // changes here; the step keeps both engines' versions in step.
        ["SELECT 1"],
        // 11: in SQLite, the age prune reads from the oldest entry and the `recorded_at` index
        // is dropped. PostgreSQL's prune is a plain delete by `recorded_at` and keeps its
        // index; the step keeps both engines' versions in step.
        ["SELECT 1"],
    ]

    /// Moves this backend's row of `todostream_durable` to `head` (never back).
    static let markDurable = """
        INSERT INTO todostream_durable AS d (backend, head) VALUES (pg_backend_pid(), p_head)
        ON CONFLICT (backend) DO UPDATE SET head = GREATEST(d.head, excluded.head)
        """

    /// Step 5's commit procedure (the same arguments), with the durability mark of step 6.
    static func commitProcedure(
        name: String,
        flushAfterOrdering: Bool,
        expectHead: Bool = false,
        follow: Bool = false,
        notifyWhenWanted: Bool = false
    ) -> String {
        let notify = "PERFORM pg_notify('\(journalChannel)', p_head::text);"
        let finish: String
        if notifyWhenWanted {
            // Step 6's finish without its exception block, notifying only when wanted.
            finish = """
                  PERFORM set_config('synchronous_commit', 'off', true);
                  COMMIT;
                  \(markDurable);
                  IF v_notify THEN
                    \(notify)
                  END IF;\(follow ? followRead : "")
                  COMMIT;
                """
        } else if flushAfterOrdering {
            finish = """
                  PERFORM set_config('synchronous_commit', 'off', true);
                  COMMIT;
                  BEGIN
                    \(markDurable);
                    \(notify)\(follow ? followRead : "")
                  EXCEPTION WHEN OTHERS THEN
                    RAISE EXCEPTION 'the batch committed, but its flush was not confirmed: %', SQLERRM
                      USING ERRCODE = 'TSF01';
                  END;
                  COMMIT;
                """
        } else {
            finish = """
                  \(markDurable);
                  \(notify)
                  COMMIT;
                """
        }
        return """
            CREATE OR REPLACE PROCEDURE \(name)(
              p_origin TEXT, p_check_ids TEXT[], p_check_versions BIGINT[],
              p_ids TEXT[], p_offsets BIGINT[], p_created BIGINT[], p_titles TEXT[], p_subtitles TEXT[],
              p_priorities TEXT[], p_completed BIGINT[], p_has_completed BOOLEAN[], p_deleted BOOLEAN[],
              p_versions BIGINT[], p_types TEXT[], p_payloads BYTEA[], p_mids TEXT[], p_recorded_at BIGINT,
              \(expectHead ? "p_expect_head BIGINT, " : "")\(follow ? followArguments : "")INOUT p_head BIGINT DEFAULT NULL\(follow ? followResults : "")
            ) LANGUAGE plpgsql AS $$
            DECLARE
              v_matching INTEGER;
              v_repeated INTEGER;\(follow ? "\n  v_before BIGINT;" : "")\(notifyWhenWanted ? "\n  v_notify BOOLEAN;" : "")
            BEGIN
              PERFORM set_config('enable_seqscan', 'off', true);
              PERFORM pg_advisory_xact_lock_shared(\(commitLockKey));
              SELECT head INTO p_head FROM stream_state WHERE id = 1 FOR UPDATE;
              IF p_head IS NULL THEN
                RAISE EXCEPTION 'the database has no stream_state row';
              END IF;
              SELECT count(*) INTO v_matching
                FROM unnest(p_check_ids, p_check_versions) AS c(id, version)
                LEFT JOIN todos t ON t.id = c.id
                WHERE (c.version < 0 AND t.id IS NULL) OR t.version = c.version;
              SELECT count(*) INTO v_repeated FROM journal WHERE mid = ANY(p_mids);
              IF v_matching <> coalesce(cardinality(p_check_ids), 0) OR v_repeated > 0
                \(expectHead ? "OR p_head <> coalesce(p_expect_head, p_head) " : "")THEN
                p_head := -1;
                ROLLBACK;
                RETURN;
              END IF;
              INSERT INTO todos (id, seq_no, created_at, title, subtitle, priority, completed_at, deleted, version)
                SELECT r.id, p_head + r.first, r.created, r.title, r.subtitle, r.priority,
                  CASE WHEN r.has_completed THEN r.completed END, r.deleted, r.version
                FROM unnest(p_ids, p_offsets, p_created, p_titles, p_subtitles, p_priorities, p_completed,
                  p_has_completed, p_deleted, p_versions)
                  AS r(id, first, created, title, subtitle, priority, completed, has_completed, deleted, version)
              ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at, title = excluded.title,
                subtitle = excluded.subtitle, priority = excluded.priority,
                completed_at = excluded.completed_at, deleted = excluded.deleted, version = excluded.version;
              INSERT INTO journal (seq, type, payload, recorded_at, origin, mid)
                SELECT p_head + j.n, j.type, j.payload, p_recorded_at, p_origin, NULLIF(j.mid, '')
                FROM unnest(p_types, p_payloads, p_mids) WITH ORDINALITY AS j(type, payload, mid, n);
              \(follow ? "v_before := p_head;\n  " : "")p_head := p_head + coalesce(cardinality(p_types), 0);
              UPDATE stream_state SET head = p_head WHERE id = 1;\(notifyWhenWanted ? "\n  v_notify := NOT pg_try_advisory_xact_lock(\(listenKey));" : "")
            \(finish)
            END
            $$
            """
    }

    /// Step 8's inputs: the seq the daemon has followed the journal to (NULL: read nothing),
    /// the origin prefix of its own entries (they come without payloads), and how many entries
    /// it takes at most.
    static let followArguments = "p_follow_after BIGINT, p_own_prefix TEXT, p_follow_limit INTEGER, "

    /// Step 8's results: the entries after `p_follow_after` up to the batch's first seq, in
    /// seq order (NULL when none were read). NULL origins and mids come back empty.
    static let followResults = """
        ,
          INOUT p_f_seqs BIGINT[] DEFAULT NULL, INOUT p_f_types TEXT[] DEFAULT NULL,
          INOUT p_f_payloads BYTEA[] DEFAULT NULL, INOUT p_f_origins TEXT[] DEFAULT NULL,
          INOUT p_f_mids TEXT[] DEFAULT NULL
        """

    /// Step 8's read, in the second transaction (see step 8).
    static let followRead = """

                IF p_follow_after IS NOT NULL AND p_follow_after < v_before
                  AND v_before - p_follow_after <= p_follow_limit THEN
                  PERFORM set_config('enable_seqscan', 'off', true);
                  SELECT array_agg(j.seq ORDER BY j.seq), array_agg(j.type ORDER BY j.seq),
                    array_agg(CASE WHEN p_own_prefix <> '' AND starts_with(coalesce(j.origin, ''), p_own_prefix)
                      THEN ''::bytea ELSE j.payload END ORDER BY j.seq),
                    array_agg(coalesce(j.origin, '') ORDER BY j.seq), array_agg(coalesce(j.mid, '') ORDER BY j.seq)
                  INTO p_f_seqs, p_f_types, p_f_payloads, p_f_origins, p_f_mids
                  FROM journal j WHERE j.seq > p_follow_after AND j.seq <= v_before;
                END IF;
        """

    /// Brings the schema to the newest version; refuses a database newer than this build.
    static func run(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("BEGIN", logger: logger)
        do {
            try await connection.query("SELECT pg_advisory_xact_lock(\(lockKey))", logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS todostream_schema (
                  id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
                  version INTEGER NOT NULL
                )
                """,
                logger: logger
            )
            try await connection.query(
                "INSERT INTO todostream_schema (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
                logger: logger
            )
            var current = 0
            for try await version in try await connection.query(
                "SELECT version FROM todostream_schema WHERE id = 1",
                logger: logger
            ).decode(Int.self) {
                current = version
            }
            if current > steps.count {
                throw StoreError(
                    message:
                        "The database has schema version \(current), newer than this build knows (\(steps.count))."
                )
            }
            for version in current..<steps.count {
                for statement in steps[version] {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                logger.notice("database migrated", metadata: ["schema.version": "\(version + 1)"])
            }
            try await connection.query(
                "UPDATE todostream_schema SET version = \(steps.count) WHERE id = 1",
                logger: logger
            )
            try await connection.query("COMMIT", logger: logger)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }
}
