"""docs/PROTOCOL.md §1–§8 over plain TCP, with a Python socket NDJSON client against the real daemon.

Uses the shared `daemon` fixture (conftest.py) for a daemon with default settings, and
`daemon_factory` (helpers.py) for daemons that need flags (small queues, tokens, rate limits).
Tests never assume a fresh stream: they read the current seq from the hello and only look at
todos they created.
"""

import http.client
import json
import re
import signal
import socket
import threading
import time

import pytest

from helpers import (
    MODEL_EVENTS,
    RFC3339_MS_UTC,
    UUID_RE,
    VIEW_RESPONSES,
    LineClient,
    create_todo,
    delete,
    http_get,
    list_todos,
    new_detail,
    next_id,
    save_detail,
    toggle,
)


@pytest.fixture
def client(daemon):
    with LineClient(daemon.tcp_port, name="A") as c:
        yield c


@pytest.fixture
def other(daemon):
    with LineClient(daemon.tcp_port, name="B") as c:
        yield c


def ids_in(todos):
    return [t["todo"]["id"] for t in todos]


def bseqs(c):
    """The seqs of the broadcasts a client received, in order (the hello's seq excluded)."""
    return [f["seq"] for f in c.history if "seq" in f and "op" not in f]


def assert_error_frame(f, code, rid=None):
    """Relay errors: {"op":"error","re":…,"error":{"code":…,"message":…}}, no seq."""
    assert f.get("op") == "error", f"expected an op:error frame, got {f}"
    assert f["error"]["code"] == code, f"expected {code}, got {f}"
    assert isinstance(f["error"].get("message"), str) and f["error"]["message"], f"error without a message: {f}"
    assert "seq" not in f, f"an error is a reply and carries no seq: {f}"
    if rid is not None:
        assert f.get("re") == rid and type(f.get("re")) is type(rid), f"expected re={rid!r}: {f}"


# ============================================================================================
# §2 Greeting


def test_hello_is_first_and_has_every_field(daemon):
    with LineClient(daemon.tcp_port) as a, LineClient(daemon.tcp_port) as b:
        h = a.hello
        assert h["op"] == "hello"
        assert h["protocol"] == 1
        assert re.fullmatch(r"todostreamd/\d+\.\d+\.\d+.*", h["server"]), h
        assert UUID_RE.match(h["session"].lower()), h
        assert isinstance(h["epoch"], str) and h["epoch"], h
        assert isinstance(h["seq"], int) and not isinstance(h["seq"], bool) and h["seq"] >= 0, h
        assert h["auth"] == "none", h
        assert h["subscriptions"] == ["Response*"], h
        assert b.hello["session"] != h["session"], "each connection gets its own session"
        assert b.hello["epoch"] == h["epoch"]


def test_hello_seq_is_newest_broadcast(daemon, client):
    _, bcast = create_todo(client, "hello seq")
    with LineClient(daemon.tcp_port) as late:
        assert late.hello["seq"] == bcast["seq"], (late.hello, bcast)


# ============================================================================================
# §1 Framing


def test_crlf_and_blank_lines(client):
    client.send(b"\n\n\r\n")
    client.send(b'{"op":"ping","id":"crlf"}\r\n')
    first = client.recv()
    assert first == {"op": "pong", "re": "crlf"}, f"blank lines must be ignored and \\r before \\n too; got {first}"
    client.send(b'\r\n{"type":"RequestTodoViewModels","id":"crlf2"}\r\n\n')
    r = client.recv()
    assert r.get("type") == "ResponseTodoViewModels" and r.get("re") == "crlf2", r
    client.ping()


@pytest.mark.parametrize(
    "raw",
    [
        b"not json\n",
        b"[1,2,3]\n",
        b"42\n",
        b'"a string"\n',
        b"null\n",
        b"true\n",
        b'{"op":"ping",\n',
        b"{'op':'ping'}\n",
    ],
    ids=["text", "array", "number", "string", "null", "bool", "truncated", "single-quotes"],
)
def test_not_a_json_object_is_invalid_json_and_stays_open(client, raw):
    client.send(raw)
    f = client.recv()
    assert_error_frame(f, "invalid_json")
    client.ping()


def test_invalid_utf8_is_invalid_json(client):
    client.send(b'{"op":"ping","id":"\xff\xfe"}\n')
    f = client.recv()
    assert_error_frame(f, "invalid_json")
    client.send(b'{"type":"RequestTodoViewModels","id":"u","x":"\xc3\x28"}\n')
    assert_error_frame(client.recv(), "invalid_json")
    client.ping()


def test_frame_too_large_is_answered_and_next_frame_is_answered(client):
    big = b'{"op":"ping","id":"big","pad":"' + b"x" * (70 * 1024) + b'"}\n'
    client.send(big + b'{"op":"ping","id":"after"}\n')
    f = client.recv()
    assert_error_frame(f, "frame_too_large")
    g = client.recv()
    assert g == {"op": "pong", "re": "after"}, f"the frame after an oversized line must be answered; got {g}"


def test_frame_too_large_line_is_not_buffered_whole(daemon_factory):
    """A 64 MiB line is discarded as it streams in: the daemon's RSS must not grow by its size."""
    d = daemon_factory()

    def rss_kib():
        with open(f"/proc/{d.pid}/status") as fh:
            return int(re.search(r"VmRSS:\s+(\d+)", fh.read()).group(1))

    with LineClient(d.tcp_port) as c:
        c.ping()
        before = rss_kib()
        chunk = b"y" * (1 << 20)
        c.sock.sendall(b'{"op":"ping","pad":"')
        for _ in range(64):
            c.sock.sendall(chunk)
        c.sock.sendall(b'"}\n{"op":"ping","id":"after-huge"}\n')
        assert_error_frame(c.recv(timeout=60), "frame_too_large")
        assert c.recv() == {"op": "pong", "re": "after-huge"}
        grown = rss_kib() - before
        assert grown < 24 * 1024, f"RSS grew by {grown} KiB while a 64 MiB line streamed in: it was buffered"


def test_frame_limit_is_configurable(daemon_factory):
    d = daemon_factory("--max-frame-bytes", "1024")
    with LineClient(d.tcp_port) as c:
        c.send({"op": "ping", "id": "small", "pad": "z" * 900})
        assert c.recv() == {"op": "pong", "re": "small"}
        c.send({"op": "ping", "id": "large", "pad": "z" * 2000})
        assert_error_frame(c.recv(), "frame_too_large")
        c.ping()


# ============================================================================================
# §3 Client → daemon: id → re, frame shape


@pytest.mark.parametrize("rid", ["abc", "x" * 64, "1", 42, 0, -7, 2**53])
def test_id_is_echoed_as_re_with_its_type(client, rid):
    client.send({"op": "ping", "id": rid})
    f = client.recv()
    assert f.get("op") == "pong" and f.get("re") == rid and type(f["re"]) is type(rid), f"sent id {rid!r}, got {f}"
    client.send({"type": "RequestTodoViewModels", "id": rid})
    f = client.recv()
    assert f.get("type") == "ResponseTodoViewModels" and f.get("re") == rid and type(f["re"]) is type(rid), f
    client.send({"type": "NoSuchEvent", "id": rid})
    assert_error_frame(client.recv(), "unknown_type", rid)


def test_frame_without_id_gets_answer_without_re(client):
    client.send({"op": "ping"})
    f = client.recv()
    assert f.get("op") == "pong" and "re" not in f, f


@pytest.mark.parametrize(
    "frame",
    [
        {},
        {"id": "1"},
        {"type": "RequestTodoViewModels", "op": "ping", "id": "both"},
        {"op": "ping", "id": ""},
        {"op": "ping", "id": "x" * 65},
        {"op": "ping", "id": 1.5},
        {"op": "ping", "id": True},
        {"op": "ping", "id": None},
        {"op": "ping", "id": ["a"]},
        {"op": "ping", "id": {"a": 1}},
        {"type": 5, "id": "t"},
        {"op": 5, "id": "o"},
        {"op": "subscribe", "id": "s", "types": "Response*"},
        {"op": "subscribe", "id": "s2", "types": [1, 2]},
        {"op": "subscribe", "id": "s3"},
        {"op": "resume", "id": "r", "epoch": 5, "after": 1},
        {"op": "resume", "id": "r2", "epoch": "e", "after": "one"},
        {"op": "auth", "id": "a", "token": 7},
    ],
    ids=[
        "empty", "only-id", "type-and-op", "id-empty", "id-65", "id-float", "id-bool", "id-null", "id-array",
        "id-object", "type-not-string", "op-not-string", "types-string", "types-numbers", "types-missing",
        "resume-epoch-number", "resume-after-string", "auth-token-number",
    ],
)
def test_invalid_frame_stays_open(client, frame):
    client.send(frame)
    f = client.recv()
    assert_error_frame(f, "invalid_frame")
    client.ping()


def test_unknown_type_and_unknown_op(client):
    client.send({"type": "RequestFlyToTheMoon", "id": "u1"})
    assert_error_frame(client.recv(), "unknown_type", "u1")
    client.send({"op": "dance", "id": "u2"})
    assert_error_frame(client.recv(), "unknown_op", "u2")
    client.ping()


@pytest.mark.parametrize("event", VIEW_RESPONSES + MODEL_EVENTS)
def test_response_and_model_layer_publish_is_not_permitted(client, event):
    """Checked before the payload is read: a garbage payload still gets not_permitted."""
    client.send({"type": event, "id": "np", "payload": "garbage"})
    assert_error_frame(client.recv(), "not_permitted", "np")
    client.send({"type": event, "id": "np2"})
    assert_error_frame(client.recv(), "not_permitted", "np2")
    client.ping()


@pytest.mark.parametrize(
    "frame,field",
    [
        ({"type": "RequestToggleCompleteTodoViewModel", "payload": {"todo": {"id": 42}}}, "id"),
        ({"type": "RequestDeleteTodoViewModel", "payload": {"todo": "nope"}}, "todo"),
        ({"type": "RequestToggleCompleteTodoViewModel"}, None),
        ({"type": "RequestTodoDetailViewModel", "payload": []}, None),
        ({"type": "RequestUpdateDetailViewModel", "payload": {"todo": {"id": "6f1c0000-0000-4000-8000-000000000000"}, "title": 5}}, "title"),
        ({"type": "RequestUpdateDetailViewModel", "payload": {"todo": {"id": "6f1c0000-0000-4000-8000-000000000000", "version": "one"}, "title": "a"}}, "version"),
    ],
    ids=["toggle-id-number", "delete-todo-string", "toggle-no-payload", "detail-array", "update-title-number", "update-version-string"],
)
def test_invalid_payload_names_the_field(client, frame, field):
    frame = dict(frame, id=next_id("ip"))
    client.send(frame)
    f = client.recv()
    assert_error_frame(f, "invalid_payload", frame["id"])
    if field:
        assert field in f["error"]["message"], f"the message should name the field path ({field}): {f}"
    client.ping()


def test_errors_never_leak_internals(daemon, client):
    bad = [
        b"garbage\n",
        b'{"type":"RequestToggleCompleteTodoViewModel","payload":{"todo":{"id":42}}}\n',
        b'{"type":"RequestUpdateDetailViewModel","payload":{"todo":{"id":"zz"},"title":[]}}\n',
        b'{"type":"RequestTodoDetailViewModel","payload":{"todo":{"id":"6f1c0000-0000-4000-8000-00000000dead"}}}\n',
        b'{"type":"RequestDeleteTodoViewModel","payload":{}}\n',
        b'{"op":"subscribe","types":["Nope*"]}\n',
    ]
    for line in bad:
        client.send(line)
    client.ping()
    errors = [f for f in client.history if isinstance(f.get("error"), dict)]
    assert len(errors) >= len(bad), client.dump()
    for f in errors:
        msg = json.dumps(f["error"])
        for leak in (str(daemon.data_dir), ".swift", "sqlite", "SQLITE", "SELECT ", "INSERT ", "DecodingError", "CodingKeys", "Swift.", "Fatal", "0x"):
            assert leak not in msg, f"error leaks internals ({leak!r}): {f}"


# ============================================================================================
# §3 subscriptions


def test_subscribe_and_unsubscribe_return_full_list(client):
    r = client.request({"op": "subscribe", "types": ["ResponseTodoViewModel"]})
    assert r.get("op") == "subscribed", r
    assert set(r["types"]) == {"Response*", "ResponseTodoViewModel"}, r
    r = client.request({"op": "subscribe", "types": ["*"]})
    assert r.get("op") == "subscribed" and set(r["types"]) == {"Response*", "ResponseTodoViewModel", "*"}, r
    r = client.request({"op": "unsubscribe", "types": ["Response*", "*"]})
    assert r.get("op") == "unsubscribed" and r["types"] == ["ResponseTodoViewModel"], r
    r = client.request({"op": "unsubscribe", "types": ["ResponseTodoViewModel"]})
    assert r.get("op") == "unsubscribed" and r["types"] == [], r


@pytest.mark.parametrize("name", MODEL_EVENTS + ["Request*"])
def test_view_client_cannot_subscribe_to_model_layer(client, name):
    r = client.request({"op": "subscribe", "types": [name]})
    assert_error_frame(r, "not_permitted")
    client.ping()


@pytest.mark.parametrize("name", ["NoSuchEvent", "Nope*", "responsetodoviewmodel"])
def test_subscribe_to_nothing_is_unknown_type(client, name):
    r = client.request({"op": "subscribe", "types": [name]})
    assert_error_frame(r, "unknown_type")
    client.ping()


def test_unsubscribed_client_receives_no_broadcasts(client, other):
    r = other.request({"op": "unsubscribe", "types": ["Response*"]})
    assert r["types"] == [], r
    _, first = create_todo(client, "not for B")
    tid = first["payload"]["todo"]["id"]
    # B's own request: its copy of the broadcast comes whatever its subscriptions, and in seq
    # order, so seq n would have to arrive before it if it had been sent to B at all.
    mine = toggle(other, {"id": tid})
    assert mine.get("seq") == first["seq"] + 1, mine
    assert first["seq"] not in bseqs(other), f"B was unsubscribed but got seq {first['seq']}: {other.dump()}"
    assert "re" not in client.expect_seq(mine["seq"])
    r = other.request({"op": "subscribe", "types": ["ResponseTodoViewModel"]})
    assert r["op"] == "subscribed" and r["types"] == ["ResponseTodoViewModel"], r
    t = toggle(client, {"id": tid})
    assert "re" not in other.expect_seq(t["seq"])


def test_own_replies_and_broadcast_copies_whatever_subscriptions(client):
    r = client.request({"op": "unsubscribe", "types": ["Response*"]})
    assert r["types"] == [], r
    reply, bcast = create_todo(client, "mine anyway")  # asserts both arrive with re
    assert "seq" in bcast and "seq" not in reply
    assert list_todos(client)  # a reply to a read, delivered without subscriptions


def test_view_star_means_view_responses_only(daemon, client, other):
    r = other.request({"op": "subscribe", "types": ["*"]})
    assert r["op"] == "subscribed", r
    _, bcast = create_todo(client, "star")
    other.expect_seq(bcast["seq"])
    other.ping()
    types = {f.get("type") for f in other.history if "type" in f}
    assert not types & set(MODEL_EVENTS), f"a view client subscribed to * received model-layer events: {types}"
    leaked = [f for f in other.history if f.get("type") in ("ResponseUpdateDetailViewModel", "ResponseTodoDetailViewModel")]
    assert not leaked, f"another client's replies reached a view client: {leaked}"


# ============================================================================================
# §4 broadcasts, replies, seq


def test_broadcast_reaches_second_client_with_same_seq_and_re_only_on_requester(client, other):
    reply, mine = create_todo(client, "Buy milk", priority="high")
    theirs = other.expect_seq(mine["seq"])
    assert "re" not in theirs, f"the other client's copy must not carry re: {theirs}"
    assert mine["re"] == reply["re"]
    assert theirs["type"] == mine["type"] == "ResponseTodoViewModel"
    assert theirs["payload"] == mine["payload"]
    # toggle and delete from the second client reach the first
    t = toggle(other, {"id": mine["payload"]["todo"]["id"]})
    assert t.get("seq") == mine["seq"] + 1 and t["payload"]["complete"] is True, t
    seen = client.expect_seq(t["seq"])
    assert "re" not in seen and seen["payload"] == t["payload"]
    d = delete(other, {"id": mine["payload"]["todo"]["id"]})
    assert d.get("seq") == t["seq"] + 1 and d["payload"]["deleted"] is True, d
    assert "re" not in client.expect_seq(d["seq"])


def test_replies_go_only_to_the_requester(client, other):
    list_todos(client)
    new_detail(client)
    client.send({"type": "Nope", "id": "err"})
    client.expect_error("unknown_type", "err")
    _, bcast = create_todo(client, "barrier")
    other.expect_seq(bcast["seq"])  # everything A caused before this broadcast would be here by now
    replies = [f for f in other.history if "seq" not in f and f.get("op") != "hello"]
    assert replies == [], f"replies to A reached B: {replies}"


def test_seq_rises_by_exactly_one_across_clients(daemon, client, other):
    with LineClient(daemon.tcp_port, name="observer") as obs:
        obs.ping()
        _, first = create_todo(client, "seq a")
        todo_a = first["payload"]["todo"]
        _, second = create_todo(other, "seq b")
        todo_b = {"id": second["payload"]["todo"]["id"]}
        todo_a = {"id": todo_a["id"]}
        seqs = [first["seq"], second["seq"]]
        for i in range(10):
            who, todo = (client, todo_a) if i % 2 else (other, todo_b)
            seqs.append(toggle(who, todo)["seq"])
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"seq must rise by exactly 1: {seqs}"
        for s in seqs:
            obs.expect_seq(s)
        observed = bseqs(obs)
        assert observed == seqs, f"the observer saw {observed}, expected {seqs} in order"


def daemon_side_send_queue(daemon_port, client_port):
    """Bytes the daemon has written to its socket towards 127.0.0.1:client_port that the client
    has not yet taken (tx_queue in /proc/net/tcp), or None when that socket is gone."""
    with open("/proc/net/tcp") as fh:
        for line in fh.readlines()[1:]:
            parts = line.split()
            local, remote, tx_rx = parts[1], parts[2], parts[4]
            if int(local.split(":")[1], 16) == daemon_port and int(remote.split(":")[1], 16) == client_port:
                return int(tx_rx.split(":")[0], 16)
    return None


def test_slow_consumer_is_cut_and_others_keep_receiving(daemon_factory):
    """A client that stops reading is sent slow_consumer and closed; everyone else keeps
    receiving every broadcast. The slow client (2 KiB receive buffer) reads nothing while a
    publisher pushes ~10 KB broadcasts. Once the daemon's kernel send buffer towards it has stopped
    growing for more than 2 x max_queue_bytes of further broadcasts, its outbound queue is over the
    bound; then it reads what it was sent, promptly, like a client back from a stall."""
    d = daemon_factory("--max-queue-bytes", "65536", "--storage", "memory")
    slow = LineClient(d.tcp_port, rcvbuf=2048, name="slow")  # reads its hello, then nothing
    slow.send({"op": "ping", "id": "slow-start"})  # its pong is not read during the burst
    slow_port = slow.sock.getsockname()[1]
    with open("/proc/sys/net/ipv4/tcp_wmem") as fh:
        wmem_max = int(fh.read().split()[2])
    frame_bytes = 10_500  # a ResponseTodoViewModel with a 10,000-character subtitle
    max_saves = (wmem_max + 65536 + 512 * 1024) // frame_bytes + 1
    with LineClient(d.tcp_port, name="publisher") as pub, LineClient(d.tcp_port, name="fast") as fast:
        fast.ping()
        fast_raw: list = []

        def read_fast():  # raw bytes only, parsed afterwards: keeps up without holding the GIL
            fast.sock.settimeout(30)
            try:
                while True:
                    data = fast.sock.recv(1 << 20)
                    if not data:
                        return
                    fast_raw.append(data)
            except OSError:
                return

        detail = new_detail(pub)
        _, first = save_detail(pub, detail, title="big", subtitle="s" * 10000)
        tid = first["payload"]["todo"]["id"]
        reader = threading.Thread(target=read_fast, daemon=True)
        reader.start()
        seqs = [first["seq"]]
        since_growth, last_q = 0, -1
        for i in range(max_saves):
            rid = f"burst{i}"
            pub.send({"type": "RequestUpdateDetailViewModel", "id": rid, "payload": {"todo": {"id": tid}, "title": f"big {i}", "subtitle": ("%05d" % i) * 2000}})
            b = pub.expect(lambda f, rid=rid: f.get("re") == rid and "seq" in f, what=f"the broadcast for {rid}")
            seqs.append(b["seq"])
            pub.backlog.clear()
            since_growth += frame_bytes
            if i % 4 == 3:
                q = daemon_side_send_queue(d.tcp_port, slow_port)
                if q is None:
                    break  # already closed
                if q > last_q:
                    last_q, since_growth = q, 0
                elif since_growth > 2 * 65536:
                    break
        # the slow client now reads, promptly
        frames = slow.expect_closed(timeout=30)
        pub.ping()
        fast.sock.shutdown(socket.SHUT_WR)  # the daemon closes it once it has answered
        reader.join(timeout=60)
    stream = b"".join(fast_raw).split(b"\n")
    fast_frames = [json.loads(line) for line in stream if line.strip()]
    fast_seqs = [f["seq"] for f in fast_frames if "seq" in f and "op" not in f]
    fast_errors = [f for f in fast_frames if f.get("error")]
    assert not fast_errors, f"the reading client was hurt by the slow one: {fast_errors[:2]}"
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "seq rises by exactly 1"
    assert fast_seqs[: len(seqs)] == seqs, f"the fast client must receive every broadcast in order ({len(fast_seqs)} of {len(seqs)})"
    errors = [i for i, f in enumerate(frames) if isinstance(f.get("error"), dict)]
    codes = [frames[i]["error"]["code"] for i in errors]
    got = [f["seq"] for f in frames if "seq" in f and "op" not in f]
    assert "slow_consumer" in codes, (
        f"the slow client was closed without slow_consumer after {len(frames)} frames "
        f"(last whole broadcast: seq {got[-1:]}, of {seqs[-1]}; daemon send queue plateaued at {last_q} bytes); "
        f"last frames:\n{slow.dump(3)}"
    )
    tail = frames[errors[-1] + 1:]
    assert tail == [], f"nothing may follow slow_consumer: {str(tail)[:300]}"
    assert frames[errors[-1]].get("op") == "error", frames[errors[-1]]
    assert got == list(range(got[0], got[0] + len(got))), "before slow_consumer, broadcasts come in order without gaps"
    assert len(got) < len(seqs), "the slow client cannot have received everything"
    slow.close()
    with LineClient(d.tcp_port) as again:
        again.ping()


def test_draining_is_sent_before_graceful_shutdown(daemon_factory):
    d = daemon_factory()
    with LineClient(d.tcp_port) as c, LineClient(d.tcp_port) as c2:
        c.ping()
        d.signal(signal.SIGTERM)
        frames = c.expect_closed(timeout=30)
        drains = [f for f in frames if f.get("op") == "draining"]
        assert drains, f"no draining frame before the connection closed: {frames}"
        n = drains[0].get("reconnect_after_ms")
        assert isinstance(n, int) and not isinstance(n, bool) and n >= 0, drains[0]
        assert any(f.get("op") == "draining" for f in c2.expect_closed(timeout=30)), "every client gets draining"
    rc = d.proc.wait(timeout=30)
    assert rc == 0, f"SIGTERM must exit 0, got {rc}\n{d.log_text()}"


def test_healthz_says_draining_during_a_graceful_shutdown(daemon_factory):
    """A load balancer that checks over a connection kept open from before the stop learns that
    the daemon is going (503, "draining"), instead of 200 for the whole drain."""
    d = daemon_factory()
    checker = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=10)
    checker.request("GET", "/healthz")
    answer = checker.getresponse()
    assert answer.status == 200 and json.loads(answer.read())["status"] == "ok"
    # A client whose answers back up (it reads nothing) keeps the drain going for its timeout.
    stalled = socket.create_connection(("127.0.0.1", d.tcp_port))
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(b'{"op":"ping"}\n' * 20_000)
    d.signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while True:
        checker.request("GET", "/healthz")
        answer = checker.getresponse()
        body = json.loads(answer.read())
        if answer.status == 503:
            break
        assert time.monotonic() < deadline, f"/healthz still says {answer.status} {body} during the drain"
        time.sleep(0.05)
    assert body["status"] == "draining", body
    assert answer.getheader("Connection") == "close", answer.getheaders()
    stalled.close()
    assert d.proc.wait(timeout=30) == 0


def test_sigterm_right_after_the_port_file_exits_0(daemon_factory):
    """Once the daemon says it listens (the port file), SIGTERM is a graceful stop: exit 0, every
    time — not the signal's default action (status -15)."""
    d = daemon_factory()
    statuses = []
    for _ in range(20):
        statuses.append(d.stop(check=False))
        d.start()
    with LineClient(d.tcp_port) as c:
        c.ping()
    assert statuses == [0] * 20, f"exit statuses of SIGTERM sent right after the port file appeared: {statuses}"


# ============================================================================================
# §6 the events


def test_new_detail_is_a_fresh_unsaved_todo(client, other):
    a = client.request({"type": "RequestNewTodoDetailViewModel"})
    assert a["type"] == "ResponseTodoDetailViewModel" and "seq" not in a, a
    p = a["payload"]
    t = p["todo"]
    assert UUID_RE.match(t["id"]), f"id must be a lowercase UUID: {t['id']}"
    assert t["version"] == 0 and t["deleted"] is False and t["completedAt"] is None, t
    assert t["priority"] in ("high", "normal")
    assert p["completed"] is False and p["deleted"] is False
    assert p["completedString"] == "Incomplete" and p["deletedString"] == "Delete"
    assert p["priorityString"] == p["priority"].upper() == t["priority"].upper()
    for key in ("title", "subtitle", "priority"):
        assert key in p, f"missing {key}: {p}"
    b = new_detail(client)
    assert b["todo"]["id"] != t["id"], "every fresh todo has its own id"
    other.ping()
    assert not [f for f in other.history if f.get("type")], "a fresh todo is a reply, not a broadcast"


def test_create_gives_reply_then_broadcast_with_the_shapes_of_section_6(client):
    detail = new_detail(client)
    rid = next_id("create")
    client.send({"type": "RequestUpdateDetailViewModel", "id": rid, "payload": dict(detail, title="Buy milk", subtitle="2 litres", priority="high")})
    reply = client.expect_re(rid)
    bcast = client.expect_re(rid)
    assert reply["type"] == "ResponseUpdateDetailViewModel" and "seq" not in reply, f"first the reply, got {reply}"
    assert bcast["type"] == "ResponseTodoViewModel" and isinstance(bcast.get("seq"), int), f"then the broadcast, got {bcast}"
    saved = reply["payload"]
    t = saved["todo"]
    assert t["id"] == detail["todo"]["id"]
    assert t["version"] >= 1 and t["title"] == "Buy milk" and t["subtitle"] == "2 litres" and t["priority"] == "high"
    assert RFC3339_MS_UTC.match(t["createdAt"]), f"createdAt must be RFC 3339 UTC with ms: {t['createdAt']}"
    assert t["completedAt"] is None and t["deleted"] is False
    assert saved["title"] == "Buy milk" and saved["subtitle"] == "2 litres" and saved["priority"] == "high"
    assert saved["completed"] is False and saved["deleted"] is False
    assert (saved["completedString"], saved["priorityString"], saved["deletedString"]) == ("Incomplete", "HIGH", "Delete")
    vm = bcast["payload"]
    assert vm["todo"] == t, (vm["todo"], t)
    assert vm["title"] == "Buy milk" and vm["subtitle"] == "Priority: HIGH"
    assert vm["complete"] is False and vm["deleted"] is False and vm["completeActionTitle"] == "Complete"
    _, low = create_todo(client, "normal one", priority="normal")
    assert low["payload"]["subtitle"] == "Priority: NORMAL"


@pytest.mark.parametrize("title", ["", "   ", " \t\n\u00a0\u2003 "], ids=["empty", "spaces", "mixed-whitespace"])
def test_empty_or_whitespace_title_is_validation_failed(daemon, client, other, title):
    detail = new_detail(client)
    reply, _ = save_detail(client, detail, expect_ok=False, title=title)
    assert "payload" not in reply and "seq" not in reply, reply
    err = reply.get("error", {})
    assert (err.get("code"), err.get("message"), err.get("field")) == ("validation_failed", "Please add a title.", "title"), reply
    client.ping()
    assert detail["todo"]["id"] not in ids_in(list_todos(client)), "nothing may be saved"
    # nothing was broadcast: the next broadcast is exactly one after the seq in B's hello
    _, b = create_todo(client, "after the failure")
    assert b["seq"] == other.hello["seq"] + 1, f"a failed save must not broadcast (hello seq {other.hello['seq']}, next {b['seq']})"
    other.expect_seq(b["seq"])
    assert bseqs(other) == [b["seq"]], f"a failed save must not broadcast: {other.dump()}"


def test_title_is_stored_trimmed(client):
    reply, bcast = create_todo(client, "  \t Buy milk \n ")
    assert reply["payload"]["todo"]["title"] == "Buy milk", reply
    assert reply["payload"]["title"] == "Buy milk"
    assert bcast["payload"]["title"] == "Buy milk" and bcast["payload"]["todo"]["title"] == "Buy milk"


@pytest.mark.parametrize(
    "title,ok",
    [
        ("a" * 1000, True),
        ("a" * 1001, False),
        ("\U0001F600" * 1000, True),  # 1000 scalars, 2000 UTF-16 units, 4000 bytes
        ("\U0001F600" * 1001, False),
        ("e\u0301" * 500, True),  # 1000 scalars, 500 characters (grapheme clusters)
        ("e\u0301" * 501, False),  # 1002 scalars, 501 characters: must be refused
        ("  " + "b" * 1000 + "  ", True),  # measured after trimming
    ],
    ids=["ascii-1000", "ascii-1001", "emoji-1000", "emoji-1001", "combining-1000-scalars", "combining-1002-scalars", "trimmed-1000"],
)
def test_title_limit_is_1000_unicode_scalars(client, title, ok):
    detail = new_detail(client)
    reply, _ = save_detail(client, detail, expect_ok=False, title=title)
    if ok:
        assert "error" not in reply, f"a title of {len(title.strip())} scalars must be accepted: {reply.get('error')}"
        assert reply["payload"]["todo"]["title"] == title.strip()
        client.expect(lambda f: f.get("re") == reply["re"] and f.get("type") == "ResponseTodoViewModel")
    else:
        assert reply.get("error", {}).get("code") == "validation_failed", f"a title of {len(title)} scalars must be refused: {str(reply)[:300]}"
        assert reply["error"].get("field") == "title", reply["error"]


def test_subtitle_limit_is_10000(client):
    detail = new_detail(client)
    reply, _ = save_detail(client, detail, title="ok", subtitle="s" * 10000)
    assert reply["payload"]["todo"]["subtitle"] == "s" * 10000
    detail = new_detail(client)
    reply, _ = save_detail(client, detail, expect_ok=False, title="too long", subtitle="s" * 10001)
    assert reply.get("error", {}).get("code") == "validation_failed" and reply["error"].get("field") == "subtitle", str(reply)[:300]


def test_toggle_acts_on_the_stored_todo_not_the_clients_copy(client):
    _, b = create_todo(client, "stored title")
    todo = b["payload"]["todo"]
    stale = dict(todo, title="client's stale title", completedAt="2001-01-01T00:00:00.000Z", priority="high")
    stale.pop("version")
    t = toggle(client, stale)
    assert t["type"] == "ResponseTodoViewModel" and "error" not in t, t
    vm = t["payload"]
    assert vm["todo"]["title"] == "stored title" and vm["todo"]["priority"] == "normal", vm
    assert vm["complete"] is True and vm["completeActionTitle"] == "Uncomplete"
    assert RFC3339_MS_UTC.match(vm["todo"]["completedAt"] or ""), vm["todo"]
    assert vm["todo"]["completedAt"] != "2001-01-01T00:00:00.000Z"
    assert vm["todo"]["version"] == todo["version"] + 1
    t2 = toggle(client, {"id": todo["id"]})
    assert t2["payload"]["complete"] is False and t2["payload"]["todo"]["completedAt"] is None
    assert t2["payload"]["completeActionTitle"] == "Complete"
    assert t2["seq"] == t["seq"] + 1


def test_todo_id_any_case_on_input_lowercase_on_output(client):
    _, b = create_todo(client, "case")
    tid = b["payload"]["todo"]["id"]
    t = toggle(client, {"id": tid.upper()})
    assert "error" not in t, t
    assert t["payload"]["todo"]["id"] == tid
    d = client.request({"type": "RequestTodoDetailViewModel", "payload": {"todo": {"id": tid.upper()}}})
    assert d["type"] == "ResponseTodoDetailViewModel" and d["payload"]["todo"]["id"] == tid, d


def test_conflict_carries_the_current_todo(client, other):
    _, b = create_todo(client, "versioned")
    todo = b["payload"]["todo"]
    t = toggle(client, {"id": todo["id"], "version": todo["version"]})
    assert "error" not in t
    current_vm = t["payload"]
    for req_type, resp_type, payload in [
        ("RequestToggleCompleteTodoViewModel", "ResponseTodoViewModel", {"todo": {"id": todo["id"], "version": todo["version"]}}),
        ("RequestDeleteTodoViewModel", "ResponseTodoViewModel", {"todo": {"id": todo["id"], "version": todo["version"]}}),
        ("RequestUpdateDetailViewModel", "ResponseUpdateDetailViewModel", {"todo": {"id": todo["id"], "version": todo["version"]}, "title": "clobber"}),
    ]:
        r = client.request({"type": req_type, "payload": payload})
        assert r["type"] == resp_type, f"{req_type} conflict must come as {resp_type}: {r}"
        assert "seq" not in r and "payload" not in r, r
        err = r["error"]
        assert err["code"] == "conflict", r
        assert err.get("current") == current_vm, f"error.current must hold the stored TodoViewModel\n got {err.get('current')}\nwant {current_vm}"
    assert toggle(client, {"id": todo["id"], "version": current_vm["todo"]["version"]})["payload"]["complete"] is False
    other.ping()
    other_seqs = bseqs(other)
    assert all(s in (b["seq"], t["seq"], t["seq"] + 1) for s in other_seqs), f"conflicts must not broadcast: {other.dump()}"


def test_not_found_comes_as_the_requests_response_type(client):
    ghost = {"id": "0a0a0a0a-0000-4000-8000-00000000beef"}
    for req_type, resp_type in [
        ("RequestToggleCompleteTodoViewModel", "ResponseTodoViewModel"),
        ("RequestDeleteTodoViewModel", "ResponseTodoViewModel"),
        ("RequestTodoDetailViewModel", "ResponseTodoDetailViewModel"),
    ]:
        r = client.request({"type": req_type, "payload": {"todo": ghost}})
        assert r["type"] == resp_type and r.get("error", {}).get("code") == "not_found", f"{req_type} of an unknown id: {r}"
        assert "seq" not in r and "payload" not in r, r
    client.ping()


def test_soft_delete_and_restore(client, other):
    _, b = create_todo(client, "to delete")
    todo = b["payload"]["todo"]
    d = delete(client, {"id": todo["id"]})
    assert d["type"] == "ResponseTodoViewModel" and "seq" in d, d
    assert d["payload"]["deleted"] is True and d["payload"]["todo"]["deleted"] is True
    assert d["payload"]["todo"]["title"] == "to delete"
    theirs = other.expect_seq(d["seq"])
    assert theirs["payload"]["deleted"] is True and "re" not in theirs
    assert todo["id"] not in ids_in(list_todos(client)), "a deleted todo is not listed"
    detail = client.request({"type": "RequestTodoDetailViewModel", "payload": {"todo": {"id": todo["id"]}}})
    assert "error" not in detail, f"nothing is hard-deleted: {detail}"
    assert detail["payload"]["deleted"] is True and detail["payload"]["deletedString"] == "Restore"
    reply, restored = save_detail(client, detail["payload"], deleted=False)
    assert restored["payload"]["deleted"] is False and reply["payload"]["deletedString"] == "Delete"
    assert todo["id"] in ids_in(list_todos(client))


def test_list_is_newest_first_without_deleted(client):
    made = [create_todo(client, f"order {i}")[1]["payload"]["todo"]["id"] for i in range(4)]
    delete(client, {"id": made[1]})
    listed = [i for i in ids_in(list_todos(client)) if i in made]
    assert listed == [made[3], made[2], made[0]], f"expected newest first without the deleted one: {listed} (made {made})"
    for vm in list_todos(client):
        assert vm["deleted"] is False and vm["todo"]["deleted"] is False


def test_detail_of_a_stored_todo_and_save_keeps_completed_at(client):
    _, b = create_todo(client, "detail me", priority="high")
    tid = b["payload"]["todo"]["id"]
    t = toggle(client, {"id": tid})
    completed_at = t["payload"]["todo"]["completedAt"]
    assert completed_at
    d = client.request({"type": "RequestTodoDetailViewModel", "payload": {"todo": {"id": tid}}})
    p = d["payload"]
    assert d["type"] == "ResponseTodoDetailViewModel" and "seq" not in d
    assert p["title"] == "detail me" and p["priority"] == "high" and p["completed"] is True
    assert (p["completedString"], p["priorityString"], p["deletedString"]) == ("Complete", "HIGH", "Delete")
    reply, bcast = save_detail(client, p, title="detail me, renamed")
    assert reply["payload"]["todo"]["completedAt"] == completed_at, "a save that does not change completion keeps completedAt"
    assert bcast["payload"]["todo"]["completedAt"] == completed_at
    assert bcast["payload"]["todo"]["createdAt"] == b["payload"]["todo"]["createdAt"], "createdAt is set once"
    reply, _ = save_detail(client, reply["payload"], completed=False)
    assert reply["payload"]["todo"]["completedAt"] is None and reply["payload"]["completedString"] == "Incomplete"


def test_created_at_is_set_by_the_daemon(client):
    detail = new_detail(client)
    forged = dict(detail, todo=dict(detail["todo"], createdAt="1999-01-01T00:00:00.000Z"))
    reply, _ = save_detail(client, forged, title="time")
    assert not reply["payload"]["todo"]["createdAt"].startswith("1999"), reply


# ============================================================================================
# §3 auth, roles, the tap; §7 rate_limited


def test_auth_required_frames_before_auth_are_unauthorized(daemon_factory):
    d = daemon_factory("--token", "view:SECRET-view-token")
    with LineClient(d.tcp_port) as c:
        assert c.hello["auth"] == "required", c.hello
        for frame in [
            {"type": "RequestTodoViewModels", "id": "a1"},
            {"op": "subscribe", "id": "a2", "types": ["*"]},
            {"op": "resume", "id": "a3", "epoch": c.hello["epoch"], "after": 0},
            {"type": "RequestNewTodoDetailViewModel", "id": "a4"},
        ]:
            c.send(frame)
            assert_error_frame(c.recv(), "unauthorized", frame["id"])
        assert c.ping()["op"] == "pong", "ping is allowed before auth"
        c.send({"op": "auth", "id": "bad1", "token": "wrong"})
        assert_error_frame(c.recv(), "unauthorized", "bad1")
        r = c.request({"op": "auth", "token": "SECRET-view-token"})
        assert r.get("op") == "authenticated" and r.get("role") == "view", r
        assert isinstance(list_todos(c), list)
        create_todo(c, "authorised")


def test_three_bad_tokens_close_the_connection(daemon_factory):
    d = daemon_factory("--token", "view:SECRET-view-token")
    with LineClient(d.tcp_port) as c:
        for i in range(2):
            c.send({"op": "auth", "id": f"b{i}", "token": f"nope{i}"})
            assert_error_frame(c.recv(), "unauthorized", f"b{i}")
        c.ping()
        c.send({"op": "auth", "id": "b2", "token": "nope2"})
        frames = c.expect_closed(timeout=10)
        assert any(f.get("error", {}).get("code") == "unauthorized" for f in frames), frames
    with LineClient(d.tcp_port) as again:
        assert again.request({"op": "auth", "token": "SECRET-view-token"}).get("op") == "authenticated"


def test_monitor_token_with_auth_none_and_the_tap(daemon_factory):
    d = daemon_factory("--monitor-token", "MONITOR-secret")
    with LineClient(d.tcp_port, name="view") as view, LineClient(d.tcp_port, name="tap") as tap:
        assert tap.hello["auth"] == "none"
        tap.send({"op": "auth", "id": "m0", "token": "not-it"})
        assert_error_frame(tap.recv(), "unauthorized", "m0")
        r = tap.request({"op": "auth", "token": "MONITOR-secret"})
        assert r.get("op") == "authenticated" and r.get("role") == "monitor", r
        r = tap.request({"op": "subscribe", "types": ["*"]})
        assert r.get("op") == "subscribed", r
        _, b = create_todo(view, "tapped")
        tap.expect_seq(b["seq"])
        tap.expect(lambda f: f.get("type") == "ResponseUpdateDetailViewModel", what="another client's reply (monitor sees every reply)")
        tap.expect(lambda f: f.get("type") in ("RequestWriteTodo", "ResponseTodo"), what="a model-layer event")
        list_todos(view)
        tap.expect(lambda f: f.get("type") in ("RequestReadTodos", "ResponseTodos"), what="the model-layer read")
        # a monitor publishes nothing
        tap.send({"type": "RequestTodoViewModels", "id": "m1"})
        tap.expect_error("not_permitted", "m1")
        # the view client still may not subscribe to the model layer
        assert_error_frame(view.request({"op": "subscribe", "types": ["ResponseTodo"]}), "not_permitted")


def test_rate_limited_keeps_the_connection_open(daemon_factory):
    d = daemon_factory("--rate-limit", "5")
    with LineClient(d.tcp_port) as c:
        burst = b"".join(b'{"op":"ping","id":"r%d"}\n' % i for i in range(60))
        c.send(burst)
        answers = [c.expect(lambda f, i=i: f.get("re") == f"r{i}", what=f"an answer to r{i}") for i in range(60)]
        limited = [a for a in answers if a.get("error", {}).get("code") == "rate_limited"]
        assert limited, f"60 frames at once with --rate-limit 5 must get rate_limited: {answers[:3]}…"
        for a in limited:
            assert_error_frame(a, "rate_limited")
        assert any(a.get("op") == "pong" for a in answers)
        # still open: a ping is answered with pong once the bucket refills (bounded poll)
        deadline = time.monotonic() + 15
        while True:
            r = c.request({"op": "ping"})
            if r.get("op") == "pong":
                break
            assert r["error"]["code"] == "rate_limited", r
            assert time.monotonic() < deadline, "never answered again after rate limiting"
            time.sleep(0.25)  # waiting for the token bucket to refill (time is the thing under test)


# ============================================================================================
# §8 HTTP endpoints


def test_healthz_reports_storage_connections_and_seq(daemon, client):
    _, b = create_todo(client, "health")
    status, headers, body = http_get(daemon.http_port, "/healthz")
    assert status == 200, body
    j = json.loads(body)
    assert isinstance(j, dict) and j.get("seq") == b["seq"], j
    assert "storage" in j and "connections" in j, j
    assert j["connections"] >= 1


def test_metrics_is_prometheus_text(daemon, client):
    create_todo(client, "metrics")
    status, headers, body = http_get(daemon.http_port, "/metrics")
    assert status == 200
    assert headers.get("Content-Type", "").startswith("text/plain"), headers
    text = body.decode()
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert samples, f"/metrics has no samples at all (body {len(body)} bytes): {text[:300]!r}"
    for line in samples:
        assert re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?\s+\S+", line), f"not Prometheus text: {line!r}"


def test_root_serves_the_web_frontend(daemon):
    status, headers, body = http_get(daemon.http_port, "/")
    assert status == 200 and headers.get("Content-Type", "").startswith("text/html"), (status, headers)
    assert b"<" in body
    # Its own files only, and no other site may frame it.
    assert "frame-ancestors 'none'" in headers.get("Content-Security-Policy", ""), headers
    assert "default-src 'self'" in headers.get("Content-Security-Policy", ""), headers
    assert headers.get("X-Frame-Options") == "DENY", headers
    assert headers.get("X-Content-Type-Options") == "nosniff", headers
