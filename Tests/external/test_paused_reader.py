"""A client that stops reading for a while, within the queue bound, is not cut: everything the
daemon has for it (in the kernel, in the connection's buffer up to its high-water mark, and past
that in the session's own queue, which only the connection becoming writable again hands on)
reaches it in order once it reads again. On each transport, since each has its own handlers
between the session and the socket (TLS, WebSocket framing)."""

import json
import ssl
import time

import pytest

from helpers import LineClient, RawWS, daemon_with_small_send_buffers, new_detail, save_detail

SAVES = 200
SUBTITLE = 10_000  # a broadcast of about 10.5 KB: 2 MB in all, far over what the buffers hold


@pytest.mark.parametrize("transport", ["tcp", "tls", "ws"])
def test_a_paused_client_within_the_bound_gets_every_frame_in_order(daemon_factory, tmp_path, transport):
    # A small send buffer towards clients, so the connection's own buffer fills early.
    d, ca = daemon_with_small_send_buffers(daemon_factory, tmp_path, "--max-queue-bytes", str(32 << 20))
    # Each reads its hello, then nothing until the burst is over.
    if transport == "ws":
        ws = RawWS(d.http_port, rcvbuf=4096)
        receive, send = ws.recv_json, lambda frame: ws.send_text(json.dumps(frame))
    else:
        tls = ssl.create_default_context(cafile=str(ca[0])) if transport == "tls" else None
        lines = LineClient(d.tls_port if tls else d.tcp_port, rcvbuf=4096, name="paused", tls=tls)
        receive, send = lines.recv, lines.send
    with LineClient(d.tcp_port, name="publisher") as pub:
        detail = new_detail(pub)
        _, first = save_detail(pub, detail, title="paused", subtitle="s" * SUBTITLE)
        tid = first["payload"]["todo"]["id"]
        seqs = [first["seq"]]
        for i in range(SAVES):
            rid = f"burst{i}"
            pub.send({"type": "RequestUpdateDetailViewModel", "id": rid, "payload": {"todo": {"id": tid}, "title": f"paused {i}", "subtitle": ("%05d" % i) * (SUBTITLE // 5)}})
            b = pub.expect(lambda f, rid=rid: f.get("re") == rid and "seq" in f, what=f"the broadcast for {rid}")
            seqs.append(b["seq"])
            pub.backlog.clear()
    # Only now does the paused client read: every broadcast, in order, then an answer (not cut).
    got = []
    started = time.monotonic()
    while len(got) < len(seqs):
        frame = receive()
        assert "seq" in frame, f"not a broadcast: {str(frame)[:300]}"
        got.append(frame["seq"])
        assert time.monotonic() - started < 60
    assert got == seqs
    send({"op": "ping", "id": "after"})
    assert receive() == {"op": "pong", "re": "after"}
