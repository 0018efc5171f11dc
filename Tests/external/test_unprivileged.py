"""The daemon and the CLI run as an ordinary user, as the systemd unit runs the daemon
(DynamicUser=yes, no capabilities): connections are served and the CLI connects. A socket option
set at the wrong level (TCP_NODELAY as a SOL_SOCKET option is SO_DEBUG, which needs
CAP_NET_ADMIN) once made every accepted connection fail without root.

The tests need root (to switch to `nobody` with `setpriv`): CI runs them as root; elsewhere they
FAIL rather than skip.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import daemon_binary
from test_cli import cli_binary


def _as_nobody(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        pytest.fail("these tests switch to the user nobody and need root", pytrace=False)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) is missing", pytrace=False)
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all", "--", *command]


def _runnable_copy(path: str, home: Path) -> str:
    """A copy of the binary at `path` in `home`, where nobody can run it."""
    copy = home / os.path.basename(path)
    shutil.copy(path, copy)
    os.chmod(copy, 0o755)
    return str(copy)


@pytest.fixture
def unprivileged_daemon():
    """A daemon started as nobody, with copies of the binaries it and the CLI need where nobody
    can run them (pytest's own temporary folders are closed to other users)."""
    nobody = pwd.getpwnam("nobody")
    home = Path(tempfile.mkdtemp(prefix="todostream-unprivileged-"))
    os.chmod(home, 0o755)
    binaries = {"daemon": _runnable_copy(daemon_binary(), home), "cli": _runnable_copy(cli_binary(), home)}
    data = home / "data"
    data.mkdir()
    os.chown(data, nobody.pw_uid, nobody.pw_gid)
    port_file = data / "ports.json"
    log = open(home / "log", "w")
    process = subprocess.Popen(
        _as_nobody([binaries["daemon"], "serve", "--data-dir", str(data), "--port-file", str(port_file),
                    "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "debug"]),
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip().endswith("}"):
            assert process.poll() is None, (home / "log").read_text()
            assert time.monotonic() < deadline, "the daemon did not write its ports"
            time.sleep(0.05)
        yield json.loads(port_file.read_text()), binaries, home / "log"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def test_a_daemon_without_privileges_serves_tcp_and_http_and_the_cli_connects(unprivileged_daemon):
    ports, binaries, log = unprivileged_daemon
    with socket.create_connection(("127.0.0.1", ports["tcp"]), timeout=10) as s:
        hello = json.loads(s.makefile("rb").readline())
        assert hello.get("op") == "hello", (hello, log.read_text())
    with socket.create_connection(("127.0.0.1", ports["http"]), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        status = s.makefile("rb").readline()
        assert status.startswith(b"HTTP/1.1 200"), (status, log.read_text())
    url = f"tcp://127.0.0.1:{ports['tcp']}"
    added = subprocess.run(_as_nobody([binaries["cli"], "add", "Added by nobody", "--url", url]),
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, (added, log.read_text())
    listed = subprocess.run(_as_nobody([binaries["cli"], "list", "--url", url]),
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "Added by nobody" in listed.stdout, (listed, log.read_text())


def test_a_database_file_the_user_cannot_write_refuses_the_start():
    """SQLite opens a file it may not write read-only, without a word: the daemon would serve
    and fail every write. It refuses to start instead, and says why."""
    nobody = pwd.getpwnam("nobody")
    home = Path(tempfile.mkdtemp(prefix="todostream-readonly-"))
    try:
        os.chmod(home, 0o755)
        daemon = _runnable_copy(daemon_binary(), home)
        data = home / "data"
        # Made by root (a restore from a backup, say): the database file stays root's.
        first = subprocess.Popen([str(daemon), "serve", "--data-dir", str(data), "--listen", "127.0.0.1:0",
                                  "--http-listen", "127.0.0.1:0", "--port-file", str(home / "ports.json")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not (home / "ports.json").exists():
            assert first.poll() is None and time.monotonic() < deadline, "the first start failed"
            time.sleep(0.05)
        first.terminate()
        assert first.wait(timeout=30) == 0
        for path in [data, *data.iterdir()]:
            if path.name != "todostream.sqlite":
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
        os.chmod(data / "todostream.sqlite", 0o644)
        started = subprocess.run(
            _as_nobody([str(daemon), "serve", "--data-dir", str(data), "--listen", "127.0.0.1:0",
                        "--http-listen", "127.0.0.1:0", "--port-file", str(home / "again.json")]),
            capture_output=True, text=True, timeout=60,
        )
        assert started.returncode == 1, started
        assert "is not writable by the daemon's user" in started.stdout + started.stderr, started
    finally:
        shutil.rmtree(home, ignore_errors=True)
