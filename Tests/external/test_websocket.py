"""WebSocket at GET /events (docs/PROTOCOL.md §1, issue 3): the Python `websockets` library doing the
nc flow, and a hand-written RFC 6455 client over a plain socket for the protocol violations."""

import json
import socket
import struct
import threading

import pytest

from helpers import (
    LineClient,
    RawWS,
    WSClient,
    create_todo,
    list_todos,
    require_websockets,
    toggle,
)


@pytest.fixture(autouse=True)
def _websockets_installed():
    require_websockets()


def ws(daemon, name="ws", **kw):
    return WSClient(daemon.http_port, name=name, **kw)


# ============================================================================================
# the websockets library


def test_websockets_client_runs_the_nc_flow(daemon):
    with ws(daemon, "ws-A") as a, ws(daemon, "ws-B") as b:
        for h in (a.hello, b.hello):
            assert h["op"] == "hello" and h["protocol"] == 1 and h["subscriptions"] == ["Response*"], h
        b.ping()
        a.send({"type": "RequestNewTodoDetailViewModel", "id": "1"})
        fresh = a.expect_re("1")
        assert fresh["type"] == "ResponseTodoDetailViewModel", fresh
        tid = fresh["payload"]["todo"]["id"]
        a.send({"type": "RequestUpdateDetailViewModel", "id": "2",
                "payload": {"todo": {"id": tid, "version": 0}, "title": "Buy milk", "priority": "high"}})
        saved = a.expect(lambda f: f.get("re") == "2" and f.get("type") == "ResponseUpdateDetailViewModel")
        assert "error" not in saved, saved
        mine = a.expect(lambda f: f.get("re") == "2" and f.get("type") == "ResponseTodoViewModel")
        theirs = b.expect_seq(mine["seq"])
        assert "re" not in theirs and theirs["payload"] == mine["payload"]
        b.send({"type": "RequestToggleCompleteTodoViewModel", "id": 3, "payload": {"todo": {"id": tid}}})
        t = b.expect_re(3)
        assert t["seq"] == mine["seq"] + 1 and t["payload"]["complete"] is True
        assert "re" not in a.expect_seq(t["seq"])
        a.send({"type": "RequestDeleteTodoViewModel", "id": "5", "payload": {"todo": {"id": tid}}})
        d = a.expect_re("5")
        assert d["payload"]["deleted"] is True and b.expect_seq(d["seq"])["payload"]["deleted"] is True
        assert tid not in [v["todo"]["id"] for v in list_todos(b)]
        a.send({"type": "Foo", "id": "7"})
        assert a.expect_re("7")["error"]["code"] == "unknown_type"
        a.ping()


def test_trailing_newline_in_a_text_message_is_tolerated(daemon):
    with ws(daemon) as c:
        c.send('{"op":"ping","id":"nl"}\n')
        assert c.expect_re("nl") == {"op": "pong", "re": "nl"}


def test_binary_message_is_unsupported_frame_and_stays_open(daemon):
    with ws(daemon) as c:
        c.send(b'{"op":"ping","id":"bin"}')
        f = c.recv()
        assert f.get("op") == "error" and f["error"]["code"] == "unsupported_frame", f
        c.ping()


def test_invalid_json_text_message_stays_open(daemon):
    with ws(daemon) as c:
        for bad in ("nope", "[1]", "{", "7"):
            c.send(bad)
            f = c.recv()
            assert f.get("op") == "error" and f["error"]["code"] == "invalid_json", (bad, f)
        c.ping()


def test_message_over_max_frame_bytes_is_frame_too_large_and_stays_open(daemon):
    with ws(daemon) as c:
        c.send(json.dumps({"op": "ping", "id": "big", "pad": "x" * (100 * 1024)}))
        f = c.recv()
        assert f.get("op") == "error" and f["error"]["code"] == "frame_too_large", f
        c.send({"op": "ping", "id": "after"})
        assert c.expect_re("after") == {"op": "pong", "re": "after"}


def test_a_change_over_tcp_reaches_websocket_with_the_same_seq(daemon):
    with ws(daemon) as w, LineClient(daemon.tcp_port, name="tcp") as tcp:
        w.ping()
        _, b = create_todo(tcp, "from tcp")
        seen = w.expect_seq(b["seq"])
        assert "re" not in seen and seen["payload"] == b["payload"]
        t = toggle(w, {"id": b["payload"]["todo"]["id"]})
        assert t["seq"] == b["seq"] + 1
        assert "re" not in tcp.expect_seq(t["seq"])


def test_permessage_deflate_is_offered(daemon):
    """Issue 3: permessage-deflate offered (the websockets library asks for it by default)."""
    with ws(daemon) as c:
        ext = c.ws.response.headers.get("Sec-WebSocket-Extensions", "")
        assert "permessage-deflate" in ext, f"no permessage-deflate in the upgrade response: {dict(c.ws.response.headers)}"
        c.ping()
        # Both directions compressed by the library's own zlib: requests (websockets compresses
        # every message), and a list long enough to pass compress_min_bytes.
        for i in range(15):
            create_todo(c, f"compressed todo number {i} with a reasonably long title")
        listed = list_todos(c)
        assert len(listed) == 15, listed
        assert sorted(v["title"] for v in listed) == sorted(
            f"compressed todo number {i} with a reasonably long title" for i in range(15))


# ============================================================================================
# raw RFC 6455


@pytest.fixture
def raw(daemon):
    c = RawWS(daemon.http_port)
    yield c
    c.close()


def test_raw_handshake_and_text_round_trip(raw):
    assert raw.hello["op"] == "hello"
    raw.send_text('{"op":"ping","id":"r1"}')
    assert raw.recv_json() == {"op": "pong", "re": "r1"}


def test_unmasked_client_frame_is_closed_1002(raw):
    raw.send_frame(1, b'{"op":"ping","id":"unmasked"}', mask=False)
    code, _ = raw.expect_close()
    assert code == 1002, code


def test_invalid_utf8_text_is_closed_1007(raw):
    raw.send_frame(1, b'{"op":"ping","id":"\xff\xfe"}')
    code, _ = raw.expect_close()
    assert code == 1007, code


def test_text_beyond_ascii_in_one_frame_and_in_fragments_round_trips(raw):
    # One frame (read as it arrived) and the same text split inside a character (joined first).
    raw.send_text('{"op":"ping","id":"Grüße ☕ 𝄞"}')
    assert raw.recv_json() == {"op": "pong", "re": "Grüße ☕ 𝄞"}
    text = '{"op":"ping","id":"ß☕"}'.encode()
    cut = text.index("☕".encode()) + 1
    raw.send_frame(1, text[:cut], fin=False)
    raw.send_frame(0, text[cut:])
    assert raw.recv_json() == {"op": "pong", "re": "ß☕"}


def test_invalid_utf8_split_across_fragments_is_closed_1007(raw):
    raw.send_frame(1, b'{"op":"ping","id":"\xe2\x82', fin=False)
    raw.send_frame(0, b'("}')
    code, _ = raw.expect_close()
    assert code == 1007, code


def send_in_background(raw, data):
    def run():
        try:
            view = memoryview(data)
            for i in range(0, len(view), 64 * 1024):
                raw.sock.sendall(view[i:i + 64 * 1024])
        except OSError:
            pass  # the daemon may close before it has read everything

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_message_over_the_hard_cap_is_closed_1009(raw):
    payload = b'{"op":"ping","pad":"' + b"x" * (1024 * 1024) + b'"}'
    send_in_background(raw, RawWS.frame(1, payload))
    code, _ = raw.expect_close(timeout=30)
    assert code == 1009, code


def test_fragmented_message_over_the_hard_cap_is_closed_1009(raw):
    chunk = b"x" * (400 * 1024)
    data = RawWS.frame(1, b'{"op":"ping","pad":"' + chunk, fin=False) + RawWS.frame(0, chunk, fin=False) + RawWS.frame(0, chunk + b'"}')
    send_in_background(raw, data)
    code, _ = raw.expect_close(timeout=30)
    assert code == 1009, code


def test_fragmented_message_over_max_frame_bytes_is_frame_too_large_and_stays_open(raw):
    chunk = b"x" * (30 * 1024)
    raw.send_frame(1, b'{"op":"ping","id":"fr","pad":"' + chunk, fin=False)
    raw.send_frame(0, chunk, fin=False)
    raw.send_frame(0, chunk + b'"}')
    f = raw.recv_json()
    assert f.get("op") == "error" and f["error"]["code"] == "frame_too_large", f
    raw.send_text('{"op":"ping","id":"still"}')
    assert raw.recv_json() == {"op": "pong", "re": "still"}


def test_fragmented_text_is_reassembled_with_a_ping_in_between(raw):
    raw.send_frame(1, b'{"op":"pi', fin=False)
    raw.send_frame(0, b'ng","i', fin=False)
    raw.send_frame(9, b"mid-message")
    op, payload = raw.recv_message()
    assert (op, payload) == (10, b"mid-message"), "a ping between fragments is answered at once"
    raw.send_frame(0, b'd":"frag"}')
    assert raw.recv_json() == {"op": "pong", "re": "frag"}


def test_ping_gets_pong_with_the_same_payload(raw):
    raw.send_frame(9, b"hello \x00\xff payload")
    op, payload = raw.recv_message()
    assert op == 10 and payload == b"hello \x00\xff payload", (op, payload)
    raw.send_frame(9, b"")
    assert raw.recv_message() == (10, b"")
    raw.send_text('{"op":"ping","id":"after-pings"}')
    assert raw.recv_json() == {"op": "pong", "re": "after-pings"}


@pytest.mark.parametrize("code", [1000, 1001, 3000, 4001])
def test_close_handshake_echoes_the_code(raw, code):
    raw.send_frame(8, struct.pack("!H", code) + b"bye")
    got, _ = raw.expect_close()
    assert got == code, f"sent close {code}, the daemon answered {got}"
    raw.expect_eof()


def test_close_without_a_code_is_answered(raw):
    raw.send_frame(8, b"")
    got, _ = raw.expect_close()
    assert got in (None, 1000), got
    raw.expect_eof()


def test_a_tcp_half_close_without_a_close_frame_gets_every_answer_then_a_close(raw, daemon):
    """A client that shuts its side of the TCP connection after its requests, with no close
    frame (a script whose input ended), is answered as a client that sent a close frame is, and
    as `nc -N` is on the NDJSON listener: every request it sent, a write among them, then a close
    frame (1000) and the end of the connection. (The answers used to be dropped, the write applied.)"""
    detail = raw_request(raw, {"type": "RequestNewTodoDetailViewModel", "id": "new"})
    raw.send_text(json.dumps({"type": "RequestUpdateDetailViewModel", "id": "save",
                              "payload": {**detail["payload"], "title": "half-closed"}}))
    raw.send_text('{"type":"RequestTodoViewModels","id":"list"}')
    raw.send_text('{"op":"ping","id":"last"}')
    raw.sock.shutdown(socket.SHUT_WR)
    answers = []
    while True:
        op, payload = raw.recv_message()
        if op == 8:
            assert struct.unpack("!H", payload[:2])[0] == 1000, payload
            break
        answers.append(json.loads(payload))
    assert [a.get("re") for a in answers] == ["save", "save", "list", "last"], answers
    assert answers[0]["type"] == "ResponseUpdateDetailViewModel" and "error" not in answers[0], answers[0]
    assert answers[1]["type"] == "ResponseTodoViewModel" and "seq" in answers[1], answers[1]
    assert [t["todo"]["title"] for t in answers[2]["payload"]] == ["half-closed"], answers[2]
    raw.expect_eof()


def raw_request(raw, frame: dict) -> dict:
    raw.send_text(json.dumps(frame))
    return raw.expect_json(lambda f: f.get("re") == frame["id"], what=f"the answer to {frame['id']}")


@pytest.mark.parametrize("code", [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000])
def test_bad_close_code_is_closed_1002(raw, code):
    raw.send_frame(8, struct.pack("!H", code))
    got, _ = raw.expect_close()
    assert got == 1002, f"sent close {code}, expected 1002, got {got}"


def test_close_with_a_one_byte_payload_is_closed_1002(raw):
    raw.send_frame(8, b"\x03")
    got, _ = raw.expect_close()
    assert got == 1002, got


def test_continuation_without_a_start_is_closed_1002(raw):
    raw.send_frame(0, b'{"op":"ping"}')
    code, _ = raw.expect_close()
    assert code == 1002, code


def test_new_message_while_a_fragmented_one_is_open_is_closed_1002(raw):
    raw.send_frame(1, b'{"op":"pi', fin=False)
    raw.send_frame(1, b'{"op":"ping"}')
    code, _ = raw.expect_close()
    assert code == 1002, code


@pytest.mark.parametrize("rsv", [4, 2, 1], ids=["rsv1", "rsv2", "rsv3"])
def test_reserved_bits_are_closed_1002(raw, rsv):
    raw.send_frame(1, b'{"op":"ping"}', rsv=rsv)
    code, _ = raw.expect_close()
    assert code == 1002, code


@pytest.mark.parametrize("opcode", [3, 7, 11, 15])
def test_reserved_opcodes_are_closed_1002(raw, opcode):
    raw.send_frame(opcode, b"x")
    code, _ = raw.expect_close()
    assert code == 1002, code


def test_control_frame_over_125_bytes_is_closed_1002(raw):
    raw.send_frame(9, b"p" * 126)
    code, _ = raw.expect_close()
    assert code == 1002, code


def test_fragmented_control_frame_is_closed_1002(raw):
    raw.send_frame(9, b"part", fin=False)
    code, _ = raw.expect_close()
    assert code == 1002, code


def test_upgrade_on_another_path_is_not_a_stream(daemon):
    import urllib.error
    import urllib.request

    with pytest.raises(AssertionError):
        RawWS(daemon.http_port, path="/not-events")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.http_port}/events", timeout=10) as r:
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    assert status >= 400, "a plain GET /events without an upgrade is not a stream"
