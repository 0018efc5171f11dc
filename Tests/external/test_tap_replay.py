"""`todostreamd tap` prints every event of a live system; `todostreamd replay` plays a recorded
session into a daemon and yields the same todos."""

from __future__ import annotations

import json
import select
import socket
import subprocess

import pytest

from conftest import daemon_binary
from test_systemd import create_todo, line_client, read_until, send


def _write_until_tapped(tap, sock, reader, event_type):
    """The tap prints nothing of its own, so its subscription is visible only through what it
    prints: make a change, and another, until one of `event_type` shows (bounded); returns
    every frame the tap printed."""
    seen = []
    attempt = 0
    while not any(frame.get("type") == event_type for frame in seen):
        assert attempt < 50, f"the tap printed no {event_type}: {seen}"
        create_todo(sock, reader, f"tapped {attempt}", f"t{attempt}")
        attempt += 1
        while select.select([tap.stdout], [], [], 0.2)[0]:
            line = tap.stdout.readline()
            assert line, tap.stderr.read()
            seen.append(json.loads(line))
    return seen


@pytest.mark.daemon_args("--monitor-token", "tap-token-123")
def test_tap_prints_model_layer_events_with_their_session(daemon):
    tap = subprocess.Popen([daemon_binary(), "tap", "--connect", f"127.0.0.1:{daemon.tcp_port}",
                            "--token", "tap-token-123"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sock, reader, hello = line_client(daemon.tcp_port)
        seen = _write_until_tapped(tap, sock, reader, "ResponseTodo")
        names = [frame["type"] for frame in seen]
        assert "RequestWriteTodo" in names
        assert all(frame.get("session") == hello["session"] for frame in seen if "seq" not in frame)
    finally:
        tap.kill()
        tap.wait()


@pytest.mark.daemon_args("--monitor-token", "tap-token-123")
def test_tap_types_prints_only_those_types(daemon):
    tap = subprocess.Popen([daemon_binary(), "tap", "--connect", f"127.0.0.1:{daemon.tcp_port}",
                            "--token", "tap-token-123", "--types", "RequestWriteTodo"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sock, reader, _ = line_client(daemon.tcp_port)
        seen = _write_until_tapped(tap, sock, reader, "RequestWriteTodo")
        # One more write: whatever the tap prints of it is its RequestWriteTodo alone.
        create_todo(sock, reader, "last", "last")
        while select.select([tap.stdout], [], [], 1.0)[0]:
            line = tap.stdout.readline()
            if not line:
                break
            seen.append(json.loads(line))
        assert {frame.get("type") for frame in seen} == {"RequestWriteTodo"}, seen
    finally:
        tap.kill()
        tap.wait()


def test_tap_without_a_monitor_token_fails_clearly(daemon):
    result = subprocess.run([daemon_binary(), "tap", "--connect", f"127.0.0.1:{daemon.tcp_port}", "--token", "nope"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "tap refused" in result.stderr


def test_replaying_a_recorded_session_yields_the_same_todos(daemon_factory, tmp_path):
    original = daemon_factory("--storage", "memory")
    sock, reader, _ = line_client(original.tcp_port)
    recording = []

    def publish(frame):
        recording.append(json.dumps(frame))
        send(sock, frame)

    def answer(frame_id, broadcast=False):
        frame = read_until(reader, lambda f: f.get("re") == frame_id and (not broadcast or "seq" in f))
        recording.append(json.dumps(frame))
        return frame

    ids = []
    for index, title in enumerate(["milk", "bread", "eggs"]):
        publish({"type": "RequestNewTodoDetailViewModel", "id": f"new{index}"})
        fresh = answer(f"new{index}")["payload"]
        fresh["title"] = title
        fresh["priority"] = "high" if index == 1 else "normal"
        publish({"type": "RequestUpdateDetailViewModel", "id": f"save{index}", "payload": fresh})
        answer(f"save{index}")
        ids.append(answer(f"save{index}", broadcast=True)["payload"]["todo"]["id"])
    publish({"type": "RequestToggleCompleteTodoViewModel", "id": "t", "payload": {"todo": {"id": ids[0]}}})
    answer("t")
    publish({"type": "RequestDeleteTodoViewModel", "id": "d", "payload": {"todo": {"id": ids[2]}}})
    answer("d")
    recording.insert(2, "this line is not json")
    recording.insert(3, json.dumps({"type": "RequestWriteTodo", "id": "w", "payload": {}}))
    path = tmp_path / "session.ndjson"
    path.write_text("\n".join(recording) + "\n")

    fresh_daemon = daemon_factory("--storage", "memory")
    result = subprocess.run([daemon_binary(), "replay", str(path), "--connect", f"127.0.0.1:{fresh_daemon.tcp_port}"],
                            capture_output=True, text=True, timeout=60)
    assert "line 3: not a JSON object; skipped" in result.stderr
    assert "line 4: RequestWriteTodo is not a view request; skipped" in result.stderr
    assert "2 lines skipped" in result.stderr and "0 differences" in result.stderr, result.stderr
    assert result.returncode == 0

    def todos(port):
        client, client_reader, _ = line_client(port)
        send(client, {"type": "RequestTodoViewModels", "id": "all"})
        listed = read_until(client_reader, lambda f: f.get("re") == "all")["payload"]
        return sorted((vm["todo"]["id"], vm["title"], vm["complete"], vm["deleted"], vm["todo"]["priority"])
                      for vm in listed)

    assert todos(fresh_daemon.tcp_port) == todos(original.tcp_port)
    assert len(todos(original.tcp_port)) == 2


@pytest.mark.daemon_args("--token", "view:view-token-123", "--monitor-token", "tap-token-123")
def test_tap_with_a_view_token_fails_clearly(daemon):
    result = subprocess.run([daemon_binary(), "tap", "--connect", f"127.0.0.1:{daemon.tcp_port}",
                             "--token", "view-token-123"], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "tap needs a monitor token; this one has the view role" in result.stderr, result.stderr


@pytest.mark.daemon_args("--token", "view:replay-view-1", "--token", "monitor:replay-mon-1")
def test_replay_needs_a_view_token_where_the_daemon_requires_one(daemon, tmp_path):
    """Without a token, or with a monitor's (a monitor publishes nothing), replay stops at once
    and says why, rather than sending every request to be refused."""
    recording = tmp_path / "one.ndjson"
    recording.write_text(json.dumps({"type": "RequestTodoViewModels", "id": "l"}) + "\n")
    base = [daemon_binary(), "replay", str(recording), "--connect", f"127.0.0.1:{daemon.tcp_port}"]
    none = subprocess.run(base, capture_output=True, text=True, timeout=30)
    assert none.returncode == 1 and "requires a token" in none.stderr, (none.returncode, none.stderr)
    monitor = subprocess.run(base + ["--token", "replay-mon-1"], capture_output=True, text=True, timeout=30)
    assert monitor.returncode == 1 and "needs a view token" in monitor.stderr, (monitor.returncode, monitor.stderr)
    view = subprocess.run(base + ["--token", "replay-view-1"], capture_output=True, text=True, timeout=30)
    assert view.returncode == 0, view.stderr
    assert "replayed 1 request " in view.stderr, view.stderr


def test_tap_and_replay_give_up_on_a_server_that_never_greets(tmp_path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    port = silent.getsockname()[1]
    recording = tmp_path / "empty.ndjson"
    recording.write_text("")
    try:
        for command in (["tap", "--token", "x" * 12], ["replay", str(recording)]):
            result = subprocess.run([daemon_binary(), *command, "--connect", f"127.0.0.1:{port}"],
                                    capture_output=True, text=True, timeout=60)
            assert result.returncode != 0
            assert "did not greet like todostreamd" in result.stderr, result.stderr
    finally:
        silent.close()


def test_replay_with_a_refused_token_fails_clearly(daemon, tmp_path):
    recording = tmp_path / "one.ndjson"
    recording.write_text(json.dumps({"type": "RequestTodoViewModels", "id": "l"}) + "\n")
    result = subprocess.run([daemon_binary(), "replay", str(recording), "--connect", f"127.0.0.1:{daemon.tcp_port}",
                             "--token", "not-a-token"], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "replay refused" in result.stderr, result.stderr


@pytest.mark.daemon_args("--monitor-token", "tap-token-123")
def test_a_tap_recording_replays_and_its_answers_are_compared(daemon, daemon_factory, tmp_path):
    """A tap recording holds copies with `session` and no ids: each request is paired with the
    next answers of its session. Into a fresh daemon it replays with no difference; into the
    same daemon again, the save of an already saved todo is a conflict, and that is reported."""
    tap = subprocess.Popen([daemon_binary(), "tap", "--connect", f"127.0.0.1:{daemon.tcp_port}",
                            "--token", "tap-token-123"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        sock, reader, _ = line_client(daemon.tcp_port)
        # The tap's subscription shows only through what it prints: wait for a ping's effect.
        attempt = 0
        while not lines:
            assert attempt < 50, "the tap printed nothing"
            create_todo(sock, reader, f"warm-up {attempt}", f"w{attempt}")
            attempt += 1
            while select.select([tap.stdout], [], [], 0.2)[0]:
                lines.append(tap.stdout.readline())
        saved = create_todo(sock, reader, "recorded", "r")
        send(sock, {"type": "RequestToggleCompleteTodoViewModel", "id": "t",
                    "payload": {"todo": {"id": saved["payload"]["todo"]["id"]}}})
        read_until(reader, lambda f: f.get("re") == "t")
        while not any('"RequestToggleCompleteTodoViewModel"' in line for line in lines) or \
                select.select([tap.stdout], [], [], 0.5)[0]:
            lines.append(tap.stdout.readline())
    finally:
        tap.kill()
        tap.wait()
    # From the recorded todo's creation on.
    start = next(i for i, line in enumerate(lines) if '"recorded"' in line and "RequestUpdateDetailViewModel" in line)
    start = max(i for i in range(start) if "RequestNewTodoDetailViewModel" in lines[i])
    path = tmp_path / "tap.ndjson"
    path.write_text("".join(lines[start:]))

    fresh = daemon_factory("--storage", "memory")
    first = subprocess.run([daemon_binary(), "replay", str(path), "--connect", f"127.0.0.1:{fresh.tcp_port}"],
                           capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert "replayed 3 requests" in first.stderr and "0 differences" in first.stderr, first.stderr
    again = subprocess.run([daemon_binary(), "replay", str(path), "--connect", f"127.0.0.1:{fresh.tcp_port}"],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2, again.stderr
    assert "RequestUpdateDetailViewModel answered differently" in again.stderr, again.stderr


def test_tap_on_a_closed_port_says_so_in_one_line():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    result = subprocess.run([daemon_binary(), "tap", "--connect", f"127.0.0.1:{port}", "--token", "x" * 12],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert result.stderr.strip() == f"todostreamd: cannot connect to 127.0.0.1:{port}: connection refused", result.stderr
