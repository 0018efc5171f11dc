"""Losing the PostgreSQL primary: two daemons on a primary with a synchronous streaming standby
(both real PostgreSQL servers from Debian's `postgresql` package, in temporary directories on
free loopback ports). The primary is stopped hard (`pg_ctl stop -m immediate`), the standby is
promoted, and the daemons, given a multi-host URL with `target_session_attrs=read-write`, must
move to it on their own: writes are accepted again within a bounded time, no acknowledged write
is lost, the subscribers of both daemons see one gapless order, and a client that resumes gets
everything it missed.

A missing PostgreSQL (or pg_basebackup) FAILS these tests. Nothing here sleeps to synchronise:
every wait polls for what it expects, bounded by a deadline.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from helpers import LineClient, create_todo, free_port, next_id
from test_postgres import (
    PostgresServer,
    Writer,
    assert_gapless,
    http_get,
    journal_rows,
    read_through,
    resume,
    strip_re,
    toggle,
    wait_until,
)

STANDBY_NAME = "todostream_standby"


class StandbyServer(PostgresServer):
    """A streaming standby of `primary` in a temporary directory of its own: a base backup with
    `pg_basebackup -R` (which writes primary_conninfo and standby.signal), on its own port and
    socket directory. It inherits the primary's postgresql.conf (TLS included) but never its
    `synchronous_standby_names`: the primary is given that only after the copy (ALTER SYSTEM),
    and the standby's own file sets it empty, so that once promoted it does not wait for a
    standby it does not have."""

    def __init__(self, primary: PostgresServer):
        self.bin = primary.bin
        for tool in ("pg_basebackup", "pg_ctl"):
            if not (self.bin / tool).exists():
                pytest.fail(f"{self.bin / tool} is missing (apt-get install postgresql)", pytrace=False)
        self.root = Path(tempfile.mkdtemp(prefix="todostream-pg-standby-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self.user = primary.user
        self.ca = primary.ca
        if self.user:
            os.chmod(self.root, 0o755)
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self._run("pg_basebackup", "-h", str(primary.root), "-p", str(primary.port), "-U", "postgres",
                  "-D", str(self.data), "-R", "-X", "stream", "-c", "fast", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\n# the standby\nport = {self.port}\nunix_socket_directories = '{self.root}'\n"
                f"cluster_name = '{STANDBY_NAME}'\nsynchronous_standby_names = ''\nhot_standby = on\n"
            )
        # primary_conninfo names the standby so that the primary can wait for it by name.
        with open(self.data / "postgresql.auto.conf", "a") as auto:
            auto.write(f"\nprimary_conninfo = 'host={primary.root} port={primary.port} user=postgres "
                       f"application_name={STANDBY_NAME}'\n")
        self.start()

    def promote(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")


@pytest.fixture
def replicated():
    """A primary with one synchronous streaming standby, and a database on them."""
    primary = PostgresServer()
    standby = None
    try:
        standby = StandbyServer(primary)
        primary.psql(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        primary.psql("SELECT pg_reload_conf()")
        wait_until(lambda: primary.psql(
            f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'") == "sync",
            timeout=60, what="the standby to stream synchronously")
        assert standby.psql("SELECT pg_is_in_recovery()") == "t"
        database = primary.create_database()
        wait_until(lambda: standby.psql(f"SELECT count(*) FROM pg_database WHERE datname = '{database}'") == "1",
                   what="the database on the standby")
        yield primary, standby, database
    finally:
        if standby is not None:
            standby.close()
        primary.close()


def failover_url(primary, standby, database):
    return (f"postgres://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/{database}"
            "?sslmode=require&target_session_attrs=read-write")


def acked_count(writers):
    return sum(len(w.acked) for w in writers)


def test_losing_the_primary_moves_the_daemons_to_the_promoted_standby(replicated, daemon_factory):
    # `replicated` first, so that it is torn down last: the daemons stop before the databases.
    primary, standby, database = replicated
    flags = ["--storage", "postgres", "--postgres-url", failover_url(primary, standby, database)]
    a, b = daemon_factory(*flags), daemon_factory(*flags)

    # A client that will be away during the failover, and resume afterwards.
    with LineClient(a.tcp_port, name="away@A") as away:
        epoch = away.hello["epoch"]
        _, first = create_todo(away, "before the failover")
        last_seen = first["seq"]

    observers = [LineClient(a.tcp_port, name="obs@A"), LineClient(b.tcp_port, name="obs@B")]
    writers = [Writer(d.tcp_port, 1_000_000, f"w{i}@{tag}", tolerate_unavailable=True)
               for tag, d in (("A", a), ("B", b)) for i in range(3)]
    try:
        for o in observers:
            o.ping()
        start = max(o.hello["seq"] for o in observers)
        for w in writers:
            w.start()
        wait_until(lambda: acked_count(writers) >= 300, timeout=60, what="writes before the failover")
        assert all(w.error is None for w in writers), [w.error for w in writers]

        primary.stop(mode="immediate")  # the database machine is lost
        lost_at = time.monotonic()
        acked_at_loss = acked_count(writers)
        each_at_loss = [len(w.acked) for w in writers]
        standby.promote()
        promoted_at = time.monotonic()

        wait_until(lambda: acked_count(writers) > acked_at_loss + 50, timeout=60,
                   what="writes acknowledged again after the promotion")
        back_after = time.monotonic() - promoted_at
        wait_until(lambda: all(len(w.acked) > n for w, n in zip(writers, each_at_loss)) and
                   acked_count(writers) >= acked_at_loss + 300, timeout=60,
                   what="every writer, through both daemons, acknowledged on the new primary")
        for w in writers:
            w.stop_at = time.monotonic()
        for w in writers:
            w.join(timeout=120)
            assert not w.is_alive() and w.error is None, f"{w.name}: {w.error!r}"
        assert a.running and b.running, "a daemon exited when the primary was lost"
        for d in (a, b):
            wait_until(lambda: http_get(d.http_port, "/healthz")[0] == 200, what="/healthz 200 after the failover")
            assert "switched to another PostgreSQL server" in d.log_text(), "the pool moved to the new primary"

        # Every acknowledged write is on the new primary, byte for byte; the journal is gapless.
        acked = [f for w in writers for f in w.acked] + [first]
        rows = journal_rows(standby, database)
        lost = [f["seq"] for f in acked if rows.get(f["seq"]) != f["payload"]]
        assert not lost, f"acknowledged writes lost in the failover: seqs {lost[:10]}"
        last = max(rows)
        assert sorted(rows) == list(range(1, last + 1)), "the journal is gapless"
        assert len({f["seq"] for f in acked}) == len(acked), "no seq was acknowledged twice"

        # The subscribers of both daemons saw one gapless order, the same one.
        streams = []
        for o in observers:
            frames = [f for f in read_through(o, last) if f["seq"] > start]
            assert_gapless(frames, start + 1, last, o.name)
            assert all(f["payload"] == rows[f["seq"]] for f in frames), f"{o.name}: a broadcast differs from the journal"
            streams.append(frames)
        assert streams[0] == streams[1], "both daemons' subscribers saw the same stream"
        unavailable = sum(w.unavailable for w in writers)
        print(f"\n{len(acked)} acknowledged, {unavailable} answered unavailable; "
              f"writes again {back_after:.1f}s after the promotion "
              f"({time.monotonic() - lost_at:.1f}s since the loss, to the end)")
    finally:
        for w in writers:
            w.stop_at = time.monotonic()
        for o in observers:
            o.close()

    # The client that was away resumes on the other daemon and gets exactly what it missed.
    with LineClient(b.tcp_port, name="back@B") as c:
        assert c.hello["epoch"] == epoch, "the promoted standby serves the same stream"
        before, resumed = resume(c, epoch, last_seen)
        assert resumed.get("op") == "resumed", resumed
        assert resumed["from"] == last_seen + 1 and resumed["to"] >= last, resumed
        replayed = [f for f in before if "seq" in f]
        assert [f["seq"] for f in replayed] == list(range(last_seen + 1, resumed["to"] + 1)), "nothing missed"
        for f in replayed:
            assert f["payload"] == rows.get(f["seq"], f["payload"]), f"seq {f['seq']} replayed differently"
        # And live writes through both daemons reach it, next in the one order.
        for d in (a, b):
            with LineClient(d.tcp_port, name="late") as late:
                answer = toggle(late, first["payload"]["todo"], timeout=30)
            assert "seq" in answer, answer
            assert c.expect_seq(answer["seq"]) == strip_re(answer)


def test_a_read_only_server_listed_first_is_skipped(replicated, daemon_factory):
    primary, standby, database = replicated
    url = (f"postgres://postgres@127.0.0.1:{standby.port},127.0.0.1:{primary.port}/{database}"
           "?sslmode=require&target_session_attrs=read-write")
    d = daemon_factory("--storage", "postgres", "--postgres-url", url)
    with LineClient(d.tcp_port, name="c") as c:
        _, made = create_todo(c, "written on the primary")
        assert toggle(c, made["payload"]["todo"]).get("seq") == made["seq"] + 1
    assert f"database.server=127.0.0.1:{primary.port}" in d.log_text(), "the store opened on the primary"
    wait_until(lambda: int(standby.psql("SELECT count(*) FROM journal", database) or 0) >= 2,
               what="the writes on the standby too")
    assert int(primary.psql("SELECT head FROM stream_state", database)) == made["seq"] + 1


def test_a_primary_left_running_read_only_is_left_for_the_promoted_standby(replicated, daemon_factory):
    """A switchover in which the old primary stays up but read-only: writes there fail with
    25006, the daemons choose again and move to the promoted standby, pool and journal
    follower alike (the follower's connection to the old primary still works, yet it must not
    go on following a server that no longer receives the writes)."""
    primary, standby, database = replicated
    flags = ["--storage", "postgres", "--postgres-url", failover_url(primary, standby, database)]
    a, b = daemon_factory(*flags), daemon_factory(*flags)
    observers = [LineClient(a.tcp_port, name="obs@A"), LineClient(b.tcp_port, name="obs@B")]
    writers = [Writer(d.tcp_port, 1_000_000, f"w{i}@{tag}", tolerate_unavailable=True)
               for tag, d in (("A", a), ("B", b)) for i in range(2)]
    try:
        for o in observers:
            o.ping()
        start = max(o.hello["seq"] for o in observers)
        for w in writers:
            w.start()
        wait_until(lambda: acked_count(writers) >= 200, timeout=60, what="writes before the switchover")
        refused_before = sum(w.unavailable for w in writers)
        primary.psql("ALTER SYSTEM SET default_transaction_read_only = on")
        primary.psql("SELECT pg_reload_conf()")
        wait_until(lambda: sum(w.unavailable for w in writers) > refused_before, timeout=60,
                   what="writes refused by the read-only primary")
        # No server takes writes: /healthz says so (the journal feed's reads on the read-only
        # primary still work, and used to keep it at 200).
        wait_until(lambda: all(http_get(d.http_port, "/healthz")[0] == 503 for d in (a, b)), timeout=30,
                   what="/healthz 503 on both daemons while no server takes writes")
        # …and stays so while none does, not only until the feed's next read.
        statuses = []
        for _ in range(10):
            statuses += [http_get(d.http_port, "/healthz")[0] for d in (a, b)]
            time.sleep(0.3)
        assert set(statuses) == {503}, f"/healthz while no server takes writes: {statuses}"
        each_before = [len(w.acked) for w in writers]
        standby.promote()
        wait_until(lambda: all(len(w.acked) > n for w, n in zip(writers, each_before)) and
                   acked_count(writers) >= sum(each_before) + 200, timeout=60,
                   what="every writer, through both daemons, acknowledged on the promoted standby")
        wait_until(lambda: all(http_get(d.http_port, "/healthz")[0] == 200 for d in (a, b)), timeout=30,
                   what="/healthz 200 again on both daemons")
        for w in writers:
            w.stop_at = time.monotonic()
        for w in writers:
            w.join(timeout=120)
            assert not w.is_alive() and w.error is None, f"{w.name}: {w.error!r}"
        for d in (a, b):
            assert "switched to another PostgreSQL server" in d.log_text()
        acked = [f for w in writers for f in w.acked]
        rows = journal_rows(standby, database)
        lost = [f["seq"] for f in acked if rows.get(f["seq"]) != f["payload"]]
        assert not lost, f"acknowledged writes lost in the switchover: seqs {lost[:10]}"
        last = max(rows)
        assert sorted(rows) == list(range(1, last + 1)), "the journal is gapless"
        streams = []
        for o in observers:
            frames = [f for f in read_through(o, last, timeout=30) if f["seq"] > start]
            assert_gapless(frames, start + 1, last, o.name)
            streams.append(frames)
        assert streams[0] == streams[1], "both daemons' subscribers saw the same stream"
    finally:
        for w in writers:
            w.stop_at = time.monotonic()
        for o in observers:
            o.close()
