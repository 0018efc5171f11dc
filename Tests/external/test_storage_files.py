"""The SQLite store's files taken away under the daemon (an operator's mistake, a clean-up job):
no write is acknowledged that the next start would not have, /healthz says storage is down, and
a start that would throw away commits (a write-ahead log without its database file) is refused.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time

import pytest

from conftest import daemon_binary
from helpers import LineClient, create_todo, http_get_text, list_todos, new_detail, save_detail, wait_until


@pytest.mark.parametrize("removed", ["todostream.sqlite", "todostream.sqlite-wal"])
def test_a_store_file_deleted_under_the_daemon_fails_writes_and_health(daemon, removed):
    with LineClient(daemon.tcp_port, name="writer") as c:
        create_todo(c, "Before")
        (daemon.data_dir / removed).unlink()
        # The log is looked at by every commit, the database file alone at most every 20 ms.
        for attempt in range(100):
            reply, _ = save_detail(c, new_detail(c), expect_ok=False, title=f"After {attempt}")
            if "error" in reply:
                break
            assert removed.endswith(".sqlite"), f"a commit into a deleted log was acknowledged: {reply}"
        assert reply.get("error", {}).get("code") == "unavailable", reply
        wait_until(lambda: http_get_text(daemon.http_port, "/healthz", timeout=10)[0] == 503, what="/healthz saying storage is down")
        # Still refused: nothing is acknowledged into a file that is gone.
        reply, _ = save_detail(c, new_detail(c), expect_ok=False, title="Later")
        assert reply.get("error", {}).get("code") == "unavailable", reply
        # Every later write fails too, and the log says so once, not once a batch.
        for attempt in range(50):
            reply, _ = save_detail(c, new_detail(c), expect_ok=False, title=f"Later {attempt}")
            assert reply.get("error", {}).get("code") == "unavailable", reply
    assert "deleted or replaced" in daemon.log_text() or removed.endswith("-wal"), daemon.log_text()
    assert daemon.log_text().count("commit failed") == 1, daemon.log_text()


@pytest.mark.parametrize("removed", ["todostream.sqlite", "todostream.sqlite-wal"])
def test_health_says_a_deleted_store_file_is_down_before_any_write(daemon, removed):
    """A load balancer learns it from /healthz, not from the first client whose write fails."""
    with LineClient(daemon.tcp_port, name="writer") as c:
        create_todo(c, "Before")
        assert http_get_text(daemon.http_port, "/healthz", timeout=10)[0] == 200
        (daemon.data_dir / removed).unlink()
        status, body = http_get_text(daemon.http_port, "/healthz", timeout=10)
        assert status == 503, body
        assert '"storage":"down"' in body, body
        reply, _ = save_detail(c, new_detail(c), expect_ok=False, title="After")
        assert reply.get("error", {}).get("code") == "unavailable", reply


def test_a_write_ahead_log_without_its_database_file_refuses_the_start(daemon):
    with LineClient(daemon.tcp_port, name="writer") as c:
        create_todo(c, "Kept in the log")
    # A kill leaves the commits in the write-ahead log (nothing checkpoints them).
    daemon.kill()
    daemon.proc = None  # killed on purpose: nothing for the fixture to stop
    wal = daemon.data_dir / "todostream.sqlite-wal"
    assert wal.stat().st_size > 0
    (daemon.data_dir / "todostream.sqlite").unlink()
    started = subprocess.run(
        [daemon_binary(), "serve", "--data-dir", str(daemon.data_dir), "--listen", "127.0.0.1:0",
         "--http-listen", "127.0.0.1:0", "--port-file", str(daemon.data_dir / "again.json")],
        capture_output=True, text=True, timeout=60,
    )
    assert started.returncode == 1, started
    assert "is missing or empty but its write-ahead log" in started.stderr, started.stderr
    assert wal.stat().st_size > 0, "the log was left as it was"


def test_a_database_file_deleted_under_the_daemon_is_saved_at_a_graceful_stop(daemon):
    """Every commit is still in the file the daemon has open: a stop writes it back where it
    was, and the next start has them all, in the same epoch. (The stop's checkpoint emptied the
    log into the deleted file, and the next start began an empty store: every commit lost.)"""
    with LineClient(daemon.tcp_port, name="writer") as c:
        hello = c.hello
        for n in range(20):
            create_todo(c, f"Kept {n}")
    (daemon.data_dir / "todostream.sqlite").unlink()
    daemon.restart()
    with LineClient(daemon.tcp_port, name="reader") as c:
        assert c.hello["epoch"] == hello["epoch"], (hello, c.hello)
        assert c.hello["seq"] == 20, c.hello
        assert sorted(t["todo"]["title"] for t in list_todos(c)) == sorted(f"Kept {n}" for n in range(20))
        create_todo(c, "After")
    assert "every commit was saved to" in daemon.log_text(), daemon.log_text()


def test_a_database_file_replaced_under_the_daemon_is_left_alone_and_its_commits_saved_beside_it(daemon):
    """A file put in the database's place (a backup restored) is not overwritten, and the log of
    the file it replaced is not applied to it: the daemon's commits are saved beside it."""
    with LineClient(daemon.tcp_port, name="writer") as c:
        for n in range(5):
            create_todo(c, f"Ours {n}")
    path = daemon.data_dir / "todostream.sqlite"
    path.unlink()
    replacement = sqlite3.connect(path)
    replacement.execute("CREATE TABLE theirs (x)")
    replacement.commit()
    replacement.close()
    before = path.read_bytes()
    daemon.stop()
    assert path.read_bytes() == before, "the replacement was changed"
    assert not (daemon.data_dir / "todostream.sqlite-wal").exists()
    saved = list(daemon.data_dir.glob("todostream.sqlite.saved-*"))
    assert len(saved) == 1, list(daemon.data_dir.iterdir())
    # Each commit's journal entry holds its todo (its row follows later).
    copy = sqlite3.connect(saved[0])
    payloads = [str(row[0]) for row in copy.execute("SELECT payload FROM journal ORDER BY seq")]
    copy.close()
    assert len(payloads) == 5, payloads
    assert all(f"Ours {n}" in payloads[n] for n in range(5)), payloads


def test_health_and_metrics_answer_while_storage_is_stalled(daemon):
    """A commit that waits on storage (here: another process holds the database's write lock,
    as a frozen file system or a slow disk would hold the sync) holds the store: /healthz and
    /metrics still answer within a few seconds, saying storage is down, and recover after."""
    with LineClient(daemon.tcp_port, name="writer") as c:
        create_todo(c, "Before the stall")
        holder = sqlite3.connect(str(daemon.data_dir / "todostream.sqlite"), timeout=30, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            detail = new_detail(c)
            c.send({"type": "RequestUpdateDetailViewModel", "id": "stalled", "payload": {**detail, "title": "Stalled"}})
            # Each look is answered within seconds (a look that waits for the store times out
            # and fails the test), and says down once the commit holds the store.
            deadline = time.monotonic() + 20
            while True:
                status, body = http_get_text(daemon.http_port, "/healthz", timeout=5)
                if status == 503:
                    break
                assert time.monotonic() < deadline, "/healthz never said storage is down"
            assert '"storage":"down"' in body, body
            status, body = http_get_text(daemon.http_port, "/metrics", timeout=5)
            assert status == 200 and "\ntodostream_storage_up 0\n" in body, (status, body[:300])
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        c.expect(lambda f: f.get("re") == "stalled", timeout=30)
    wait_until(lambda: http_get_text(daemon.http_port, "/healthz", timeout=15)[0] == 200, what="/healthz healthy again")
