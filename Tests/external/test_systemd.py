"""The daemon as a systemd citizen, tested on the real binary: the unit verifies, config files
are checked, SIGTERM drains, SIGHUP reloads, sd_notify tells the truth, kill -9 loses no
acknowledged write."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, daemon_binary
from helpers import LineClient, wait_until


def line_client(port: int):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    reader = sock.makefile("rb")
    hello = json.loads(reader.readline())
    assert hello["op"] == "hello"
    return sock, reader, hello


def send(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode())


def read_until(reader, predicate, limit=1000):
    for _ in range(limit):
        line = reader.readline()
        if not line:
            raise AssertionError("connection closed before the expected frame")
        frame = json.loads(line)
        if predicate(frame):
            return frame
    raise AssertionError("expected frame not seen")


def create_todo(sock, reader, title, tag):
    send(sock, {"type": "RequestNewTodoDetailViewModel", "id": f"n{tag}"})
    fresh = read_until(reader, lambda f: f.get("re") == f"n{tag}")["payload"]
    fresh["title"] = title
    send(sock, {"type": "RequestUpdateDetailViewModel", "id": f"s{tag}", "payload": fresh})
    saved = read_until(reader, lambda f: f.get("re") == f"s{tag}" and "seq" in f)
    return saved


def test_the_unit_files_verify(tmp_path):
    assert shutil.which("systemd-analyze"), "systemd-analyze is missing (Debian package systemd)"
    unit = (REPO / "systemd" / "todostreamd.service").read_text()
    unit = unit.replace("/usr/local/bin/todostreamd", daemon_binary())
    path = tmp_path / "todostreamd.service"
    path.write_text(unit)
    result = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    problems = [line for line in (result.stdout + result.stderr).splitlines() if "todostreamd.service" in line]
    assert problems == []
    for directive in ["Type=notify", "WatchdogSec=", "ExecReload=", "StateDirectory=", "DynamicUser=yes",
                      "ProtectSystem=strict", "NoNewPrivileges=yes", "LimitNOFILE=", "TimeoutStopSec="]:
        assert directive in unit


def test_check_config_accepts_the_example_and_names_what_is_wrong(tmp_path):
    ok = subprocess.run([daemon_binary(), "check-config", str(REPO / "config" / "todostreamd.yaml")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("limits:\n  max_queue_bytez: 5\n")
    result = subprocess.run([daemon_binary(), "check-config", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "limits.max_queue_bytez" in result.stderr
    bad.write_text("limits:\n  max_connections: 0\n")
    result = subprocess.run([daemon_binary(), "check-config", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "limits.max_connections" in result.stderr
    # Files are loaded as `serve` loads them: a certificate that is not there fails the check,
    # as it would fail the start.
    missing = tmp_path / "nowhere.pem"
    bad.write_text(f"listen:\n  tls: 127.0.0.1:0\ntls:\n  cert: {missing}\n  key: {missing}\n")
    result = subprocess.run([daemon_binary(), "check-config", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0, result.stdout
    assert "cannot load TLS certificate" in result.stderr and str(missing) in result.stderr, result.stderr
    # A data dir that is a file fails the check as it fails `serve` (it once passed: the unit's
    # ExecStartPre let a start through that then failed).
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    bad.write_text(f"data_dir: {blocker}\n")
    result = subprocess.run([daemon_binary(), "check-config", str(bad)], capture_output=True, text=True)
    assert result.returncode == 1, result.stdout
    assert f"data directory {blocker} is not a directory" in result.stderr, result.stderr
    bad.write_text(f"data_dir: {blocker}\nstorage: memory\n")  # not used: nothing to say
    result = subprocess.run([daemon_binary(), "check-config", str(bad)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # The CA file a PostgreSQL URL names is read as `serve` reads it (no server is contacted).
    bad.write_text("storage: postgres\n"
                   f"postgres_url: postgres://todo@127.0.0.1:1/todo?sslmode=verify-full&sslrootcert={missing}\n")
    result = subprocess.run([daemon_binary(), "check-config", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0, result.stdout
    assert f"cannot read sslrootcert {missing}" in result.stderr, result.stderr


def test_a_busy_port_and_an_unwritable_data_dir_are_one_line_errors(daemon, tmp_path):
    busy = subprocess.run([daemon_binary(), "serve", "--data-dir", str(tmp_path / "d"), "--listen",
                           f"127.0.0.1:{daemon.tcp_port}", "--http-listen", "off"],
                          capture_output=True, text=True, timeout=60)
    assert busy.returncode != 0
    assert f"127.0.0.1:{daemon.tcp_port}" in busy.stderr and "in use" in busy.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    unwritable = subprocess.run([daemon_binary(), "serve", "--data-dir", str(blocker / "data"), "--listen",
                                 "127.0.0.1:0", "--http-listen", "off"], capture_output=True, text=True, timeout=60)
    assert unwritable.returncode != 0
    assert str(blocker / "data") in unwritable.stderr
    assert len(unwritable.stderr.strip().splitlines()) == 1
    no_port_file = subprocess.run([daemon_binary(), "serve", "--data-dir", str(tmp_path / "e"), "--listen", "127.0.0.1:0",
                                   "--http-listen", "off", "--port-file", str(tmp_path / "nowhere" / "ports.json")],
                                  capture_output=True, text=True, timeout=60)
    assert no_port_file.returncode == 1
    assert f"cannot write the port file {tmp_path / 'nowhere' / 'ports.json'}: no such directory" in no_port_file.stderr
    assert "Cocoa" not in no_port_file.stderr


def test_sigterm_drains_every_client_and_loses_no_acknowledged_write(daemon):
    clients = [line_client(daemon.tcp_port) for _ in range(3)]
    sock, reader, _ = clients[0]
    saved = create_todo(sock, reader, "acknowledged before shutdown", "x")
    todo_id = saved["payload"]["todo"]["id"]
    daemon.signal(signal.SIGTERM)
    for _, client_reader, _ in clients:
        draining = read_until(client_reader, lambda f: f.get("op") == "draining")
        assert isinstance(draining["reconnect_after_ms"], int) and draining["reconnect_after_ms"] >= 0
    assert daemon.proc.wait(timeout=30) == 0
    daemon.returncodes.append(0)
    daemon.proc = None
    daemon.start()
    sock, reader, _ = line_client(daemon.tcp_port)
    send(sock, {"type": "RequestTodoViewModels", "id": "list"})
    listed = read_until(reader, lambda f: f.get("re") == "list")
    assert todo_id in [vm["todo"]["id"] for vm in listed["payload"]]


def test_kill_9_loses_no_acknowledged_write_and_the_journal_matches(daemon):
    sock, reader, hello = line_client(daemon.tcp_port)
    ids = [create_todo(sock, reader, f"durable {i}", i)["payload"]["todo"]["id"] for i in range(20)]
    daemon.kill()
    daemon.proc = None
    daemon.start()
    sock, reader, hello2 = line_client(daemon.tcp_port)
    assert hello2["epoch"] == hello["epoch"]
    assert hello2["seq"] == 20
    send(sock, {"type": "RequestTodoViewModels", "id": "list"})
    listed = read_until(reader, lambda f: f.get("re") == "list")
    assert set(ids) <= {vm["todo"]["id"] for vm in listed["payload"]}
    # Every broadcast in the journal has its write, and every write its broadcast.
    send(sock, {"op": "resume", "epoch": hello["epoch"], "after": 0, "id": "r"})
    replayed = []
    while True:
        frame = json.loads(reader.readline())
        if frame.get("op") == "resumed":
            break
        replayed.append(frame)
    assert [f["seq"] for f in replayed] == list(range(1, 21))
    assert [f["payload"]["todo"]["id"] for f in replayed] == ids


def test_sd_notify_ready_watchdog_status_and_stopping(tmp_path):
    path = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    listener.settimeout(15)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
    port_file = tmp_path / "ports.json"
    proc = subprocess.Popen([daemon_binary(), "serve", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0",
                             "--http-listen", "off", "--port-file", str(port_file)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        first = listener.recv(4096).decode()
        assert first.startswith("READY=1")
        # READY is only sent once the listeners accept.
        ports = json.loads(port_file.read_text())
        line_client(ports["tcp"])[0].close()
        messages = [listener.recv(4096).decode() for _ in range(3)]
        assert all(m.startswith("WATCHDOG=1") for m in messages)
        assert any("STATUS=" in m and "connections" in m for m in messages)
        proc.send_signal(signal.SIGHUP)
        seen = []
        while not any(m.startswith("READY=1") for m in seen[1:]) :
            seen.append(listener.recv(4096).decode())
            if any(m.startswith("RELOADING=1") for m in seen) and seen[-1].startswith("READY=1"):
                break
        assert any(m.startswith("RELOADING=1") and "MONOTONIC_USEC=" in m for m in seen)
        proc.send_signal(signal.SIGTERM)
        while True:
            message = listener.recv(4096).decode()
            if message.startswith("STOPPING=1"):
                break
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        listener.close()


def test_sighup_applies_a_good_config_and_keeps_the_old_one_when_bad(daemon_factory, tmp_path):
    config = tmp_path / "todostreamd.yaml"
    config.write_text("limits:\n  max_subscriptions: 2\n")
    daemon = daemon_factory("--config", str(config))
    sock, reader, _ = line_client(daemon.tcp_port)
    send(sock, {"op": "subscribe", "types": ["ResponseTodoViewModel", "ResponseTodoViewModels"], "id": "a"})
    assert read_until(reader, lambda f: f.get("re") == "a")["error"]["code"] == "not_permitted"

    def reloads_logged():
        return daemon.log_text().count("reloading")

    def wait_for_log(text, count):
        deadline = time.monotonic() + 15
        while daemon.log_text().count(text) < count:
            assert time.monotonic() < deadline, f"'{text}' not logged\n{daemon.log_tail()}"
            time.sleep(0.05)

    config.write_text("limits:\n  max_subscriptions: 5\n")
    daemon.signal(signal.SIGHUP)
    wait_for_log("] reloaded", 1)
    send(sock, {"op": "subscribe", "types": ["ResponseTodoViewModel", "ResponseTodoViewModels"], "id": "b"})
    assert read_until(reader, lambda f: f.get("re") == "b")["op"] == "subscribed"

    config.write_text("limits:\n  max_subscriptions: many\n")
    daemon.signal(signal.SIGHUP)
    wait_for_log("config not reloaded", 1)
    send(sock, {"op": "ping", "id": "c"})
    assert read_until(reader, lambda f: f.get("re") == "c")["op"] == "pong"
    send(sock, {"op": "subscribe", "types": ["ResponseTodoDetailViewModel", "ResponseUpdateDetailViewModel"], "id": "d"})
    assert read_until(reader, lambda f: f.get("re") == "d")["op"] == "subscribed"


def test_socket_activation_serves_on_inherited_sockets_that_survive_a_restart(tmp_path):
    for unit in ["todostreamd.socket", "todostreamd-http.socket"]:
        result = subprocess.run(["systemd-analyze", "verify", str(REPO / "systemd" / unit)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]

    def start():
        def hand_over():
            os.dup2(listener.fileno(), 3)
        env = dict(os.environ, LISTEN_FDS="1", LISTEN_FDNAMES="tcp")
        # LISTEN_PID names the process the sockets are for, as systemd sets it: the shell's pid,
        # which the daemon keeps by exec.
        return subprocess.Popen(["sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh",
                                 daemon_binary(), "serve", "--data-dir", str(tmp_path / "data"), "--http-listen", "off"],
                                env=env, preexec_fn=hand_over, pass_fds=(3, listener.fileno()),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    first = start()
    try:
        sock, reader, _ = line_client(port)
        saved = create_todo(sock, reader, "via an inherited socket", "a")
        sock.close()
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        # While no daemon runs, the kernel still accepts on the inherited socket; the next
        # daemon greets the waiting client.
        waiting = socket.create_connection(("127.0.0.1", port), timeout=30)
        second = start()
        try:
            hello = json.loads(waiting.makefile("rb").readline())
            assert hello["op"] == "hello"
            assert hello["seq"] == saved["seq"]
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=30) == 0
    finally:
        if first.poll() is None:
            first.kill()
        listener.close()


def test_socket_activation_refuses_what_is_no_listening_socket_and_ignores_sockets_meant_for_another(tmp_path):
    """A descriptor handed over as a listener must be one: a file or an unlistened socket is
    refused at start (the daemon once said it served, then crashed). Without LISTEN_PID the
    descriptors are not this process's (as sd_listen_fds): the daemon binds its own listeners."""
    path = tmp_path / "not-a-socket"
    path.write_text("x")
    with open(path) as file:
        def hand_over():
            os.dup2(file.fileno(), 3)
        env = dict(os.environ, LISTEN_FDS="1", LISTEN_FDNAMES="tcp")
        refused = subprocess.run(["sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh", daemon_binary(), "serve",
                                  "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0", "--http-listen", "off"],
                                 env=env, preexec_fn=hand_over, pass_fds=(3, file.fileno()),
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1, refused
        assert "descriptor 3 (tcp) is not a listening TCP socket: it is not a socket" in refused.stderr, refused.stderr
        ports = tmp_path / "ports.json"
        ignored = subprocess.Popen([daemon_binary(), "serve", "--data-dir", str(tmp_path / "data"),
                                    "--listen", "127.0.0.1:0", "--http-listen", "off", "--port-file", str(ports)],
                                   env=env, preexec_fn=hand_over, pass_fds=(3, file.fileno()),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not (ports.exists() and ports.read_text().strip()):
                assert ignored.poll() is None, "the daemon ended"
                assert time.monotonic() < deadline, "no port file"
                time.sleep(0.05)
            port = json.loads(ports.read_text())["tcp"]
            sock, reader, _ = line_client(port)
            assert reader is not None
            sock.close()
        finally:
            ignored.send_signal(signal.SIGTERM)
            assert ignored.wait(timeout=30) == 0


def test_a_second_daemon_on_a_data_dir_in_use_does_not_start(daemon_factory):
    """One SQLite data dir, one daemon: a second one exits 1 naming the first, which serves on;
    after the first is killed (-9), the kernel has dropped its lock and the dir starts again."""
    first = daemon_factory()
    sock, reader, _ = line_client(first.tcp_port)
    send(sock, {"type": "RequestUpdateDetailViewModel", "id": "s",
                "payload": {"todo": {"id": "6f1c2b7e-0000-4000-8000-00000000000a", "version": 0}, "title": "kept"}})
    assert json.loads(reader.readline())["re"] == "s"
    second = subprocess.run(
        [daemon_binary(), "serve", "--data-dir", str(first.data_dir), "--listen", "127.0.0.1:0", "--http-listen", "off"],
        capture_output=True, text=True, timeout=60,
    )
    assert second.returncode == 1, (second.returncode, second.stderr)
    assert f"is in use by another todostreamd (pid {first.pid})" in second.stderr, second.stderr
    send(sock, {"op": "ping", "id": "alive"})
    while (frame := json.loads(reader.readline())).get("re") != "alive":
        pass
    sock.close()
    first.kill()
    first.start_again(15.0)
    sock, reader, hello = line_client(first.tcp_port)
    assert hello["seq"] == 1, hello
    sock.close()


# The unit's SystemCallFilter refuses @resources; with SystemCallErrorNumber=EPERM a refused
# call fails instead of killing the process. The Swift runtime's thread pool calls setpriority
# (in @resources): the daemon must start and serve when it is refused, as it is under the unit.
_SETPRIORITY_X86_64 = 141


def _refuse_setpriority():
    """In the child before exec: a seccomp filter answering setpriority with EPERM (x86_64)."""
    import ctypes
    import struct

    def op(code, jt, jf, k):
        return struct.pack("HBBI", code, jt, jf, k)

    program = b"".join([
        op(0x20, 0, 0, 4),                      # A = seccomp_data.arch
        op(0x15, 0, 3, 0xC000003E),             # not x86_64: allow
        op(0x20, 0, 0, 0),                      # A = seccomp_data.nr
        op(0x15, 0, 1, _SETPRIORITY_X86_64),    # setpriority: EPERM
        op(0x06, 0, 0, 0x00050000 | 1),
        op(0x06, 0, 0, 0x7FFF0000),             # everything else: allow
    ])
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program)

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def test_the_unit_refuses_system_calls_without_killing_and_the_daemon_runs_refused(tmp_path):
    unit = (REPO / "systemd" / "todostreamd.service").read_text()
    assert "SystemCallFilter=" in unit
    assert "SystemCallErrorNumber=EPERM" in unit, "a refused call must not kill the daemon"
    assert os.uname().machine == "x86_64", "the filter below is written for x86_64"
    # The filter works: a plain setpriority is refused under it.
    probe = subprocess.run(["python3", "-c", "import os; os.setpriority(os.PRIO_PROCESS, 0, 0)"],
                           preexec_fn=_refuse_setpriority, capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "PermissionError" in probe.stderr, probe.stderr
    check = subprocess.run([daemon_binary(), "check-config", str(REPO / "config" / "todostreamd.yaml")],
                           preexec_fn=_refuse_setpriority, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    data = tmp_path / "data"
    ports = tmp_path / "ports.json"
    daemon = subprocess.Popen([daemon_binary(), "serve", "--data-dir", str(data), "--listen", "127.0.0.1:0",
                               "--http-listen", "off", "--port-file", str(ports)],
                              preexec_fn=_refuse_setpriority, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline = time.monotonic() + 60
        while not (ports.exists() and ports.stat().st_size > 0):
            assert daemon.poll() is None, daemon.stderr.read()
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        port = json.loads(ports.read_text())["tcp"]
        sock, reader, _ = line_client(port)
        saved = create_todo(sock, reader, "under the filter", "f")
        assert saved["seq"] == 1, saved
        sock.close()
    finally:
        daemon.terminate()
        assert daemon.wait(timeout=60) == 0, daemon.stderr.read()


def test_a_stop_while_postgresql_is_still_unreachable_at_start_is_graceful(tmp_path):
    """SIGTERM while the daemon retries an unreachable PostgreSQL at start (for up to
    postgres.startup_timeout_ms, 30 s by default, longer than the unit's TimeoutStopSec) stops
    it at once with exit 0: nothing runs yet, so there is nothing to drain."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    process = subprocess.Popen(
        [daemon_binary(), "serve", "--storage", "postgres",
         "--postgres-url", f"postgres://todo:secret-password@127.0.0.1:{closed_port}/todo",
         "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0", "--http-listen", "off"],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        seen = []
        while "cannot reach PostgreSQL yet" not in (line := process.stderr.readline()):
            assert line, f"the daemon ended before retrying: {seen}"
            seen.append(line)
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=10)
        assert process.returncode == 0, rest
        assert "stopped while starting" in rest, rest
        assert "secret-password" not in rest
    finally:
        if process.poll() is None:
            process.kill()


def test_a_stop_at_any_moment_of_the_start_is_graceful(tmp_path):
    """SIGTERM at moments spread over the start (the SQLite store opening, migrating, loading,
    the listeners binding): every run exits 0, nothing is logged as an error (a stop is not a
    failure of the database), and no connection to the store is left open (a debug build
    asserts on one)."""
    failures = []
    for run in range(40):
        data = tmp_path / f"data-{run}"
        process = subprocess.Popen(
            [daemon_binary(), "serve", "--data-dir", str(data), "--listen", "127.0.0.1:0",
             "--http-listen", "off", "--log-level", "info"],
            stderr=subprocess.PIPE, text=True,
        )
        time.sleep(0.02 + 0.01 * run)  # the moment of the stop, not a synchronisation
        process.send_signal(signal.SIGTERM)
        try:
            _, log = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, log = process.communicate()
            failures.append((run, "did not stop", log[-2000:]))
            continue
        if process.returncode == -signal.SIGTERM and not log.strip():
            continue  # before the daemon trapped its signals (its first milliseconds): nothing was open
        bad = [line for line in log.splitlines() if " error " in line or "Assertion" in line or "Fatal" in line]
        if process.returncode != 0 or bad:
            failures.append((run, process.returncode, bad or log[-2000:]))
    assert not failures, failures


def test_sigusr1_and_sigusr2_are_ignored_not_a_kill_without_a_drain(daemon):
    """Their default action kills the process at once: no drain, no `draining` to clients. The
    daemon traps them, says so in its log, and goes on serving."""
    with LineClient(daemon.tcp_port, name="client") as c:
        for signum in (signal.SIGUSR1, signal.SIGUSR2):
            daemon.signal(signum)
            wait_until(lambda: daemon.log_text().count("signal ignored") >= (1 if signum == signal.SIGUSR1 else 2),
                       timeout=10, what="the signal logged as ignored")
            c.ping()
    assert daemon.running
    assert daemon.stop() == 0


def test_a_refused_reload_shows_in_the_status_until_one_succeeds(tmp_path):
    """systemctl reload cannot fail a Type=notify-reload service; a refused reload is told in
    STATUS= (what `systemctl status` shows), kept in the periodic status line, and cleared by
    the next reload that is applied."""
    path = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    listener.settimeout(15)
    config = tmp_path / "todostreamd.yaml"
    config.write_text("log_level: info\n")
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
    proc = subprocess.Popen([daemon_binary(), "serve", "--config", str(config), "--data-dir", str(tmp_path / "data"),
                             "--listen", "127.0.0.1:0", "--http-listen", "off"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def until(predicate):
        while not predicate(message := listener.recv(4096).decode()):
            pass
        return message

    try:
        until(lambda m: m.startswith("READY=1"))
        config.write_text("log_level: loud\n")
        proc.send_signal(signal.SIGHUP)
        refused = until(lambda m: "config not reloaded" in m)
        assert "log_level" in refused, refused
        periodic = until(lambda m: m.startswith("WATCHDOG=1"))
        assert "connections" in periodic and "config not reloaded" in periodic, periodic
        config.write_text("log_level: debug\n")
        proc.send_signal(signal.SIGHUP)
        until(lambda m: "STATUS=reloaded" in m)
        periodic = until(lambda m: m.startswith("WATCHDOG=1"))
        assert "config not reloaded" not in periodic, periodic
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        listener.close()


def test_log_lines_carry_their_priority_when_stderr_is_the_journal(tmp_path):
    """Under systemd (JOURNAL_STREAM names standard error's device and inode) every line starts
    with its syslog priority, which journald stores (`journalctl -p err` finds the errors), and
    without a timestamp of the daemon's own; anywhere else lines are as they were."""
    log = tmp_path / "stderr.log"
    with open(log, "w") as stderr:
        status = os.fstat(stderr.fileno())
        env = dict(os.environ, JOURNAL_STREAM=f"{status.st_dev}:{status.st_ino}")
        proc = subprocess.Popen([daemon_binary(), "serve", "--data-dir", str(tmp_path / "data"),
                                 "--listen", "127.0.0.1:0", "--http-listen", "off",
                                 "--port-file", str(tmp_path / "ports.json")],
                                env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            while not (tmp_path / "ports.json").exists() or not (tmp_path / "ports.json").read_text():
                assert proc.poll() is None, log.read_text()
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    lines = log.read_text().splitlines()
    assert lines, "nothing logged"
    assert any(line.startswith("<5>notice todostreamd:") for line in lines), lines
    assert any(line.startswith("<6>info todostreamd:") for line in lines), lines
    assert all(line[0] == "<" and line[2] == ">" for line in lines), lines


def test_a_daemon_that_cannot_start_says_why_at_error_priority_in_the_journal(tmp_path):
    """The reason a start fails (here: the data dir is a file) is the line `journalctl -p err`
    must show; it once had no priority, so journald filed it at info with the rest."""
    log = tmp_path / "stderr.log"
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with open(log, "w") as stderr:
        status = os.fstat(stderr.fileno())
        env = dict(os.environ, JOURNAL_STREAM=f"{status.st_dev}:{status.st_ino}")
        result = subprocess.run([daemon_binary(), "serve", "--data-dir", str(not_a_dir),
                                 "--listen", "127.0.0.1:0", "--http-listen", "off"],
                                env=env, stdout=subprocess.DEVNULL, stderr=stderr, timeout=60)
    assert result.returncode == 1
    lines = log.read_text().splitlines()
    assert any(line.startswith("<3>todostreamd: ") and "not a directory" in line for line in lines), lines
    assert all(line[0] == "<" and line[2] == ">" for line in lines), lines
