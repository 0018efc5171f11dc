"""Clients that ask and read nothing: what the daemon holds for each stays bounded. On the HTTP
listener, pipelined requests get about one answer past the channel's high water mark, not one per
request, and all once the client reads; a resume holds about half the outbound bound of the
journal, not a page of a thousand entries whatever their size."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import ssl
import threading
import time
import uuid

import pytest

from helpers import LineClient, RawWS, daemon_with_small_send_buffers, http_get_text, new_detail, rss_kib, save_detail


def test_pipelined_requests_that_are_not_read_do_not_pile_up_answers(daemon):
    before = rss_kib(daemon.pid)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", daemon.http_port))
    request = b"GET /favicon.svg HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    # 400,000 requests (19 MB; their answers would be 300 MB): the daemon stops reading once
    # answers back up, and the client's sends stop going through: it sends until then.
    wanted = 400_000
    s.setblocking(False)
    sent = 0
    burst = request * 1_000
    pending = memoryview(burst)
    stalled_since = time.monotonic()
    while sent < wanted and time.monotonic() - stalled_since < 2:
        try:
            pending = pending[s.send(pending):]
        except BlockingIOError:
            select.select([], [s], [], 0.2)
            continue
        stalled_since = time.monotonic()
        if not pending:
            sent += 1_000
            pending = memoryview(burst)
    assert sent < wanted, "the daemon read every request although no answer was taken"
    grown = rss_kib(daemon.pid) - before
    assert grown < 50 * 1024, f"the daemon grew by {grown} KiB for {sent} pipelined requests"
    # Once the client reads, answers flow again, in order, whole.
    s.setblocking(True)
    s.settimeout(30)
    stream = s.makefile("rb")
    for _ in range(3):
        status = stream.readline()
        assert status.startswith(b"HTTP/1.1 200"), status
        length = 0
        while (line := stream.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        assert length > 100 and len(stream.read(length)) == length
    s.close()


@pytest.mark.daemon_args("--storage", "memory", "--max-queue-bytes", "65536")
def test_resumes_that_are_not_read_hold_about_the_bound_each(daemon):
    """A resume from far back by clients that read nothing: each holds about half the outbound
    bound of the journal in memory (a page sized by its entries' bytes), not a page of a
    thousand entries whatever their size."""
    with LineClient(daemon.tcp_port, name="writer") as c:
        epoch = c.hello["epoch"]
        count = 1_000
        for index in range(count):
            c.send({"type": "RequestUpdateDetailViewModel", "id": f"w{index}",
                    "payload": {"todo": {"id": str(uuid.uuid4()), "version": 0}, "title": f"Long {index}",
                                "subtitle": "s" * 9_000}})
            if index % 4 == 3:  # its own answers stay under the small bound
                c.expect(lambda f, last=f"w{index}": f.get("re") == last and f.get("seq") is None, timeout=60)
    before = rss_kib(daemon.pid)
    readers = []
    for _ in range(10):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", daemon.tcp_port))
        s.sendall(json.dumps({"op": "resume", "epoch": epoch, "after": 0, "id": "r"}).encode() + b"\n")
        readers.append(s)
    # Each replay writes until what waits passes half the bound, then waits for its client: once
    # every one is waiting, what they hold is what counts.
    deadline = time.monotonic() + 30
    while True:
        _, body = http_get_text(daemon.http_port, "/metrics")
        queued = next(int(line.split()[1]) for line in body.splitlines() if line.startswith("todostream_queued_bytes "))
        if queued >= 10 * 32 * 1024:
            break
        assert time.monotonic() < deadline, f"the replays did not back up: {queued} bytes queued"
    grown = rss_kib(daemon.pid) - before
    assert grown < 60 * 1024, f"10 stalled resumes grew the daemon by {grown} KiB"
    for s in readers:
        s.close()


def _metric(port: int, name: str, tls: ssl.SSLContext | None = None) -> int:
    _, body = http_get_text(port, "/metrics", tls=tls)
    return next((int(float(line.split()[-1])) for line in body.splitlines() if line.startswith(name + " ")), 0)


def _save_long_todos(port: int, todos: int) -> dict:
    """Saves `todos` todos with 9,000-character subtitles; returns a list answer read whole
    afterwards (so every row is kept encoded from then on)."""
    with LineClient(port, name="writer") as c:
        for index in range(todos):
            c.send({"type": "RequestUpdateDetailViewModel", "id": f"w{index}",
                    "payload": {"todo": {"id": str(uuid.uuid4()), "version": 0}, "title": f"Long {index}",
                                "subtitle": "s" * 9_000}})
            if index % 4 == 3 or index == todos - 1:
                c.expect(lambda f, last=f"w{index}": f.get("re") == last and f.get("seq") is None, timeout=60)
        c.send({"type": "RequestTodoViewModels", "id": "first"})
        first = c.expect(lambda f: f.get("re") == "first", timeout=60)
        assert len(first["payload"]) == todos
        return first


@pytest.mark.parametrize("transport", ["tls", "wss"])
def test_a_client_reading_large_lists_at_a_stop_gets_them_whole_then_draining(daemon_factory, tmp_path, transport):
    """SIGTERM while a TLS client reads the answers to pipelined large lists: it gets every
    answer it is sent whole, and `draining`, then the end; it is not cut as a slow consumer
    (`draining` waits behind the answers' parts like an answer), and `draining` is not dropped
    at the close (what waits in the connection's queue goes to TLS, which flushes it)."""
    d, ca = daemon_with_small_send_buffers(daemon_factory, tmp_path, *(["--http-tls"] if transport == "wss" else []))
    tls = ssl.create_default_context(cafile=str(ca[0]))
    metrics_tls = None
    if transport == "wss":  # the HTTP listener speaks TLS; its certificate names localhost
        metrics_tls = ssl.create_default_context(cafile=str(ca[0]))
        metrics_tls.check_hostname = False
    todos = 150
    _save_long_todos(d.tcp_port, todos)
    requests = [json.dumps({"type": "RequestTodoViewModels", "id": f"L{index}"}) for index in range(3)]
    requests.append(json.dumps({"op": "ping", "id": "P"}))
    if transport == "wss":
        ws = RawWS(d.http_port, rcvbuf=4096, tls=tls)
        for request in requests:
            ws.send_text(request)
    else:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", d.tls_port))
        s = tls.wrap_socket(s, server_hostname="localhost")
        s.settimeout(30)
        stream = s.makefile("rb")
        assert json.loads(stream.readline())["op"] == "hello"
        s.sendall("".join(request + "\n" for request in requests).encode())
    # The first list is being answered (the one read before, then this one) when the stop comes.
    deadline = time.monotonic() + 30
    while _metric(d.http_port, 'todostream_requests_total{type="RequestTodoViewModels"}', metrics_tls) < 2:
        assert time.monotonic() < deadline, "the first list was not taken"
    d.signal(signal.SIGTERM)
    frames = []
    while True:
        if transport == "wss":
            fin, opcode, payload = ws.recv_frame(timeout=30)
            if opcode == 8:
                break
            assert fin and opcode == 1, (fin, opcode)
        else:
            payload = stream.readline()
            if not payload:
                break
            assert payload.endswith(b"\n"), f"the stream ends inside a frame: {payload[-100:]!r}"
        frames.append(json.loads(payload))
    assert d.proc.wait(30) == 0
    kinds = [frame.get("re") or frame.get("op") or frame.get("error", {}).get("code") for frame in frames]
    assert not any(frame.get("error", {}).get("code") == "slow_consumer" for frame in frames), kinds
    # `draining`, then at most the answers to requests already taken (the ping's pong).
    assert "draining" in kinds and set(kinds[kinds.index("draining") + 1:]) <= {"L1", "L2", "P"}, kinds
    lists = [frame for frame in frames if frame.get("type") == "ResponseTodoViewModels" and "payload" in frame]
    assert lists and all(len(frame["payload"]) == todos for frame in lists), kinds


@pytest.mark.parametrize("transport", ["tcp", "tls", "ws", "wss"])
def test_clients_that_ask_for_one_large_list_and_read_nothing_share_its_rows(daemon_factory, tmp_path, transport):
    """Sixty clients ask for the same large list (150 todos of 9,000 characters, 1.4 MB) and
    read none of it: the daemon holds the list's rows about once per event loop, not once per
    client (each answer made whole, they held 60 copies, 84 MB). Each still gets the whole
    answer, with its own `re`, once it reads."""
    d, ca = daemon_with_small_send_buffers(daemon_factory, tmp_path, *(["--http-tls"] if transport == "wss" else []))
    tls = ssl.create_default_context(cafile=str(ca[0])) if transport in ("tls", "wss") else None
    todos = 150
    first = _save_long_todos(d.tcp_port, todos)
    list_bytes = len(json.dumps(first["payload"]))
    clients = 60
    before = rss_kib(d.pid)
    readers = []
    for index in range(clients):
        request = json.dumps({"type": "RequestTodoViewModels", "id": f"r{index}"})
        if transport in ("ws", "wss"):
            ws = RawWS(d.http_port, rcvbuf=4096, tls=tls)
            ws.send_text(request)
            readers.append(ws)
            continue
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", d.tls_port if tls else d.tcp_port))
        if tls:
            s = tls.wrap_socket(s, server_hostname="localhost")
        s.sendall(request.encode() + b"\n")
        readers.append(s)
    # Every answer made and backed up: what the clients did not take waits in the daemon.
    metrics_tls = None
    if transport == "wss":  # the HTTP listener speaks TLS; its certificate names localhost
        metrics_tls = ssl.create_default_context(cafile=str(ca[0]))
        metrics_tls.check_hostname = False
    deadline = time.monotonic() + 60
    while True:
        asked = _metric(d.http_port, 'todostream_requests_total{type="RequestTodoViewModels"}', metrics_tls)
        queued = _metric(d.http_port, "todostream_queued_bytes", metrics_tls)
        if asked >= clients + 1 and queued >= clients * list_bytes * 9 // 10:
            break
        assert time.monotonic() < deadline, f"{asked} lists asked, {queued} bytes queued"
    grown = rss_kib(d.pid) - before
    assert grown < 30 * 1024, f"{clients} unread answers of a {list_bytes}-byte list grew the daemon by {grown} KiB"
    # Each reads its answer: whole, its own (on WebSocket, one unfragmented text frame).
    for index, reader in enumerate(readers):
        if transport in ("ws", "wss"):
            fin, opcode, payload = reader.recv_frame(timeout=30)
            assert fin and opcode == 1
            answer = json.loads(payload)
            reader.sock.close()
        else:
            reader.settimeout(30)
            stream = reader.makefile("rb")
            assert json.loads(stream.readline())["op"] == "hello"
            answer = json.loads(stream.readline())
            reader.close()
        assert answer["re"] == f"r{index}" and answer["type"] == "ResponseTodoViewModels"
        assert answer["payload"] == first["payload"]


@pytest.mark.parametrize("line", [b"x\n", b'{"op":"nope","id":1}\n'])
@pytest.mark.daemon_args("--storage", "memory", "--max-queue-bytes", "65536", "--rate-limit", "1000000")
def test_error_answers_are_back_pressure_not_a_reason_to_cut(daemon, line):
    """Junk sent faster than its error answers are read: the answers are the client's own, so
    the daemon stops reading (TCP back-pressure) instead of cutting it as a slow consumer, and
    every one arrives."""
    count = 20_000  # answers of about 90 bytes each: 1.8 MB, thirty times the bound
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    s.connect(("127.0.0.1", daemon.tcp_port))
    s.settimeout(30)
    received = b""
    while b"\n" not in received:
        received += s.recv(4096)
    received = received.split(b"\n", 1)[1]
    threading.Thread(target=s.sendall, args=(line * count,), daemon=True).start()
    # A reader, but a slow one: 8 KB every 20 ms (400 KB/s).
    while received.count(b"\n") < count:
        chunk = s.recv(8192)
        lines = received.count(b"\n")
        assert chunk, f"closed after {lines} answers: {received[-300:]!r}"
        received += chunk
        time.sleep(0.02)
    answers = [json.loads(raw) for raw in received.split(b"\n")[:count]]
    codes = {answer.get("error", {}).get("code") for answer in answers}
    assert codes <= {"invalid_json", "unknown_op"}, codes
    s.close()


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_what_a_cut_client_still_sends_costs_the_daemon_next_to_nothing(daemon_factory):
    """A slow consumer that, once cut, sends as fast as it can: the daemon reads on (a close with
    unread input would reset the connection and lose the notice) but drops the bytes unparsed, a
    few reads a second, instead of parsing every line for nothing at the cost of a core for the
    whole grace period. The client still gets its last frames and the notice, then the end."""
    d = daemon_factory("--max-queue-bytes", "65536", "--storage", "memory")
    slow = LineClient(d.tcp_port, rcvbuf=4096, name="slow")
    slow.send({"op": "ping", "id": "start"})  # ends the start hold; its pong is read later
    with LineClient(d.tcp_port, name="publisher") as pub:
        detail = new_detail(pub)
        _, first = save_detail(pub, detail, title="big", subtitle="s" * 10_000)
        todo = first["payload"]["todo"]["id"]
        for i in range(400):
            pub.send({"type": "RequestUpdateDetailViewModel", "id": f"b{i}",
                      "payload": {"todo": {"id": todo}, "title": f"big {i}", "subtitle": ("%05d" % i) * 2000}})
            pub.expect(lambda f, rid=f"b{i}": f.get("re") == rid and "seq" in f, what=f"the broadcast for b{i}")
            pub.backlog.clear()
            if i % 10 == 9 and "todostream_slow_consumer_disconnects_total 1" in http_get_text(d.http_port, "/metrics")[1]:
                break
        assert "todostream_slow_consumer_disconnects_total 1" in http_get_text(d.http_port, "/metrics")[1], "the slow client was not cut"
    # Cut: it now sends pings (a frame each, the costliest input to parse) as fast as it can.
    chunk = b'{"op":"ping"}\n' * 4096
    slow.sock.setblocking(False)
    cpu_before, sent = _cpu_seconds(d.pid), 0
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            sent += slow.sock.send(chunk)
        except BlockingIOError:
            select.select([], [slow.sock], [], 0.05)
    cpu = _cpu_seconds(d.pid) - cpu_before
    assert cpu < 0.4, f"the daemon spent {cpu:.2f} s of CPU in 2 s on the {sent} bytes a cut client sent"
    # Its frames, then the notice, then the end: read while it goes on sending nothing more.
    slow.sock.setblocking(True)
    frames = slow.expect_closed(timeout=60)
    codes = [f["error"]["code"] for f in frames if isinstance(f.get("error"), dict)]
    assert codes[-1:] == ["slow_consumer"], f"the last frame is the notice: {codes[-3:]}"


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_a_client_reading_a_large_answer_steadily_is_not_cut(daemon_factory, tmp_path, transport):
    """A list answer far over the outbound bound, read at about 2 MB/s, comes whole and is not
    cut (docs/PROTOCOL.md §4: answers the client asked for are taken at its own pace). The
    kernel takes more of it only once a good part of its grown send buffer is free, which at
    that pace can take longer than `slow_consumer_check_ms`: the client's reading shows in what
    the kernel has had acknowledged, and it was cut for it."""
    config = tmp_path / "limits.yaml"
    config.write_text("limits:\n  slow_consumer_check_ms: 200\n")
    daemon = daemon_factory("--config", str(config), "--storage", "memory", "--rate-limit", "1000000")
    writer = LineClient(daemon.tcp_port, name="writer")
    writer.send({"op": "unsubscribe", "types": ["Response*"], "id": "quiet"})
    writer.expect(lambda f: f.get("re") == "quiet")
    count = 800  # about 12 KB each: a 10 MB list
    lines = b"".join(
        json.dumps({"type": "RequestUpdateDetailViewModel", "id": n, "payload": {
            "todo": {"id": str(uuid.uuid4()), "version": 0}, "title": f"{n} " + "T" * 990,
            "subtitle": "S" * 10_000, "priority": "normal"}}).encode() + b"\n"
        for n in range(count))
    threading.Thread(target=writer.sock.sendall, args=(lines,), daemon=True).start()
    writer.expect(lambda f: f.get("re") == count - 1 and f.get("type") == "ResponseTodoViewModel", timeout=60)
    writer.close()

    if transport == "tcp":
        reader = socket.create_connection(("127.0.0.1", daemon.tcp_port), timeout=10)
        reader.sendall(b'{"type":"RequestTodoViewModels","id":"list"}\n')
    else:
        from helpers import RawWS
        ws = RawWS(daemon.http_port)
        ws.send_text('{"type":"RequestTodoViewModels","id":"list"}')
        reader = ws.sock
    received = bytearray(b"" if transport == "tcp" else ws.buf)
    started = time.monotonic()
    while time.monotonic() - started < 30:
        chunk = reader.recv(32_768)
        if not chunk:
            break
        received += chunk
        if received.count(b"\n") >= 2 or (transport == "ws" and len(received) > 1_000_000 and received.endswith(b"]}")):
            break
        time.sleep(0.016)  # about 2 MB/s
    reader.close()
    assert b"slow_consumer" not in received, received[-300:]
    assert received.rstrip().endswith(b"]}"), (len(received), received[-200:])
    assert received.count(b'"todo":') == count, received.count(b'"todo":')
