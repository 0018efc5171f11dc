"""`todostreamd tap` prints every event of a live system; `todostreamd replay` plays a recorded
session into a daemon and yields the same todos."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import threading
import time

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


def _replay(path, port, *extra, timeout=60):
    return subprocess.run([daemon_binary(), "replay", str(path), "--connect", f"127.0.0.1:{port}", *extra],
                          capture_output=True, text=True, timeout=timeout)


def _record(port, *, one_id=False, mid_retry=False):
    """A saved nc session: a list, a new todo and its save (reply, then broadcast), a list
    again; with `one_id`, every request has the id "1"; with `mid_retry`, a toggle with a `mid`
    and its retry, answered as a duplicate with `applied_seq`."""
    sock, reader, _ = line_client(port)
    recording = []

    def exchange(frame, answers=1):
        frame["id"] = "1" if one_id else f"r{len(recording)}"
        recording.append(json.dumps(frame))
        send(sock, frame)
        got = []
        for _ in range(answers):
            got.append(read_until(reader, lambda f: f.get("re") == frame["id"]))
            recording.append(json.dumps(got[-1]))
        return got[0]

    exchange({"type": "RequestTodoViewModels"})
    fresh = exchange({"type": "RequestNewTodoDetailViewModel"})["payload"]
    fresh["title"] = "recorded"
    saved = exchange({"type": "RequestUpdateDetailViewModel", "payload": fresh}, answers=2)
    exchange({"type": "RequestTodoViewModels"})
    if mid_retry:
        toggle = {"type": "RequestToggleCompleteTodoViewModel", "mid": "replay-m1",
                  "payload": {"todo": {"id": saved["payload"]["todo"]["id"]}}}
        exchange(toggle)
        assert "applied_seq" in exchange(toggle)
    return recording


def _replays_without_difference(recording, path, daemon_factory):
    """Writes `recording` (lines) to `path` and replays it into a fresh daemon: 4 requests, no
    difference."""
    path.write_text("\n".join(recording) + "\n")
    result = _replay(path, daemon_factory("--storage", "memory").tcp_port)
    assert result.returncode == 0, result.stderr
    assert "replayed 4 requests" in result.stderr and "0 differences" in result.stderr, result.stderr


def test_replay_compares_each_request_with_the_next_answer_to_its_id(daemon_factory, tmp_path):
    """A session that reuses one id: each request is compared with the next later line whose
    re is that id, not the last (the first list, empty, with the second, which is not)."""
    recording = _record(daemon_factory("--storage", "memory").tcp_port, one_id=True)
    _replays_without_difference(recording, tmp_path / "one-id.ndjson", daemon_factory)


def test_replay_ignores_applied_seq_like_the_other_seqs(daemon_factory, tmp_path):
    """A mid retry's answer carries the seq its write was applied with: the recording's daemon
    had written before, the fresh one has not, so the seqs differ and are not a difference."""
    original = daemon_factory("--storage", "memory")
    warm, warm_reader, _ = line_client(original.tcp_port)
    for index in range(3):
        create_todo(warm, warm_reader, f"before {index}", f"b{index}")
    recording = _record(original.tcp_port, mid_retry=True)
    # Only the recorded todo is compared: the lists (which hold the others) are left out.
    recording = [line for line in recording if "ViewModels" not in line]
    _replays_without_difference(recording, tmp_path / "retry.ndjson", daemon_factory)


def test_replay_reads_a_crlf_file(daemon_factory, tmp_path):
    recording = _record(daemon_factory("--storage", "memory").tcp_port)
    crlf = tmp_path / "crlf.ndjson"
    crlf.write_bytes(("\r\n".join(recording) + "\r\n").encode())
    result = _replay(crlf, daemon_factory("--storage", "memory").tcp_port)
    assert result.returncode == 0, result.stderr
    assert "replayed 4 requests" in result.stderr and "0 lines skipped" in result.stderr, result.stderr


def test_replay_skips_a_line_not_utf8_with_its_number(daemon_factory, tmp_path):
    lines = [line.encode() for line in _record(daemon_factory("--storage", "memory").tcp_port)]
    lines.insert(1, b"caf\xe9 is not UTF-8")
    latin1 = tmp_path / "latin1.ndjson"
    latin1.write_bytes(b"\n".join(lines) + b"\n")
    result = _replay(latin1, daemon_factory("--storage", "memory").tcp_port)
    assert "line 2: not valid UTF-8; skipped" in result.stderr, result.stderr
    assert "replayed 4 requests" in result.stderr and "1 line skipped" in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr


def test_replay_reports_a_request_over_the_frame_limit_as_refused_and_goes_on(daemon, tmp_path):
    """The daemon answers an oversized line with frame_too_large, without re: that answers the
    request waiting, and the next one is replayed."""
    path = tmp_path / "big.ndjson"
    path.write_text(json.dumps({"type": "RequestTodoViewModels", "id": "big", "payload": {"pad": "x" * 70_000}})
                    + "\n" + json.dumps({"type": "RequestTodoViewModels", "id": "small"}) + "\n")
    result = _replay(path, daemon.tcp_port)
    assert result.returncode == 2, result.stderr
    assert "line 1: RequestTodoViewModels refused" in result.stderr, result.stderr
    assert "line 2" not in result.stderr, result.stderr
    assert "replayed 2 requests" in result.stderr and "1 difference" in result.stderr, result.stderr


def test_replay_compares_an_error_answer_with_the_recorded_one(daemon, tmp_path):
    """An error is an answer like any other: the same error as recorded (a saved nc session
    with a bad request) is no difference; another one is, with both shown. It was always
    reported as refused, so such a session never replayed cleanly."""
    bad = {"type": "RequestTodoDetailViewModel", "id": "f", "payload": {"todo": {"id": "bad"}}}
    sock, reader, _ = line_client(daemon.tcp_port)
    sock.sendall((json.dumps(bad) + "\n").encode())
    answer = json.loads(reader.readline())
    assert answer["error"]["code"] == "invalid_payload", answer
    sock.close()
    same = tmp_path / "same.ndjson"
    same.write_text(json.dumps(bad) + "\n" + json.dumps(answer) + "\n")
    result = _replay(same, daemon.tcp_port)
    assert result.returncode == 0, result.stderr
    assert "replayed 1 request" in result.stderr and "0 differences" in result.stderr, result.stderr
    other = dict(answer, error={"code": "not_found", "message": "No such todo."})
    differs = tmp_path / "differs.ndjson"
    differs.write_text(json.dumps(bad) + "\n" + json.dumps(other) + "\n")
    result = _replay(differs, daemon.tcp_port)
    assert result.returncode == 2, result.stderr
    assert "line 1: RequestTodoDetailViewModel answered differently" in result.stderr, result.stderr
    assert "invalid_payload" in result.stderr and "not_found" in result.stderr, result.stderr
    # A new todo's answer is not compared (its id is made up each time), but an error on one
    # side only is a difference all the same.
    new = {"type": "RequestNewTodoDetailViewModel", "id": "n"}
    recorded = {"op": "error", "re": "n", "error": {"code": "unavailable", "message": "Storage is unavailable."}}
    answered_now = tmp_path / "answered-now.ndjson"
    answered_now.write_text(json.dumps(new) + "\n" + json.dumps(recorded) + "\n")
    result = _replay(answered_now, daemon.tcp_port)
    assert result.returncode == 2, result.stderr
    assert "line 1: RequestNewTodoDetailViewModel answered differently" in result.stderr, result.stderr


def _fake_daemon(after_first_request):
    """A server that greets like todostreamd, reads the first request and then does
    `after_first_request(connection)`; returns its port and a function that stops it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    done = threading.Event()

    def serve():
        connection, _ = server.accept()
        with connection:
            connection.sendall(b'{"op":"hello","session":"fake"}\n')
            connection.makefile("rb").readline()
            after_first_request(connection)
            done.wait(60)

    threading.Thread(target=serve, daemon=True).start()

    def stop():
        done.set()
        server.close()

    return server.getsockname()[1], stop


def _two_requests(tmp_path):
    path = tmp_path / "two.ndjson"
    path.write_text(json.dumps({"type": "RequestTodoViewModels", "id": "a"}) + "\n"
                    + json.dumps({"type": "RequestTodoViewModels", "id": "b"}) + "\n")
    return path


def test_replay_gives_up_on_an_answer_that_does_not_come(tmp_path):
    port, stop = _fake_daemon(lambda connection: None)
    try:
        started = time.monotonic()
        result = _replay(_two_requests(tmp_path), port, "--timeout", "1", timeout=30)
        assert time.monotonic() - started < 20
    finally:
        stop()
    assert result.returncode == 2, result.stderr
    assert "line 1: RequestTodoViewModels refused: no answer within 1 s" in result.stderr, result.stderr
    assert "line 2: RequestTodoViewModels refused: not sent" in result.stderr, result.stderr
    assert "replayed 1 request from" in result.stderr and "2 differences" in result.stderr, result.stderr


def _reset(connection):
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    connection.close()


def _drain_and_close(connection):
    connection.sendall(b'{"op":"draining","reconnect_after_ms":1000}\n')
    connection.shutdown(socket.SHUT_RDWR)


@pytest.mark.parametrize("going", [lambda c: c.shutdown(socket.SHUT_RDWR), _reset, _drain_and_close],
                         ids=["closed", "reset", "draining"])
def test_replay_counts_the_requests_a_closed_connection_left_unanswered(tmp_path, going):
    port, stop = _fake_daemon(going)
    try:
        result = _replay(_two_requests(tmp_path), port, timeout=30)
    finally:
        stop()
    assert result.returncode == 2, result.stderr
    assert "line 1: RequestTodoViewModels refused: the daemon closed the connection" in result.stderr, result.stderr
    assert "line 2: RequestTodoViewModels refused: not sent" in result.stderr, result.stderr
    assert "2 differences" in result.stderr, result.stderr
    if going is _drain_and_close:
        assert "(draining)" in result.stderr, result.stderr


def test_replay_into_a_daemon_stopped_midway_ends_with_its_summary(daemon, tmp_path):
    path = tmp_path / "many.ndjson"
    path.write_text("".join(json.dumps({"type": "RequestTodoViewModels", "id": f"l{index}"}) + "\n"
                            for index in range(50_000)))
    replay = subprocess.Popen([daemon_binary(), "replay", str(path), "--connect", f"127.0.0.1:{daemon.tcp_port}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    daemon.stop()  # SIGTERM: draining, then the connection closed
    _, stderr = replay.communicate(timeout=60)
    assert replay.returncode == 2, stderr[-2000:]
    assert "refused: not sent: the daemon closed the connection" in stderr, stderr[-2000:]
    assert "replayed " in stderr.splitlines()[-1] and "differences" in stderr.splitlines()[-1], stderr[-2000:]


@pytest.mark.daemon_args("--monitor-token", "tap-token-123")
def test_tap_fails_when_the_daemon_closes_the_connection(daemon):
    """The tap runs until stopped; a stream that ends on its own (the daemon stopped or
    restarted) is a failure a script or a unit can see and act on, not a success."""
    tap = subprocess.Popen([daemon_binary(), "tap", "--connect", f"127.0.0.1:{daemon.tcp_port}",
                            "--token", "tap-token-123"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sock, reader, _ = line_client(daemon.tcp_port)
        _write_until_tapped(tap, sock, reader, "ResponseTodo")
        sock.close()
        daemon.stop()
        assert tap.wait(timeout=30) == 1, tap.stderr.read()
        assert "tap: the daemon closed the connection" in tap.stderr.read()
    finally:
        tap.kill()
        tap.wait()
