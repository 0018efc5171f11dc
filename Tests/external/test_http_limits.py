"""The HTTP listener under a client that pipelines requests and reads none of the answers: the
daemon holds about one answer past the channel's high water mark, not one per request, and
answers them all once the client reads."""

from __future__ import annotations

import select
import socket
import time


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
