"""Helpers for the external-client acceptance suite (docs/PROTOCOL.md, held against the real binary).

The daemon itself comes from conftest.py (`daemon`, `daemon_factory`). Everything here talks to
it over real sockets or through real client programs (`nc`, `openssl s_client`). Nothing here
sleeps to synchronise: every wait reads until an expected frame (or EOF) arrives, bounded by a
timeout.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import itertools
import json
import os
import queue
import re
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

DEFAULT_TIMEOUT = 10.0

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
RFC3339_MS_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")

VIEW_REQUESTS = [
    "RequestTodoViewModels",
    "RequestToggleCompleteTodoViewModel",
    "RequestDeleteTodoViewModel",
    "RequestNewTodoDetailViewModel",
    "RequestTodoDetailViewModel",
    "RequestUpdateDetailViewModel",
]
VIEW_RESPONSES = [
    "ResponseTodoViewModels",
    "ResponseTodoViewModel",
    "ResponseTodoDetailViewModel",
    "ResponseUpdateDetailViewModel",
]
MODEL_EVENTS = ["RequestReadTodos", "ResponseTodos", "RequestWriteTodo", "ResponseTodo"]


# --------------------------------------------------------------------------------------------
# tools


def require_tool(name: str) -> str:
    """The path of a command-line tool; the test FAILS (never skips) when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"required tool {name!r} is not installed "
            "(scripts/install-test-tools, or apt-get install netcat-openbsd openssl)"
        )
    return path


def require_websockets():
    try:
        import websockets  # noqa: F401
        import websockets.sync.client  # noqa: F401
    except ImportError:
        pytest.fail("the Python 'websockets' package is not installed (pip install websockets)")
    return websockets


_ids = itertools.count(1)


def next_id(prefix: str = "t") -> str:
    return f"{prefix}{next(_ids)}"


# --------------------------------------------------------------------------------------------
# frame sources: one expect()/backlog discipline for sockets, nc, openssl and websockets


class ClosedError(AssertionError):
    pass


class FrameSource:
    """Reads JSON frames; expect() reads until a matching frame arrives and keeps the others."""

    name = "client"

    def __init__(self):
        self.backlog: collections.deque = collections.deque()
        self.history: list = []  # every frame received, in order (parsed, or raw bytes if not JSON)
        self.eof = False

    # subclasses: return one raw line/message (bytes or str), or None at EOF; raise TimeoutError
    def _read_raw(self, timeout: float):
        raise NotImplementedError

    def _next_new(self, timeout: float):
        raw = self._read_raw(timeout)
        if raw is None:
            self.eof = True
            raise ClosedError(f"{self.name}: connection closed; received so far:\n{self.dump()}")
        if isinstance(raw, (bytes, bytearray)):
            raw = bytes(raw).decode("utf-8", errors="replace")
        try:
            frame = json.loads(raw)
        except ValueError:
            frame = {"__raw__": raw}
        if not isinstance(frame, dict):
            frame = {"__raw__": raw}
        self.history.append(frame)
        return frame

    def recv(self, timeout: float = DEFAULT_TIMEOUT):
        if self.backlog:
            return self.backlog.popleft()
        return self._next_new(timeout)

    def expect(self, pred, timeout: float = DEFAULT_TIMEOUT, what: str = "a matching frame"):
        for i, f in enumerate(self.backlog):
            if pred(f):
                del self.backlog[i]
                return f
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.name}: timed out after {timeout}s waiting for {what}; received:\n{self.dump()}")
            try:
                f = self._next_new(left)
            except TimeoutError:
                continue
            if pred(f):
                return f
            self.backlog.append(f)

    def expect_re(self, rid, timeout: float = DEFAULT_TIMEOUT, **match):
        def pred(f):
            return isinstance(f, dict) and f.get("re") == rid and type(f.get("re")) is type(rid) and all(f.get(k) == v for k, v in match.items())

        return self.expect(pred, timeout, what=f"a frame with re={rid!r} {match or ''}")

    def expect_error(self, code, rid=None, timeout: float = DEFAULT_TIMEOUT):
        def pred(f):
            return (
                isinstance(f, dict)
                and isinstance(f.get("error"), dict)
                and f["error"].get("code") == code
                and (rid is None or f.get("re") == rid)
            )

        return self.expect(pred, timeout, what=f"an error {code!r} (re={rid!r})")

    def expect_seq(self, seq, timeout: float = DEFAULT_TIMEOUT):
        return self.expect(lambda f: isinstance(f, dict) and f.get("seq") == seq and "op" not in f, timeout, what=f"the broadcast seq={seq}")

    def expect_closed(self, timeout: float = DEFAULT_TIMEOUT) -> list:
        """Reads until EOF; returns the frames received before it (backlog included)."""
        got = list(self.backlog)
        self.backlog.clear()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.name}: still open after {timeout}s (expected the daemon to close it); received:\n{self.dump()}")
            try:
                got.append(self._next_new(left))
            except TimeoutError:
                continue
            except ClosedError:
                return got

    def dump(self, last: int = 12) -> str:
        lines = [json.dumps(f, ensure_ascii=False)[:300] for f in self.history[-last:]]
        return "\n".join("  <- " + line for line in lines) or "  (nothing)"

    # sending
    def send(self, frame) -> None:
        raise NotImplementedError

    def request(self, frame: dict, timeout: float = DEFAULT_TIMEOUT, **match):
        """Sends frame with a fresh string id (unless it has one) and returns the first answer."""
        frame = dict(frame)
        frame.setdefault("id", next_id())
        self.send(frame)
        return self.expect_re(frame["id"], timeout, **match)

    def ping(self, timeout: float = DEFAULT_TIMEOUT):
        """A round trip: proves the connection is open and answering."""
        rid = next_id("ping")
        self.send({"op": "ping", "id": rid})
        return self.expect(lambda f: isinstance(f, dict) and f.get("op") == "pong" and f.get("re") == rid, timeout, what=f"pong re={rid}")


def encode(frame) -> bytes:
    if isinstance(frame, (bytes, bytearray)):
        return bytes(frame)
    if isinstance(frame, str):
        return frame.encode()
    return (json.dumps(frame, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def free_port() -> int:
    """A loopback TCP port nobody listens on now (for a server a test starts itself)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect_socket(host: str, port: int, rcvbuf: int | None = None) -> socket.socket:
    """A TCP connection; `rcvbuf` is set before connecting, so the window starts that small."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(DEFAULT_TIMEOUT)
    sock.connect((host, port))
    return sock


class LineClient(FrameSource):
    """NDJSON over a plain TCP socket (Python's socket module: the 'raw' client); over TLS with
    `tls` (a context; the server is checked as `localhost`)."""

    def __init__(self, port: int, host: str = "127.0.0.1", rcvbuf: int | None = None, hello: bool = True, name: str = "tcp", tls=None):
        super().__init__()
        self.name = name
        self.sock = connect_socket(host, port, rcvbuf)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="localhost")
        self.buf = b""
        self.hello = None
        if hello:
            self.hello = self.recv()
            assert self.hello.get("op") == "hello", f"first frame is not the hello: {self.hello}"

    def _read_raw(self, timeout):
        while b"\n" not in self.buf:
            if self.eof:
                return None
            self.sock.settimeout(max(timeout, 0.001))
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                raise TimeoutError
            except ConnectionResetError:
                data = b""
            if not data:
                self.eof = True
                if self.buf:
                    line, self.buf = self.buf, b""
                    return line
                return None
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def send(self, frame) -> None:
        self.sock.sendall(encode(frame))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


class ProcessClient(FrameSource):
    """A real client program (nc, openssl s_client): frames are written to its stdin, lines read
    from its stdout by a reader thread."""

    def __init__(self, argv: list[str], name: str, hello: bool = True, hello_timeout: float = DEFAULT_TIMEOUT):
        super().__init__()
        self.name = name
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue = queue.Queue()
        self.stderr_chunks: list[bytes] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()
        self.hello = None
        if hello:
            self.hello = self.recv(hello_timeout)
            assert self.hello.get("op") == "hello", f"{name}: first line is not the hello: {self.hello}\nstderr: {self.stderr()}"

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip(b"\n"))
        self.lines.put(None)

    def _pump_err(self):
        for chunk in self.proc.stderr:
            self.stderr_chunks.append(chunk)

    def stderr(self) -> str:
        return b"".join(self.stderr_chunks).decode(errors="replace")

    def _read_raw(self, timeout):
        try:
            return self.lines.get(timeout=max(timeout, 0.001))
        except queue.Empty:
            raise TimeoutError

    def send(self, frame) -> None:
        self.proc.stdin.write(encode(frame))
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def wait(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.name} did not exit within {timeout}s")

    def close(self) -> None:
        self.close_stdin()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


class WSClient(FrameSource):
    """The Python `websockets` library (sync client) on ws://127.0.0.1:PORT/events."""

    def __init__(self, port: int, path: str = "/events", hello: bool = True, name: str = "ws", scheme: str = "ws",
                 **kw):
        super().__init__()
        require_websockets()
        from websockets.sync.client import connect

        self.name = name
        self._connect = connect(f"{scheme}://127.0.0.1:{port}{path}", open_timeout=DEFAULT_TIMEOUT, **kw)
        self.ws = self._connect.__enter__()
        self.hello = None
        if hello:
            self.hello = self.recv()
            assert self.hello.get("op") == "hello", f"first message is not the hello: {self.hello}"

    def _read_raw(self, timeout):
        from websockets.exceptions import ConnectionClosed

        try:
            msg = self.ws.recv(timeout=max(timeout, 0.001))
        except TimeoutError:
            raise
        except ConnectionClosed:
            return None
        if isinstance(msg, bytes):
            return json.dumps({"__binary__": msg.decode("utf-8", "replace")})
        return msg

    def send(self, frame) -> None:
        if isinstance(frame, dict):
            self.ws.send(json.dumps(frame, separators=(",", ":"), ensure_ascii=False))
        else:
            self.ws.send(frame)

    def close(self) -> None:
        try:
            self._connect.__exit__(None, None, None)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


# --------------------------------------------------------------------------------------------
# raw RFC 6455 client over a plain socket


class RawWS:
    """A hand-written WebSocket client: full control over masking, RSV bits, opcodes, fragments."""

    def __init__(self, port: int, path: str = "/events", headers: dict | None = None, rcvbuf: int | None = None,
                 tls: ssl.SSLContext | None = None):
        self.sock = connect_socket("127.0.0.1", port, rcvbuf)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="localhost")
        try:
            self._handshake(port, path, headers)
        except BaseException:
            self.sock.close()
            raise

    def _handshake(self, port, path, headers):
        key = base64.b64encode(os.urandom(16)).decode()
        req = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        )
        for k, v in (headers or {}).items():
            req += f"{k}: {v}\r\n"
        self.sock.sendall((req + "\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            data = self.sock.recv(4096)
            assert data, f"connection closed during the upgrade; got {self.buf!r}"
            self.buf += data
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        self.response_head = head.decode(errors="replace")
        status = self.response_head.split("\r\n")[0]
        assert " 101 " in status + " ", f"upgrade refused: {self.response_head}"
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        assert accept in self.response_head, f"bad Sec-WebSocket-Accept in {self.response_head}"
        self.frames_seen: list = []
        hello = self.recv_message()
        assert hello[0] == 1 and json.loads(hello[1]).get("op") == "hello", f"no hello: {hello}"
        self.hello = json.loads(hello[1])

    # sending
    @staticmethod
    def frame(opcode: int, payload: bytes = b"", fin: bool = True, mask: bool = True, rsv: int = 0, length: int | None = None) -> bytes:
        b0 = (0x80 if fin else 0) | ((rsv & 7) << 4) | (opcode & 0xF)
        n = len(payload) if length is None else length
        if n < 126:
            head = struct.pack("!BB", b0, (0x80 if mask else 0) | n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", b0, (0x80 if mask else 0) | 126, n)
        else:
            head = struct.pack("!BBQ", b0, (0x80 if mask else 0) | 127, n)
        if not mask:
            return head + payload
        key = os.urandom(4)
        masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload)) if len(payload) < 4096 else _mask_fast(payload, key)
        return head + key + masked

    def send_frame(self, opcode: int, payload: bytes = b"", **kw) -> None:
        self.sock.sendall(self.frame(opcode, payload, **kw))

    def send_text(self, text: str) -> None:
        self.send_frame(1, text.encode())

    # receiving
    def _need(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                raise TimeoutError
            except ConnectionResetError:
                data = b""
            if not data:
                raise EOFError(f"EOF; frames seen: {self.frames_seen[-10:]}")
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_frame(self, timeout: float = DEFAULT_TIMEOUT):
        """(fin, opcode, payload) of the next frame from the server (which must not mask)."""
        deadline = time.monotonic() + timeout
        b0, b1 = self._need(2, deadline)
        assert not (b1 & 0x80), "server frames must not be masked"
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._need(2, deadline))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._need(8, deadline))
        payload = self._need(n, deadline)
        fr = (bool(b0 & 0x80), b0 & 0xF, payload)
        self.frames_seen.append((fr[0], fr[1], payload[:200]))
        return fr

    def recv_message(self, timeout: float = DEFAULT_TIMEOUT):
        """(opcode, payload) of the next data message (reassembled) or control frame."""
        deadline = time.monotonic() + timeout
        fin, op, payload = self.recv_frame(timeout)
        if op >= 8 or fin:
            return op, payload
        parts = [payload]
        while True:
            fin, cop, p = self.recv_frame(max(deadline - time.monotonic(), 0.001))
            if cop >= 8:
                continue
            parts.append(p)
            if fin:
                return op, b"".join(parts)

    def recv_json(self, timeout: float = DEFAULT_TIMEOUT) -> dict:
        op, payload = self.recv_message(timeout)
        assert op == 1, f"expected a text message, got opcode {op}: {payload[:200]!r}"
        return json.loads(payload)

    def expect_json(self, pred, timeout: float = DEFAULT_TIMEOUT, what="a matching message"):
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {what}; got {seen}")
            op, payload = self.recv_message(left)
            seen.append((op, payload[:300]))
            if op == 1:
                f = json.loads(payload)
                if pred(f):
                    return f

    def expect_close(self, timeout: float = DEFAULT_TIMEOUT):
        """Reads until the server's close frame; returns (code, reason). Data messages before it
        are ignored. A connection dropped without a close frame fails the test."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no close frame within {timeout}s; frames: {seen}")
            try:
                fin, op, payload = self.recv_frame(left)
            except EOFError:
                raise AssertionError(f"the daemon dropped the TCP connection without a close frame; frames before: {seen}")
            if op == 8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                return code, payload[2:]
            seen.append((op, payload[:200]))

    def expect_eof(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._need(len(self.buf) + 1, deadline)
            except EOFError:
                return
            except TimeoutError:
                raise AssertionError(f"TCP connection still open {timeout}s after the close handshake")
            self.buf = b""

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _mask_fast(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    k = int.from_bytes((key * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(payload, "big") ^ k).to_bytes(n, "big")


# --------------------------------------------------------------------------------------------
# the todo app over any client


def new_detail(c: FrameSource) -> dict:
    r = c.request({"type": "RequestNewTodoDetailViewModel"})
    assert r.get("type") == "ResponseTodoDetailViewModel" and "payload" in r, f"unexpected answer {r}"
    return r["payload"]


def save_detail(c: FrameSource, detail: dict, expect_ok: bool = True, **fields):
    """RequestUpdateDetailViewModel with `detail` (a TodoDetailViewModel) updated by fields.
    Returns (reply, broadcast or None)."""
    payload = dict(detail)
    payload.update(fields)
    rid = next_id("save")
    c.send({"type": "RequestUpdateDetailViewModel", "id": rid, "payload": payload})
    reply = c.expect(lambda f: f.get("re") == rid and f.get("type") == "ResponseUpdateDetailViewModel", what=f"ResponseUpdateDetailViewModel re={rid}")
    if not expect_ok:
        return reply, None
    assert "error" not in reply, f"save failed: {reply}"
    bcast = c.expect(lambda f: f.get("re") == rid and f.get("type") == "ResponseTodoViewModel", what=f"broadcast ResponseTodoViewModel re={rid}")
    return reply, bcast


def create_todo(c: FrameSource, title: str, priority: str = "normal", subtitle: str = ""):
    """Creates a todo as the seed app does (new detail, then save). Returns (detail reply, broadcast)."""
    detail = new_detail(c)
    return save_detail(c, detail, title=title, priority=priority, subtitle=subtitle)


def todo_ref(todo: dict, **extra) -> dict:
    """A TodoViewModel-shaped payload naming a todo."""
    return {"todo": {**todo, **extra}}


def toggle(c: FrameSource, todo: dict, **extra):
    return c.request({"type": "RequestToggleCompleteTodoViewModel", "payload": todo_ref(todo, **extra)})


def delete(c: FrameSource, todo: dict, **extra):
    return c.request({"type": "RequestDeleteTodoViewModel", "payload": todo_ref(todo, **extra)})


def list_todos(c: FrameSource) -> list:
    r = c.request({"type": "RequestTodoViewModels"})
    assert r.get("type") == "ResponseTodoViewModels" and isinstance(r.get("payload"), list), f"unexpected answer {r}"
    assert "seq" not in r, f"a reply must not carry seq: {r}"
    return r["payload"]


def assert_open(c: FrameSource) -> None:
    c.ping()


# --------------------------------------------------------------------------------------------
# TLS material, made at run time with the openssl CLI (never committed)


def openssl(*args, cwd=None) -> None:
    exe = require_tool("openssl")
    r = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, f"openssl {' '.join(args)} failed:\n{r.stderr}"


def make_ca(directory: Path, name: str = "ca") -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
            "-out", str(cert), "-days", "2", "-subj", f"/CN=todostream test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return cert, key


def make_server_cert(directory: Path, ca: tuple[Path, Path], name: str = "server", cn: str = "localhost") -> tuple[Path, Path]:
    ca_cert, ca_key = ca
    key, csr, cert, ext = (directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem", directory / f"{name}.ext")
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
            "-out", str(csr), "-subj", f"/CN={cn}")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return cert, key


def wait_until(predicate, timeout=30.0, what="the condition"):
    """Polls `predicate` (an outside state: a log, an endpoint, a file) until it is true, at most
    `timeout` seconds; returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)  # polling an external state, bounded by the deadline


def rss_kib(pid: int) -> int:
    """A process's resident memory, in KiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def http_get(port: int, path: str, timeout: float = 10.0, tls: ssl.SSLContext | None = None):
    """GET `path` from the daemon's HTTP listener on 127.0.0.1 (over TLS with `tls`): (status,
    headers, body bytes), an error status (404, 503, …) answered like any other."""
    scheme = "https" if tls else "http"
    try:
        with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}{path}", timeout=timeout, context=tls) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def http_get_text(port: int, path: str, timeout: float = 10.0, tls: ssl.SSLContext | None = None) -> tuple[int, str]:
    """`http_get` for a text answer: (status, body)."""
    status, _, body = http_get(port, path, timeout, tls)
    return status, body.decode()


def daemon_with_small_send_buffers(daemon_factory, tmp_path: Path, *args: str):
    """A daemon whose sockets towards clients have a 4 KiB send buffer (the kernel takes little
    of what a client does not read: the rest waits in the daemon), with a TLS listener too;
    returns it and the CA's (certificate, key) that its certificate is signed with."""
    config = tmp_path / "small-send-buffers.yaml"
    config.write_text("limits:\n  socket_send_buffer_bytes: 4096\n")
    pki = tmp_path / "pki"
    pki.mkdir()
    ca = make_ca(pki, "ca")
    cert, key = make_server_cert(pki, ca, "server", cn="localhost")
    daemon = daemon_factory(
        "--config", str(config), "--storage", "memory", "--rate-limit", "1000000",
        "--tls-listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key), *args,
    )
    return daemon, ca
