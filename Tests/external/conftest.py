"""Shared fixtures for the external tests: a real `todostreamd` process on ephemeral ports.

    def test_something(daemon):            # default flags
        socket.create_connection(("127.0.0.1", daemon.tcp_port))

    @pytest.mark.daemon_args("--token", "view:secret-token", "--storage", "memory")
    def test_with_flags(daemon): ...       # extra command-line flags

    def test_two(daemon_factory):          # as many daemons as needed, each with its own flags
        a = daemon_factory("--rate-limit", "5")
        b = daemon_factory(data_dir=a.data_dir.parent / "b")

The daemon binary is $TODOSTREAMD, else <repo>/.build/debug/todostreamd; a missing binary FAILS
the test (never skips). Ports are never fixed: listeners bind port 0 and the fixture reads the
ports from the daemon's --port-file. `restart()` starts a new process on the same data dir and
the same ports, so clients (and web pages) can reconnect to where they were; `stop()` then
`start_again()` does the same with a pause in between. When a test fails,
the daemon's log is attached to the report.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Flags that choose a listener address; when a test gives one, the fixture does not add its own.
_LISTEN_FLAGS = {"--listen": "tcp", "--http-listen": "http", "--tls-listen": "tls"}


def daemon_binary() -> str:
    """The path of the daemon binary; FAILS the test when it is missing."""
    path = os.environ.get("TODOSTREAMD") or str(REPO / ".build" / "debug" / "todostreamd")
    if not os.access(path, os.X_OK):
        pytest.fail(f"the daemon binary {path} is missing: run `swift build` first (or set TODOSTREAMD)", pytrace=False)
    return path


def _die_with_parent() -> None:
    """In the child before exec: on Linux, get SIGKILL when the test process dies, so that a
    killed or timed-out pytest never leaves a daemon behind (it runs in its own session, so
    Ctrl-C reaches only pytest, which then stops it gracefully)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class DaemonProcess:
    """One `todostreamd serve` on 127.0.0.1, restartable on the same data dir and ports.

    Attributes: data_dir, log_path, port_file, args (the extra flags), ports (dict from the
    port file: "tcp", "http", and "tls" when a TLS listener is on), proc, returncodes (exit
    status of every process stopped so far).
    """

    def __init__(self, data_dir: Path, args=(), log_path: Path | None = None, start_timeout: float = 60.0):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.args = [str(arg) for arg in args]
        self.log_path = Path(log_path) if log_path else self.data_dir.parent / f"{self.data_dir.name}.log"
        self.port_file = self.data_dir / "ports.json"
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.ports: dict[str, int] = {}
        self.returncodes: list[int] = []
        self._pinned: dict[str, int] = {}

    # -- addresses --------------------------------------------------------------------------

    @property
    def tcp_port(self) -> int:
        return self._port("tcp")

    @property
    def http_port(self) -> int:
        return self._port("http")

    @property
    def tls_port(self) -> int:
        return self._port("tls")

    def _port(self, name: str) -> int:
        if name not in self.ports:
            raise AttributeError(f"this daemon has no {name} listener (ports: {self.ports})")
        return self.ports[name]

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.http_port}/events"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- lifecycle --------------------------------------------------------------------------

    def command(self) -> list[str]:
        given = {flag for flag in self.args if flag in _LISTEN_FLAGS} | {
            arg.split("=", 1)[0] for arg in self.args if arg.split("=", 1)[0] in _LISTEN_FLAGS
        }
        command = [daemon_binary(), "serve", "--data-dir", str(self.data_dir), "--port-file", str(self.port_file)]
        for flag, name in _LISTEN_FLAGS.items():
            if flag in given:
                continue
            if name in self._pinned:
                command += [flag, f"127.0.0.1:{self._pinned[name]}"]
            elif name != "tls":
                command += [flag, "127.0.0.1:0"]
        return command + self.args

    def _wanted_ports(self) -> list[str]:
        command = self.command()
        wanted = []
        for flag, name in _LISTEN_FLAGS.items():
            values = [command[i + 1] for i, arg in enumerate(command[:-1]) if arg == flag]
            values += [arg.split("=", 1)[1] for arg in command if arg.startswith(flag + "=")]
            if values and values[-1] != "off":
                wanted.append(name)
        return wanted

    def start(self) -> "DaemonProcess":
        """Starts the process and waits (bounded) until its port file names every listener."""
        if self.running:
            raise RuntimeError("the daemon is already running")
        try:
            self.port_file.unlink()
        except FileNotFoundError:
            pass
        command = self.command()
        wanted = self._wanted_ports()
        deadline = time.monotonic() + self.start_timeout
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== {' '.join(command)}\n".encode())
            log.flush()
            while True:
                try:
                    self.proc = subprocess.Popen(
                        command,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        preexec_fn=_die_with_parent,
                    )
                    break
                except OSError as error:
                    # ETXTBSY: `swift build` is relinking the binary right now; bounded retry.
                    if error.errno != errno.ETXTBSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        while True:
            if self.proc.poll() is not None:
                self.returncodes.append(self.proc.returncode)
                raise DaemonStartError(
                    f"todostreamd exited with status {self.proc.returncode} before it was listening\n"
                    f"command: {' '.join(command)}\n{self.log_tail()}"
                )
            try:
                ports = json.loads(self.port_file.read_text())
            except (FileNotFoundError, ValueError):
                ports = None
            if ports is not None and all(name in ports for name in wanted):
                self.ports = {name: int(port) for name, port in ports.items()}
                return self
            if time.monotonic() > deadline:
                self.kill()
                raise DaemonStartError(
                    f"todostreamd did not write {self.port_file} within {self.start_timeout} s\n{self.log_tail()}"
                )
            # Polling for a file the daemon writes once it listens; bounded by the deadline.
            time.sleep(0.02)

    def stop(self, timeout: float = 30.0, check: bool = True) -> int | None:
        """SIGTERM (a graceful drain), wait for the exit; with `check`, insist on status 0.
        Returns the exit status (None when nothing was running)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"todostreamd did not exit within {timeout} s of SIGTERM\n{self.log_tail()}")
            self.returncodes.append(self.proc.returncode)
            status = self.proc.returncode
        else:
            status = self.proc.returncode
        if check and status != 0:
            raise AssertionError(f"todostreamd exited with status {status} (expected 0)\n{self.log_tail()}")
        return status

    def kill(self) -> None:
        """SIGKILL (a crash): no drain, nothing flushed beyond what was durable."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            self.returncodes.append(self.proc.returncode)

    def signal(self, signum: int) -> None:
        if self.running:
            self.proc.send_signal(signum)

    def restart(self, same_ports: bool = True, retry_for: float = 15.0) -> "DaemonProcess":
        """Stops this process (SIGTERM) and starts a new one on the same data dir; by default
        on the same ports, retrying for a while if the old ones are not free yet."""
        self.stop()
        if not same_ports:
            self._pinned = {}
            return self.start()
        return self.start_again(retry_for)

    def start_again(self, retry_for: float = 15.0) -> "DaemonProcess":
        """Starts a stopped daemon again on the same data dir and the ports it had, retrying for
        a while if they are not free yet (for tests that do something while it is away)."""
        self._pinned = dict(self.ports)
        deadline = time.monotonic() + retry_for
        try:
            while True:
                try:
                    return self.start()
                except DaemonStartError as error:
                    busy = "in use" in str(error).lower() or "address already" in str(error).lower()
                    if not busy or time.monotonic() > deadline:
                        raise
                    # The old socket is not released yet; bounded retry.
                    time.sleep(0.2)
        finally:
            self._pinned = {}

    # -- diagnostics ------------------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = 8000) -> str:
        text = self.log_text()
        return "log (tail):\n" + (text[-chars:] if text else "(empty)")

    def __repr__(self) -> str:
        return f"<todostreamd pid={self.pid} ports={self.ports} data_dir={self.data_dir}>"


class DaemonStartError(AssertionError):
    pass


def _marker_args(request) -> list[str]:
    args: list[str] = []
    for marker in request.node.iter_markers("daemon_args"):
        args = [str(arg) for arg in marker.args] + args
    return args


@pytest.fixture
def daemon_factory(request, tmp_path_factory):
    """`daemon_factory(*args, data_dir=None)` starts another daemon; all are stopped after the
    test (and must exit 0 on SIGTERM)."""
    started: list[DaemonProcess] = []
    request.node._todostreamd_daemons = started

    def make(*args, data_dir=None, start=True) -> DaemonProcess:
        directory = Path(data_dir) if data_dir else tmp_path_factory.mktemp("todostreamd") / "data"
        daemon = DaemonProcess(directory, args)
        started.append(daemon)
        return daemon.start() if start else daemon

    yield make
    problems = []
    for daemon in started:
        try:
            daemon.stop(timeout=30.0, check=True)
        except AssertionError as error:
            problems.append(str(error))
        finally:
            daemon.kill()
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def daemon(daemon_factory, request):
    """A running daemon with a fresh data dir, plus any `@pytest.mark.daemon_args(...)` flags.
    Has .tcp_port, .http_port (.tls_port with a TLS listener), .data_dir, .restart(), .stop()."""
    return daemon_factory(*_marker_args(request))


def pytest_configure(config):
    config.addinivalue_line("markers", "daemon_args(*args): extra todostreamd flags for the `daemon` fixture")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for index, daemon in enumerate(getattr(item, "_todostreamd_daemons", [])):
            report.sections.append((f"todostreamd #{index} ({daemon.data_dir})", daemon.log_tail(12000)))
