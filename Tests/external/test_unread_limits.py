"""Clients that ask and read nothing: what the daemon holds for each stays bounded. On the HTTP
listener, pipelined requests get about one answer past the channel's high water mark, not one per
request, and all once the client reads; a resume holds about half the outbound bound of the
journal, not a page of a thousand entries whatever their size."""

from __future__ import annotations

import json
import select
import socket
import time
import urllib.request
import uuid

import pytest

from helpers import LineClient


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_pipelined_requests_that_are_not_read_do_not_pile_up_answers(daemon):
    before = _rss_kib(daemon.pid)
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
    grown = _rss_kib(daemon.pid) - before
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
    before = _rss_kib(daemon.pid)
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
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.http_port}/metrics", timeout=10) as answer:
            body = answer.read().decode()
        queued = next(int(line.split()[1]) for line in body.splitlines() if line.startswith("todostream_queued_bytes "))
        if queued >= 10 * 32 * 1024:
            break
        assert time.monotonic() < deadline, f"the replays did not back up: {queued} bytes queued"
    grown = _rss_kib(daemon.pid) - before
    assert grown < 60 * 1024, f"10 stalled resumes grew the daemon by {grown} KiB"
    for s in readers:
        s.close()
