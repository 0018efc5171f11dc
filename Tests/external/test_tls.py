"""NDJSON over TLS with `openssl s_client` (docs/PROTOCOL.md §1–§2, issue 3).

A test CA and a server certificate are made at run time with the openssl CLI in a temp dir
(never committed). s_client runs with `-verify_return_error`, `-quiet -no_ign_eof` under
`timeout`, fed through a pipe: frames are written when the test is ready, stdin is closed to end
the session, and every wait reads s_client's stdout until the expected line arrives.
"""

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time

import pytest

from helpers import (
    LineClient,
    ProcessClient,
    WSClient,
    create_todo,
    make_ca,
    make_server_cert,
    require_tool,
)


@pytest.fixture
def pki(tmp_path):
    d = tmp_path / "pki"
    d.mkdir()
    ca = make_ca(d, "ca")
    cert, key = make_server_cert(d, ca, "server", cn="localhost")
    return {"dir": d, "ca": ca, "ca_cert": ca[0], "cert": cert, "key": key}


@pytest.fixture
def tls_daemon(daemon_factory, pki):
    return daemon_factory("--tls-listen", "127.0.0.1:0", "--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]))


def s_client_argv(port, ca_file, *extra):
    openssl = require_tool("openssl")
    timeout = require_tool("timeout")
    return [timeout, "60", openssl, "s_client", "-connect", f"127.0.0.1:{port}", "-CAfile", str(ca_file),
            "-verify_return_error", "-verify_ip", "127.0.0.1", "-quiet", "-no_ign_eof", *extra]


def s_client(port, ca_file, *extra, name="s_client", hello=True):
    return ProcessClient(s_client_argv(port, ca_file, *extra), name=name, hello=hello, hello_timeout=20)


def test_s_client_gets_the_hello_first_and_runs_the_nc_flow(tls_daemon, pki):
    with s_client(tls_daemon.tls_port, pki["ca_cert"]) as tls, LineClient(tls_daemon.tcp_port, name="tcp") as tcp:
        h = tls.hello
        assert h["op"] == "hello" and h["protocol"] == 1 and h["subscriptions"] == ["Response*"], h
        assert h["epoch"] == tcp.hello["epoch"], "one stream on every transport"
        assert tls.history[0] == h, "the hello is the first line after the handshake (no plaintext preamble)"
        tcp.ping()
        tls.send({"type": "RequestNewTodoDetailViewModel", "id": "1"})
        fresh = tls.expect_re("1")
        tls.send({"type": "RequestUpdateDetailViewModel", "id": "2",
                  "payload": {"todo": {"id": fresh["payload"]["todo"]["id"]}, "title": "over TLS"}})
        reply = tls.expect(lambda f: f.get("re") == "2" and f.get("type") == "ResponseUpdateDetailViewModel")
        assert "error" not in reply, reply
        mine = tls.expect(lambda f: f.get("re") == "2" and "seq" in f)
        theirs = tcp.expect_seq(mine["seq"])
        assert "re" not in theirs and theirs["payload"] == mine["payload"]
        tls.send(b'{"op":"ping","id":3}\r\n')
        assert tls.expect_re(3) == {"op": "pong", "re": 3}
        tls.send(b"not json\n")
        assert tls.expect(lambda f: f.get("op") == "error")["error"]["code"] == "invalid_json"
        tls.close_stdin()
        rc = tls.wait(20)
        assert rc == 0, f"s_client exited {rc}: {tls.stderr()[-500:]}"


def test_a_change_over_tcp_reaches_tls_with_the_same_seq(tls_daemon, pki):
    with s_client(tls_daemon.tls_port, pki["ca_cert"]) as tls, LineClient(tls_daemon.tcp_port, name="tcp") as tcp:
        tls.ping()
        fresh = tcp.request({"type": "RequestNewTodoDetailViewModel"})
        tcp.send({"type": "RequestUpdateDetailViewModel", "id": "c1",
                  "payload": {"todo": {"id": fresh["payload"]["todo"]["id"]}, "title": "from tcp"}})
        mine = tcp.expect(lambda f: f.get("re") == "c1" and "seq" in f)
        theirs = tls.expect_seq(mine["seq"])
        assert "re" not in theirs and theirs["payload"]["title"] == "from tcp"


def test_verification_really_happens(tls_daemon, pki, tmp_path):
    """With a CA that did not sign the server's certificate, -verify_return_error aborts."""
    other_ca = make_ca(pki["dir"], "stranger")
    out = subprocess.run(s_client_argv(tls_daemon.tls_port, other_ca[0]), input=b"", capture_output=True, timeout=60)
    assert out.returncode != 0, "s_client must fail against a CA that did not sign the server certificate"
    assert b'"op":"hello"' not in out.stdout, out.stdout[:300]
    assert b"verify" in out.stderr.lower(), out.stderr[-500:]


def test_plaintext_client_on_the_tls_port_is_refused_and_the_listener_keeps_working(tls_daemon, pki):
    for attempt in range(3):
        s = socket.create_connection(("127.0.0.1", tls_daemon.tls_port), timeout=10)
        s.sendall(b'{"op":"ping","id":"plain"}\n')
        got = b""
        deadline = time.monotonic() + 15
        try:
            while True:
                s.settimeout(max(deadline - time.monotonic(), 0.01))
                data = s.recv(4096)
                if not data:
                    break
                got += data
        except socket.timeout:
            pytest.fail(f"a plaintext client on the TLS port was not refused (still open after 15 s); got {got[:200]!r}")
        except ConnectionResetError:
            pass
        finally:
            s.close()
        assert b"hello" not in got and b"pong" not in got, f"plaintext got an answer on the TLS port: {got[:200]!r}"
    with s_client(tls_daemon.tls_port, pki["ca_cert"]) as tls:
        tls.ping()


@pytest.mark.parametrize("version", ["-tls1_2", "-tls1_3"])
def test_tls_1_2_and_1_3_work(tls_daemon, pki, version):
    with s_client(tls_daemon.tls_port, pki["ca_cert"], version) as tls:
        tls.ping()


def test_tls_below_1_2_is_refused(tls_daemon, pki):
    out = subprocess.run(s_client_argv(tls_daemon.tls_port, pki["ca_cert"], "-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0"),
                         input=b"", capture_output=True, timeout=60)
    assert out.returncode != 0 and b'"op":"hello"' not in out.stdout, "a TLS 1.1 handshake must not succeed"
    assert b"alert" in out.stderr.lower() or b"protocol" in out.stderr.lower(), out.stderr[-400:]


def peer_common_name(port, ca_file):
    ctx = ssl.create_default_context(cafile=str(ca_file))
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as s:
            subject = dict(x[0] for x in s.getpeercert()["subject"])
            return subject.get("commonName")


def install(src_cert, src_key, cert, key):
    for src, dst in ((src_cert, cert), (src_key, key)):
        tmp = dst.with_suffix(".new")
        tmp.write_bytes(src.read_bytes())
        os.replace(tmp, dst)


def test_sighup_rotates_the_certificate_without_dropping_clients(tls_daemon, pki):
    d = tls_daemon
    assert peer_common_name(d.tls_port, pki["ca_cert"]) == "localhost"
    with s_client(d.tls_port, pki["ca_cert"], name="long-lived") as keep:
        keep.ping()
        new_cert, new_key = make_server_cert(pki["dir"], pki["ca"], "rotated", cn="rotated.localhost")
        install(new_cert, new_key, pki["cert"], pki["key"])
        d.signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while peer_common_name(d.tls_port, pki["ca_cert"]) != "rotated.localhost":
            assert time.monotonic() < deadline, f"the new certificate was not in use 20 s after SIGHUP\n{d.log_text()[-1500:]}"
            time.sleep(0.05)  # bounded poll for the reload to take effect
        keep.ping()  # the connection made with the old certificate is still served

        # a bad certificate is refused; the rotated one stays in use
        log_before = len(d.log_text())
        pki["cert"].write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
        d.signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while not re.search(r"(?i)(error|fail|not reloaded|invalid|refus)", d.log_text()[log_before:]):
            assert time.monotonic() < deadline, f"no error logged for a bad certificate on SIGHUP\n{d.log_text()[-1500:]}"
            time.sleep(0.05)  # bounded poll for the log line
        assert d.proc.poll() is None, "a bad certificate on reload must not stop the daemon"
        assert peer_common_name(d.tls_port, pki["ca_cert"]) == "rotated.localhost"
        keep.ping()
        with s_client(d.tls_port, pki["ca_cert"], name="after-bad-reload") as fresh:
            fresh.ping()


def test_wss_on_the_http_listener_with_http_tls(daemon_factory, pki):
    """--http-tls: the page and /events are served over TLS with the same certificate (wss://)."""
    d = daemon_factory("--tls-listen", "127.0.0.1:0", "--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]),
                       "--http-tls")
    context = ssl.create_default_context(cafile=str(pki["ca_cert"]))
    with WSClient(d.http_port, scheme="wss", ssl=context, name="wss") as w, LineClient(d.tcp_port, name="tcp") as tcp:
        assert w.hello["epoch"] == tcp.hello["epoch"]
        _, broadcast = create_todo(tcp, "seen over wss")
        assert w.expect_seq(broadcast["seq"])["payload"] == broadcast["payload"]
    # The same port does not speak plain WebSocket.
    with pytest.raises(Exception):
        WSClient(d.http_port, name="plain-ws-on-a-tls-port")
    # And /healthz answers over HTTPS.
    with socket.create_connection(("127.0.0.1", d.http_port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := tls.recv(4096):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    # A refused handshake on the HTTPS listener is logged at info, with the client's address,
    # as on the NDJSON-over-TLS listener (it was not logged at all).
    with socket.create_connection(("127.0.0.1", d.http_port), timeout=10) as plain:
        plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        try:
            while plain.recv(4096):
                pass
        except (ConnectionResetError, socket.timeout):
            pass
    deadline = time.monotonic() + 10
    while not re.search(r"info .*remote=127\.0\.0\.1.* TLS connection failed", d.log_text()):
        assert time.monotonic() < deadline, f"no refused handshake logged for HTTPS\n{d.log_text()[-1500:]}"
        time.sleep(0.05)  # bounded poll for the log line


def test_a_certificate_no_listener_uses_is_warned_about(daemon_factory, pki, tls_daemon):
    """--tls-cert without --tls-listen or --http-tls serves no TLS at all: the log says so,
    where a forgotten flag would otherwise pass unnoticed. A daemon that uses it says nothing."""
    lone = daemon_factory("--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]))
    warning = "a TLS certificate is given but no listener uses it"
    assert warning in lone.log_text(), lone.log_text()
    assert warning not in tls_daemon.log_text()


def test_input_ended_without_close_notify_is_answered_like_tcp(tls_daemon, pki):
    """A client that sends requests and then only a TCP FIN (no close_notify: a ragged end)
    gets its answers, as on plain TCP, and then the close. They were lost at random."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(pki["ca_cert"]))
    ctx.check_hostname = False
    for attempt in range(5):
        sock = socket.create_connection(("127.0.0.1", tls_daemon.tls_port), timeout=10)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")

        def send_pending():
            data = outgoing.read()
            if data:
                sock.sendall(data)

        def receive() -> bool:
            data = sock.recv(65536)
            if not data:
                incoming.write_eof()
            else:
                incoming.write(data)
            return bool(data)

        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                send_pending()
                receive()
        send_pending()
        tls.write(b'{"op":"ping","id":"one"}\n{"type":"RequestTodoViewModels","id":"two"}\n')
        send_pending()
        sock.shutdown(socket.SHUT_WR)  # a FIN, no close_notify
        received = b""
        while True:
            more = receive()
            try:
                while True:
                    chunk = tls.read(65536)
                    if not chunk:
                        break
                    received += chunk
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError, ssl.SSLEOFError):
                pass
            if not more:
                break
        sock.close()
        answered = [json.loads(line).get("re") for line in received.splitlines() if line.strip()]
        assert "one" in answered and "two" in answered, (attempt, received[-300:])
