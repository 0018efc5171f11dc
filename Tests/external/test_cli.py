"""The `todostream` command-line client (on the TodostreamClient library) against the real
daemon binary: the commands do what they say, and toggles sent while the daemon is SIGKILLed and
started again (on the data dir and ports it had) are each applied exactly once — a toggle whose
answer the kill swallowed is sent again with the same `mid` from the library's outbox.

The CLI binary is $TODOSTREAM_CLI, else <repo>/.build/debug/todostream; a missing binary FAILS.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

from conftest import REPO
from helpers import LineClient, create_todo, list_todos


def cli_binary() -> str:
    path = os.environ.get("TODOSTREAM_CLI") or str(REPO / ".build" / "debug" / "todostream")
    if not os.access(path, os.X_OK):
        pytest.fail(f"the CLI binary {path} is missing: run `swift build` first (or set TODOSTREAM_CLI)", pytrace=False)
    return path


def run_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([cli_binary(), *args], capture_output=True, text=True, timeout=timeout)


def test_the_commands_add_list_toggle_edit_and_delete(daemon):
    url = f"tcp://127.0.0.1:{daemon.tcp_port}"
    added = run_cli("add", "From the command line", "--priority", "high", "--url", url)
    assert added.returncode == 0, added.stderr
    listed = run_cli("list", "--url", url)
    assert listed.returncode == 0 and "From the command line" in listed.stdout, listed
    with LineClient(daemon.tcp_port, name="check") as c:
        [todo] = list_todos(c)
    todo_id = todo["todo"]["id"]
    assert run_cli("toggle", todo_id, "--url", url).returncode == 0
    assert run_cli("edit", todo_id, "--title", "Renamed", "--url", url).returncode == 0
    with LineClient(daemon.tcp_port, name="check") as c:
        [todo] = list_todos(c)
    assert todo["title"] == "Renamed" and todo["complete"] is True and todo["todo"]["version"] == 3, todo
    assert run_cli("delete", todo_id, "--url", url).returncode == 0
    with LineClient(daemon.tcp_port, name="check") as c:
        assert list_todos(c) == []
    unknown = run_cli("toggle", "6f1c0000-0000-4000-8000-000000000000", "--url", url)
    assert unknown.returncode == 1 and "not_found" in (unknown.stderr + unknown.stdout).lower().replace(" ", "_"), unknown
    # A malformed id is bad usage (64), shown with the command's own usage line.
    for command in (["toggle"], ["delete"], ["edit", "--title", "x"]):
        bad = run_cli(*command[:1], "not-a-uuid", *command[1:], "--url", url)
        assert bad.returncode == 64 and "not a todo id" in bad.stderr, bad
        assert f"Usage: todostream {command[0]} " in bad.stderr, bad.stderr


def test_toggles_through_the_cli_are_applied_once_across_a_sigkill_of_the_daemon(daemon):
    url = f"tcp://127.0.0.1:{daemon.tcp_port}"
    with LineClient(daemon.tcp_port, name="setup") as c:
        ids = [create_todo(c, f"Killed under {k}")[1]["payload"]["todo"]["id"] for k in range(4)]
    per = 10
    total = per * len(ids)
    done = []
    failures: list[str] = []
    lock = threading.Lock()

    def toggler(todo_id: str) -> None:
        for _ in range(per):
            result = run_cli("toggle", todo_id, "--url", url, "--timeout", "60", timeout=90)
            with lock:
                if result.returncode != 0:
                    failures.append(f"exit {result.returncode}: {result.stderr.strip()}")
                done.append(todo_id)

    threads = [threading.Thread(target=toggler, args=(todo_id,), daemon=True) for todo_id in ids]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(done) < total // 4:
        assert time.monotonic() < deadline, f"the toggles did not get going ({len(done)} done)"
        time.sleep(0.01)  # polling the threads, bounded by the deadline
    daemon.kill()  # SIGKILL while toggles are in flight
    assert len(done) < total, "every toggle was answered before the kill; the test proves nothing"
    daemon.start_again()
    for t in threads:
        t.join(timeout=180)
        assert not t.is_alive(), "a toggler did not finish"
    assert failures == [], failures
    with LineClient(daemon.tcp_port, name="check") as c:
        stored = {todo["todo"]["id"]: todo for todo in list_todos(c)}
    for todo_id in ids:
        # Version 1 is the creation; each toggle adds exactly one, none lost, none doubled.
        assert stored[todo_id]["todo"]["version"] == 1 + per, stored[todo_id]
        assert stored[todo_id]["complete"] is (per % 2 == 1)


def _url(daemon, transport: str) -> str:
    return f"tcp://127.0.0.1:{daemon.tcp_port}" if transport == "tcp" else daemon.ws_url


def _read_line(proc: subprocess.Popen, within: float) -> str:
    """The next line `proc` prints, or "" when none comes within `within` seconds."""
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=within):
            return ""
    return proc.stdout.readline()


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_a_wrong_token_is_reported_alike_on_every_transport(daemon_factory, transport):
    """The token is checked with `auth` on every transport: a wrong one is "not valid" (exit 4),
    also where the daemon has no view tokens (only a monitor token would be taken there)."""
    with_tokens = daemon_factory("--token", "view:cli-view-token-1")
    without_tokens = daemon_factory()
    for daemon in (with_tokens, without_tokens):
        for command in ("list", "watch"):
            result = run_cli(command, "--token", "wrongtoken", "--url", _url(daemon, transport), timeout=30)
            assert result.returncode == 4, (daemon.args, command, result)
            assert result.stderr.strip() == "todostream: The token is not valid.", (daemon.args, command, result)


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_watch_stops_when_the_restarted_daemon_refuses_its_token(daemon_factory, transport):
    daemon = daemon_factory("--token", "view:cli-view-token-1")
    watch = subprocess.Popen(
        [cli_binary(), "watch", "--token", "cli-view-token-1", "--url", _url(daemon, transport)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _read_line(watch, 30).strip() == "-- connected"
        assert _read_line(watch, 30).strip() == "-- 0 todos"
        daemon.args = ["--token", "view:cli-view-token-2"]
        daemon.restart()
        _, stderr = watch.communicate(timeout=30)
        assert watch.returncode == 4, stderr
        assert stderr.strip() == "todostream: The token is not valid.", stderr
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()


@pytest.mark.parametrize("transport", ["tcp", "ws"])
@pytest.mark.daemon_args("--storage", "memory", "--max-frame-bytes", "1000")
def test_a_request_over_the_daemons_frame_limit_is_refused_at_once(daemon, transport):
    url = _url(daemon, transport)
    started = time.monotonic()
    result = run_cli("add", "a" * 900, "--url", url, "--timeout", "20")
    assert result.returncode == 4, result
    assert time.monotonic() - started < 15, "the refusal was waited for"
    assert "over the daemon's frame limit" in result.stderr and "Nothing was applied." in result.stderr, result
    with LineClient(daemon.tcp_port, name="check") as c:
        assert list_todos(c) == []
    # Over the limit the client assumes (65536 unless --max-frame-bytes says otherwise): not sent.
    result = run_cli("add", "a" * 900, "--url", url, "--max-frame-bytes", "1000")
    assert result.returncode == 4 and "nothing was sent" in result.stderr and "--max-frame-bytes" in result.stderr, result
    assert "daemon's frame limit" not in result.stderr, result


def test_watch_json_shows_every_list_an_empty_one_too(daemon):
    """`watch --json`: each list (re)fetched has a line of its own with its count, so a script sees
    an empty list (text mode says "-- 0 todos"); its rows and later changes follow."""
    url = f"tcp://127.0.0.1:{daemon.tcp_port}"
    watch = subprocess.Popen([cli_binary(), "watch", "--json", "--url", url], stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(_read_line(watch, 30)) == {"event": "connected", "resumed": False}
        assert json.loads(_read_line(watch, 30)) == {"event": "list", "count": 0}
        with LineClient(daemon.tcp_port, name="writer") as c:
            create_todo(c, "Seen by watch")
        change = json.loads(_read_line(watch, 30))
        assert change["event"] == "change" and change["title"] == "Seen by watch" and change["seq"] >= 1, change
    finally:
        watch.kill()
        watch.communicate()


def test_output_that_cannot_be_written_ends_quietly_or_with_its_own_code(daemon):
    """`watch | head -1`: the reader went away, and the CLI ends with 0 and nothing on standard
    error (it crashed with a backtrace). A full disk is said, with exit code 5, not lost with 0.
    A timeout too large to wait is bad usage, not a crash."""
    url = f"tcp://127.0.0.1:{daemon.tcp_port}"
    assert run_cli("add", "Watched", "--url", url).returncode == 0
    watch = subprocess.Popen([cli_binary(), "watch", "--json", "--url", url], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        first = watch.stdout.readline()
        assert first, watch.stderr.read()
        watch.stdout.close()  # as `head -1` does after its line
        # The next line it writes meets a closed pipe.
        with LineClient(daemon.tcp_port, name="writer") as c:
            create_todo(c, "Seen by nobody")
        assert watch.wait(timeout=30) == 0
        error = watch.stderr.read().decode()
        assert "Fatal" not in error and "Broken pipe" not in error, error
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    with open("/dev/full", "w") as full:
        listed = subprocess.run([cli_binary(), "list", "--url", url], stdout=full, stderr=subprocess.PIPE, text=True,
                                timeout=60)
    assert listed.returncode == 5, listed
    assert "No space left on device" in listed.stderr, listed.stderr
    huge = run_cli("list", "--timeout", "1e16", "--url", url)
    assert huge.returncode == 64 and "--timeout" in huge.stderr, huge
