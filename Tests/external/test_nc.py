"""Real `nc` sessions (Debian's netcat-openbsd) against the real daemon, as the README's
walkthrough does them: two windows, a todo created in one appears in the other at once."""

import json
import socket
import subprocess
import time

import pytest

from helpers import LineClient, ProcessClient, UUID_RE, require_tool


@pytest.fixture(scope="module")
def nc():
    path = require_tool("nc")
    out = subprocess.run([path, "-h"], capture_output=True, text=True)
    assert "OpenBSD netcat" in out.stdout + out.stderr, f"{path} is not Debian's netcat-openbsd: {out.stderr[:200]}"
    return path


def nc_session(nc, port, *flags, name="nc"):
    return ProcessClient([nc, *flags, "127.0.0.1", str(port)], name=name)


def test_two_nc_windows_see_each_others_changes(nc, daemon):
    with nc_session(nc, daemon.tcp_port, name="nc-A") as a, nc_session(nc, daemon.tcp_port, name="nc-B") as b:
        for h in (a.hello, b.hello):
            assert h["op"] == "hello" and h["protocol"] == 1 and h["subscriptions"] == ["Response*"], h
        b.ping()  # B has spoken: live broadcasts flow to it from now on

        a.send({"type": "RequestNewTodoDetailViewModel", "id": "1"})
        fresh = a.expect_re("1")
        assert fresh["type"] == "ResponseTodoDetailViewModel", fresh
        todo_id = fresh["payload"]["todo"]["id"]
        assert UUID_RE.match(todo_id)

        a.send({"type": "RequestUpdateDetailViewModel", "id": "2",
                "payload": {"todo": {"id": todo_id, "version": 0}, "title": "Buy milk", "priority": "high"}})
        saved = a.expect(lambda f: f.get("re") == "2" and f.get("type") == "ResponseUpdateDetailViewModel")
        assert "error" not in saved and saved["payload"]["title"] == "Buy milk", saved
        mine = a.expect(lambda f: f.get("re") == "2" and f.get("type") == "ResponseTodoViewModel")
        seq = mine["seq"]
        theirs = b.expect_seq(seq)
        assert "re" not in theirs, f"B's copy must not carry re: {theirs}"
        assert theirs["payload"] == mine["payload"]
        assert theirs["payload"]["subtitle"] == "Priority: HIGH" and theirs["payload"]["title"] == "Buy milk"

        # toggle from B appears in A with the next seq
        b.send({"type": "RequestToggleCompleteTodoViewModel", "id": "3", "payload": {"todo": {"id": todo_id}}})
        toggled = b.expect_re("3")
        assert toggled["seq"] == seq + 1 and toggled["payload"]["complete"] is True, toggled
        seen = a.expect_seq(seq + 1)
        assert "re" not in seen and seen["payload"]["complete"] is True

        # the list from B holds it, newest first
        b.send({"type": "RequestTodoViewModels", "id": 4})
        listing = b.expect_re(4)
        assert listing["type"] == "ResponseTodoViewModels" and "seq" not in listing
        assert listing["payload"][0]["todo"]["id"] == todo_id

        # delete from A: soft, broadcast to B
        a.send({"type": "RequestDeleteTodoViewModel", "id": "5", "payload": {"todo": {"id": todo_id}}})
        gone = a.expect_re("5")
        assert gone["seq"] == seq + 2 and gone["payload"]["deleted"] is True, gone
        assert b.expect_seq(seq + 2)["payload"]["deleted"] is True

        # a mistake: a clear error, the window stays usable
        a.send(b'{"type":"Foo","id":"7"}\n')
        err = a.expect_re("7")
        assert err["op"] == "error" and err["error"]["code"] == "unknown_type", err
        a.send({"op": "ping", "id": "6"})
        assert a.expect_re("6") == {"op": "pong", "re": "6"}
        b.send({"type": "RequestTodoViewModels", "id": "8"})
        assert todo_id not in [t["todo"]["id"] for t in b.expect_re("8")["payload"]]


def test_nc_with_crlf_line_endings(nc, daemon):
    """`nc -C` sends CRLF, as a Windows terminal or telnet would."""
    with nc_session(nc, daemon.tcp_port, "-C", name="nc-C") as a, LineClient(daemon.tcp_port, name="watcher") as w:
        w.ping()
        a.send(b'{"type":"RequestNewTodoDetailViewModel","id":"n1"}\n\n')
        fresh = a.expect_re("n1")
        a.send({"type": "RequestUpdateDetailViewModel", "id": "n2",
                "payload": {"todo": {"id": fresh["payload"]["todo"]["id"]}, "title": "via CRLF"}})
        b = a.expect(lambda f: f.get("re") == "n2" and "seq" in f)
        assert w.expect_seq(b["seq"])["payload"]["title"] == "via CRLF"
        errors = [f for f in a.history if f.get("op") == "error"]
        assert errors == [], f"CRLF and blank lines must not produce errors: {errors}"


def test_piped_nc_gets_every_answer_before_the_daemon_closes(nc, daemon):
    """`printf … | nc -N host port`: nc sends the lines, half-closes, and prints what comes back.
    Every frame the daemon read must be answered before it closes the connection."""
    frames = (
        b'{"type":"RequestNewTodoDetailViewModel","id":"p1"}\n'
        b'{"type":"RequestTodoViewModels","id":"p2"}\n'
        b'{"op":"ping","id":"p3"}\n'
    )
    try:
        out = subprocess.run([nc, "-N", "127.0.0.1", str(daemon.tcp_port)], input=frames, capture_output=True, timeout=20)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the daemon did not close after the client half-closed (nc -N still waiting); got: {e.stdout!r}")
    lines = [line for line in out.stdout.decode().split("\n") if line]
    got = [json.loads(line) for line in lines]
    assert got and got[0].get("op") == "hello", got
    res = {f.get("re"): f for f in got[1:]}
    missing = [rid for rid in ("p1", "p2", "p3") if rid not in res]
    assert not missing, (
        f"sent 3 frames then half-closed (shutdown SHUT_WR); answers for {missing} never came.\n"
        f"received: {[json.dumps(f)[:120] for f in got]}"
    )
    assert res["p1"]["type"] == "ResponseTodoDetailViewModel"
    assert res["p2"]["type"] == "ResponseTodoViewModels"
    assert res["p3"] == {"op": "pong", "re": "p3"}
    assert [f.get("re") for f in got[1:]] == ["p1", "p2", "p3"], "answers come in the order the frames were sent"


@pytest.mark.parametrize("path", ["/healthz", "/metrics", "/"])
def test_piped_nc_gets_its_http_answer_before_the_daemon_closes(nc, daemon, path):
    """`printf 'GET /healthz …' | nc -N host port`, as a health-check script does it: nc sends
    the request, half-closes, and prints the answer. The answer comes, then the connection
    closes (/healthz and /metrics are answered off the loop: the half-close used to close the
    connection first, and nc printed nothing)."""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{daemon.http_port}\r\n\r\n".encode()
    try:
        out = subprocess.run([nc, "-N", "127.0.0.1", str(daemon.http_port)], input=request, capture_output=True,
                             timeout=20)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the daemon did not close after the client half-closed: {e.stdout!r}")
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK"), out.stdout[:300]
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    assert len(body) == length, (len(body), length)


def test_two_pipelined_http_requests_then_a_half_close_get_both_answers(daemon):
    with socket.create_connection(("127.0.0.1", daemon.http_port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    assert got.count(b"HTTP/1.1 200 OK") == 2, got[:500]
    assert b'"storage":"ok"' in got and b"# TYPE" in got


def test_an_idle_http_connection_that_half_closes_is_closed(daemon):
    with socket.create_connection(("127.0.0.1", daemon.http_port), timeout=10) as s:
        s.shutdown(socket.SHUT_WR)
        started = time.monotonic()
        assert s.recv(100) == b""
        assert time.monotonic() - started < 5
