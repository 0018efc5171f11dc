"""Protocol 1.1: idempotent writes with a client mutation id (`mid`), against the real binary over
plain TCP (nc-style NDJSON lines): on SQLite, across a restart, and on two daemons sharing one
PostgreSQL, where a retry sent to the other daemon is still a duplicate.

Nothing here sleeps to synchronise: every wait reads for the frame it expects, bounded by a
deadline.
"""

from __future__ import annotations

import json

from helpers import LineClient, create_todo, next_id
from test_postgres import database, postgres  # noqa: F401  (fixtures)


def toggle_frame(todo_id: str, mid: str | None, rid: str | None = None) -> dict:
    frame = {"type": "RequestToggleCompleteTodoViewModel", "id": rid or next_id(),
             "payload": {"todo": {"id": todo_id}}}
    if mid is not None:
        frame["mid"] = mid
    return frame


def send_request(c: LineClient, frame: dict) -> dict:
    c.send(frame)
    return c.expect_re(frame["id"])


def assert_duplicate_of(answer: dict, original: dict) -> None:
    assert "seq" not in answer, f"a duplicate's answer is a reply, without seq: {answer}"
    assert answer.get("duplicate") is True, answer
    assert answer.get("applied_seq") == original["seq"], (answer, original)
    assert answer.get("mid") == original.get("mid"), (answer, original)
    assert answer.get("type") == "ResponseTodoViewModel", answer
    assert answer.get("payload") == original["payload"], (answer, original)


def test_hello_announces_mid(daemon):
    with LineClient(daemon.tcp_port) as c:
        assert c.hello["protocol"] == 1
        assert c.hello["features"] == ["mid"], c.hello


def test_a_toggle_retried_with_its_mid_is_applied_once_and_not_broadcast(daemon):
    with LineClient(daemon.tcp_port, name="writer") as w, LineClient(daemon.tcp_port, name="watcher") as o:
        o.ping()
        _, created = create_todo(w, "once")
        o.expect_seq(created["seq"])
        todo_id = created["payload"]["todo"]["id"]
        mid = "k3f9a1:17"
        first = send_request(w, toggle_frame(todo_id, mid))
        assert first["seq"] == created["seq"] + 1 and first["mid"] == mid, first
        seen = o.expect_seq(first["seq"])
        assert seen["mid"] == mid and "re" not in seen, seen
        again = send_request(w, toggle_frame(todo_id, mid))
        assert_duplicate_of(again, first)
        # The next write takes the next seq; the watcher's next broadcast is that one.
        nxt = send_request(w, toggle_frame(todo_id, "k3f9a1:18"))
        assert nxt["seq"] == first["seq"] + 1, nxt
        assert nxt["payload"]["complete"] is False, nxt
        follow = o.recv()
        assert follow.get("seq") == nxt["seq"], f"the duplicate must not be broadcast: {follow}"


def test_the_same_mid_twice_in_one_burst_is_applied_once(daemon):
    with LineClient(daemon.tcp_port) as c:
        _, created = create_todo(c, "burst")
        todo_id = created["payload"]["todo"]["id"]
        frames = [toggle_frame(todo_id, "burst:1", rid=f"b{n}") for n in range(3)]
        c.sock.sendall(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        first = c.expect_re("b0")
        assert first["seq"] == created["seq"] + 1, first
        for rid in ("b1", "b2"):
            assert_duplicate_of(c.expect_re(rid), first)


def test_bad_mids_are_invalid_frames(daemon):
    with LineClient(daemon.tcp_port) as c:
        _, created = create_todo(c, "untouched")
        todo_id = created["payload"]["todo"]["id"]
        for n, mid in enumerate(["", "x" * 65, 17, {"a": 1}, None]):
            frame = toggle_frame(todo_id, None, rid=f"bad{n}")
            frame["mid"] = mid
            c.send(frame)
            answer = c.expect_error("invalid_frame", f"bad{n}")
            assert "mid" in answer["error"]["message"], answer
        applied = send_request(c, toggle_frame(todo_id, "y" * 64))
        assert applied["seq"] == created["seq"] + 1, "nothing before was applied"


def test_a_mid_on_a_read_has_no_effect(daemon):
    with LineClient(daemon.tcp_port) as c:
        create_todo(c, "listed")
        for _ in range(2):
            answer = send_request(c, {"type": "RequestTodoViewModels", "id": next_id(), "mid": "read:1"})
            assert answer["type"] == "ResponseTodoViewModels" and len(answer["payload"]) == 1, answer
            assert "duplicate" not in answer and "mid" not in answer, answer


def test_a_mid_survives_a_restart_and_resume_replays_carry_it(daemon_factory):
    d = daemon_factory()
    with LineClient(d.tcp_port) as c:
        epoch = c.hello["epoch"]
        _, created = create_todo(c, "durable")
        todo_id = created["payload"]["todo"]["id"]
        first = send_request(c, toggle_frame(todo_id, "restart:1"))
    d.restart()
    with LineClient(d.tcp_port) as c:
        again = send_request(c, toggle_frame(todo_id, "restart:1"))
        assert_duplicate_of(again, first)
        c.send({"op": "resume", "epoch": epoch, "after": 0, "id": "r"})
        replayed = [c.recv(), c.recv()]
        assert [f.get("seq") for f in replayed] == [created["seq"], first["seq"]], replayed
        assert "mid" not in replayed[0] and replayed[1]["mid"] == "restart:1", replayed
        assert c.expect_re("r")["op"] == "resumed"


def test_on_postgres_a_retry_sent_to_the_other_daemon_is_a_duplicate(daemon_factory, database):  # noqa: F811
    a, b = (daemon_factory(*database[1]) for _ in range(2))
    with LineClient(a.tcp_port, name="writer@A") as wa, LineClient(b.tcp_port, name="retry@B") as wb, \
            LineClient(b.tcp_port, name="observer@B") as ob:
        ob.ping()
        _, created = create_todo(wa, "shared")
        ob.expect_seq(created["seq"])
        todo_id = created["payload"]["todo"]["id"]
        mid = "pg-client:1"
        first = send_request(wa, toggle_frame(todo_id, mid))
        assert first["seq"] == created["seq"] + 1 and first["mid"] == mid, first
        # B's clients see A's write with its mid (read from the shared journal).
        seen = ob.expect_seq(first["seq"])
        assert seen["mid"] == mid, seen
        # The retry on the other daemon is answered with the original outcome.
        again = send_request(wb, toggle_frame(todo_id, mid))
        assert_duplicate_of(again, first)
        # Same mid twice in one burst on B, and a new one: applied once, next seq.
        frames = [toggle_frame(todo_id, "pg-client:2", rid=f"p{n}") for n in range(2)]
        wb.sock.sendall(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        p0 = wb.expect_re("p0")
        assert p0["seq"] == first["seq"] + 1, p0
        assert_duplicate_of(wb.expect_re("p1"), p0)
        # And the first mid, sent to A again, is still a duplicate.
        assert_duplicate_of(send_request(wa, toggle_frame(todo_id, mid)), first)
        follow = ob.expect_seq(p0["seq"])
        assert follow["mid"] == "pg-client:2", follow
