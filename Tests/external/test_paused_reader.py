"""A client that stops reading for a while, within the queue bound, is not cut: everything the
daemon has for it (in the kernel, in the connection's buffer up to its high-water mark, and past
that in the session's own queue, which only the connection becoming writable again hands on)
reaches it in order once it reads again. On each transport, since each has its own handlers
between the session and the socket (TLS, WebSocket framing)."""

import base64
import json
import os
import socket
import ssl
import struct
import time

import pytest

from helpers import LineClient, make_ca, make_server_cert, new_detail, save_detail

SAVES = 200
SUBTITLE = 10_000  # a broadcast of about 10.5 KB: 2 MB in all, far over what the buffers hold


def paused_socket(port: int) -> socket.socket:
    """A connection whose receive buffer is small from the start (set before connecting)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    return sock


class Lines:
    """NDJSON over a socket (TCP or TLS)."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def message(self) -> dict:
        while b"\n" not in self.buf:
            data = self.sock.recv(1 << 16)
            assert data, "the daemon closed the connection"
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def send(self, frame: dict) -> None:
        self.sock.sendall(json.dumps(frame).encode() + b"\n")


class WebSocket:
    """Text messages over a WebSocket upgrade of `sock`, read frame by frame."""

    def __init__(self, sock, port: int):
        self.sock, self.buf = sock, b""
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
             f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
        )
        head = self._until(b"\r\n\r\n")
        assert b" 101 " in head.split(b"\r\n")[0], head

    def _need(self, n: int) -> bytes:
        while len(self.buf) < n:
            data = self.sock.recv(1 << 16)
            assert data, "the daemon closed the connection"
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _until(self, separator: bytes) -> bytes:
        while separator not in self.buf:
            data = self.sock.recv(4096)
            assert data, "the daemon closed the connection"
            self.buf += data
        out, self.buf = self.buf.split(separator, 1)
        return out

    def message(self) -> dict:
        first, second = self._need(2)
        assert first == 0x81, f"expected one whole text frame, got first byte {first:#x}"
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._need(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._need(8))
        return json.loads(self._need(length))

    def send(self, frame: dict) -> None:
        payload, key = json.dumps(frame).encode(), os.urandom(4)
        masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        assert len(payload) < 126
        self.sock.sendall(struct.pack("!BB", 0x81, 0x80 | len(payload)) + key + masked)


@pytest.mark.parametrize("transport", ["tcp", "tls", "ws"])
def test_a_paused_client_within_the_bound_gets_every_frame_in_order(daemon_factory, tmp_path, transport):
    config = tmp_path / "paused.yaml"
    # A small send buffer towards clients, so the connection's own buffer fills early.
    config.write_text("limits:\n  socket_send_buffer_bytes: 4096\n")
    pki = tmp_path / "pki"
    pki.mkdir()
    ca = make_ca(pki, "ca")
    cert, key = make_server_cert(pki, ca, "server", cn="localhost")
    d = daemon_factory(
        "--config", str(config), "--storage", "memory", "--max-queue-bytes", str(32 << 20),
        "--rate-limit", "1000000", "--tls-listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key),
    )
    if transport == "tcp":
        paused = Lines(paused_socket(d.tcp_port))
    elif transport == "tls":
        context = ssl.create_default_context(cafile=str(ca[0]))
        paused = Lines(context.wrap_socket(paused_socket(d.tls_port), server_hostname="localhost"))
    else:
        paused = WebSocket(paused_socket(d.http_port), d.http_port)
    hello = paused.message()
    assert hello["op"] == "hello"
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
        frame = paused.message()
        assert "seq" in frame, f"not a broadcast: {str(frame)[:300]}"
        got.append(frame["seq"])
        assert time.monotonic() - started < 60
    assert got == seqs
    paused.send({"op": "ping", "id": "after"})
    assert paused.message() == {"op": "pong", "re": "after"}
