"""`todostreamd tap` prints every event of a live system; `todostreamd replay` plays a recorded
session into a daemon and yields the same todos."""

from __future__ import annotations

import json
import select
import subprocess

import pytest

from conftest import daemon_binary
from test_systemd import create_todo, line_client, read_until, send


@pytest.mark.daemon_args("--monitor-token", "tap-token-123")
def test_tap_prints_model_layer_events_with_their_session(daemon):
    tap = subprocess.Popen([daemon_binary(), "tap", "--connect", f"127.0.0.1:{daemon.tcp_port}",
                            "--token", "tap-token-123"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The tap prints nothing of its own, so its subscription is visible only through what it
        # prints: make a change, and another, until one shows (bounded).
        sock, reader, hello = line_client(daemon.tcp_port)
        seen = []
        attempt = 0
        while not any(frame.get("type") == "ResponseTodo" for frame in seen):
            assert attempt < 50, f"the tap printed no ResponseTodo: {seen}"
            create_todo(sock, reader, f"tapped {attempt}", f"t{attempt}")
            attempt += 1
            while select.select([tap.stdout], [], [], 0.2)[0]:
                line = tap.stdout.readline()
                assert line, tap.stderr.read()
                seen.append(json.loads(line))
        names = [frame["type"] for frame in seen]
        assert "RequestWriteTodo" in names
        assert all(frame.get("session") == hello["session"] for frame in seen if "seq" not in frame)
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
    path = tmp_path / "session.ndjson"
    path.write_text("\n".join(recording) + "\n")

    fresh_daemon = daemon_factory("--storage", "memory")
    result = subprocess.run([daemon_binary(), "replay", str(path), "--connect", f"127.0.0.1:{fresh_daemon.tcp_port}"],
                            capture_output=True, text=True, timeout=60)
    assert "line 3: not a JSON object; skipped" in result.stderr
    assert "0 differences" in result.stderr, result.stderr
    assert result.returncode == 0

    def todos(port):
        client, client_reader, _ = line_client(port)
        send(client, {"type": "RequestTodoViewModels", "id": "all"})
        listed = read_until(client_reader, lambda f: f.get("re") == "all")["payload"]
        return sorted((vm["todo"]["id"], vm["title"], vm["complete"], vm["deleted"], vm["todo"]["priority"])
                      for vm in listed)

    assert todos(fresh_daemon.tcp_port) == todos(original.tcp_port)
    assert len(todos(original.tcp_port)) == 2
