"""The project's load tool (`todostream-load`) against the real daemon, over TCP and over
WebSocket, with and without TLS: the benchmarks' figures are only as good as its clients. Each scenario must finish
with answers, no failures, no gaps and no errors on either transport (its WebSocket client reads
frames itself; a framing mistake shows up here as errors, gaps or nothing delivered).

The binary is $TODOSTREAM_LOAD, else <repo>/.build/debug/todostream-load; a missing binary FAILS.
The peers' pings run against real redis-server and nats-server (Debian's packages, installed by
scripts/install-test-tools); a missing server FAILS.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from conftest import REPO
from helpers import LineClient, free_port, list_todos


def load_binary() -> str:
    path = os.environ.get("TODOSTREAM_LOAD") or str(REPO / ".build" / "debug" / "todostream-load")
    if not os.access(path, os.X_OK):
        pytest.fail(f"the load tool {path} is missing: run `swift build` first (or set TODOSTREAM_LOAD)", pytrace=False)
    return path


def run_load(*args: str) -> dict:
    done = subprocess.run([load_binary(), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def port_for(daemon, transport: str) -> int:
    return daemon.http_port if transport == "ws" else daemon.tcp_port


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_mixed_requests_are_all_answered(daemon, transport):
    result = run_load(
        "request", "--target", "todostreamd", "--transport", transport, "--port", str(port_for(daemon, transport)),
        "--clients", "4", "--duration", "1", "--publish", "mixed",
    )
    assert result["transport"] == transport
    assert result["requests"] > 0, result
    assert result["failed"] == 0 and result["errors"] == {} and result["closed_by_server"] == 0, result
    # Every kind of request of the mix was sent and answered.
    assert all(kind["requests"] > 0 for kind in result["by_kind"].values()), result["by_kind"]


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_fanout_delivers_every_edit_to_every_subscriber_in_order(daemon, transport):
    result = run_load(
        "fanout", "--target", "todostreamd", "--transport", transport, "--port", str(port_for(daemon, transport)),
        "--subscribers", "20", "--duration", "1", "--publish", "edit", "--rate", "100",
    )
    assert result["published"] > 0, result
    assert result["delivered"] > 0 and result["latency_samples"] > 0, result
    for field in ("undelivered", "gaps", "duplicates", "unmatched", "seq_mismatches", "closed_by_server"):
        assert result[field] == 0, (field, result)
    assert result["errors"] == {} and result["setup_failures"] == {}, result


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_requests_about_several_todos_per_client_reach_each_of_them(daemon, transport):
    result = run_load(
        "request", "--target", "todostreamd", "--transport", transport, "--port", str(port_for(daemon, transport)),
        "--clients", "3", "--todos-per-client", "7", "--duration", "1", "--publish", "edit",
    )
    assert result["todos_per_client"] == 7, result
    assert result["requests"] > 3 * 7, result
    assert result["failed"] == 0 and result["errors"] == {} and result["closed_by_server"] == 0, result
    # Every todo the clients created was saved again by the run (its subtitle is no longer
    # the creation's empty one).
    with LineClient(daemon.tcp_port) as client:
        todos = [row for row in list_todos(client) if row["todo"].get("title") == "t"]
    assert len(todos) == 3 * 7, todos


TLS_ARGS = ("--tls-listen", "127.0.0.1:0", "--dev-tls", "--http-tls", "--rate-limit", "1000000")


def tls_port_for(daemon, transport: str) -> int:
    return daemon.http_port if transport == "wss" else daemon.tls_port


@pytest.mark.daemon_args(*TLS_ARGS)
@pytest.mark.parametrize("transport", ["tls", "wss"])
def test_saves_and_a_fanout_over_tls_are_all_answered_in_order(daemon, transport):
    """The TLS transports, with the daemon's certificate checked against its dev CA."""
    ca = str(daemon.data_dir / "dev-tls" / "cert.pem")
    port = str(tls_port_for(daemon, transport))
    saves = run_load(
        "request", "--target", "todostreamd", "--transport", transport, "--port", port, "--tls-ca", ca,
        "--clients", "4", "--duration", "1", "--publish", "edit",
    )
    assert saves["transport"] == transport
    assert saves["requests"] > 0 and saves["latency_samples"] > 0, saves
    assert saves["failed"] == 0 and saves["errors"] == {} and saves["closed_by_server"] == 0, saves
    fanout = run_load(
        "fanout", "--target", "todostreamd", "--transport", transport, "--port", port, "--tls-ca", ca,
        "--subscribers", "20", "--duration", "1", "--publish", "edit", "--rate", "100",
    )
    assert fanout["published"] > 0 and fanout["delivered"] > 0, fanout
    for field in ("undelivered", "gaps", "duplicates", "unmatched", "seq_mismatches", "closed_by_server"):
        assert fanout[field] == 0, (field, fanout)
    assert fanout["errors"] == {} and fanout["setup_failures"] == {}, fanout


@pytest.mark.daemon_args(*TLS_ARGS)
def test_a_certificate_not_trusted_fails_the_run(daemon, tmp_path):
    other = tmp_path / "other.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
         "-subj", "/CN=other", "-keyout", str(tmp_path / "other.key"), "-out", str(other)],
        check=True, capture_output=True, timeout=60,
    )
    done = subprocess.run(
        [load_binary(), "request", "--target", "todostreamd", "--transport", "tls", "--port", str(daemon.tls_port),
         "--tls-ca", str(other), "--clients", "2", "--duration", "1"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in done.stderr, done.stderr[-2000:]


def test_a_trusted_certificate_file_needs_a_tls_transport():
    done = subprocess.run(
        [load_binary(), "request", "--target", "todostreamd", "--port", "1", "--tls-ca", "/dev/null"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "--tls-ca applies to --transport tls and wss only" in done.stderr, done.stderr


def test_several_todos_per_client_apply_to_todostreamd_only():
    done = subprocess.run(
        [load_binary(), "request", "--target", "redis", "--port", "1", "--todos-per-client", "2"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "--todos-per-client applies to todostreamd only" in done.stderr, done.stderr


@pytest.mark.daemon_args("--rate-limit", "1000000")
@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_pings_are_each_answered_by_their_pong_and_commit_nothing(daemon, transport):
    with LineClient(daemon.tcp_port) as client:
        before = len(list_todos(client))
    result = run_load(
        "request", "--target", "todostreamd", "--transport", transport, "--port", str(port_for(daemon, transport)),
        "--clients", "3", "--duration", "1", "--publish", "ping",
    )
    assert result["publish"] == "ping", result
    assert result["requests"] > 0 and result["latency_samples"] > 0, result
    assert result["failed"] == 0 and result["errors"] == {} and result["closed_by_server"] == 0, result
    # Only the clients' setup saved anything (one todo each): a ping is no write.
    with LineClient(daemon.tcp_port) as client:
        assert len(list_todos(client)) == before + 3


def test_the_servers_cpu_is_reported_with_its_user_and_kernel_parts(daemon):
    result = run_load(
        "request", "--target", "todostreamd", "--port", str(daemon.tcp_port), "--pid", str(daemon.pid),
        "--clients", "4", "--duration", "1", "--publish", "edit",
    )
    assert result["requests"] > 0 and result["failed"] == 0, result
    total = result["server_cpu_us_per_request"]
    user = result["server_cpu_user_us_per_request"]
    kernel = result["server_cpu_system_us_per_request"]
    # The daemon parses and answers in user space and writes through the kernel: both parts are
    # spent, and they are the whole (each rounded to 0.1 µs).
    assert user > 0 and kernel > 0, result
    assert abs(user + kernel - total) <= 0.11, result


def test_pings_apply_to_requests_only():
    done = subprocess.run(
        [load_binary(), "fanout", "--target", "todostreamd", "--port", "1", "--publish", "ping"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "--publish ping applies to request only" in done.stderr, done.stderr


def _start_peer(server: str, tmp_path, tls: tuple[str, str] | None = None) -> tuple[subprocess.Popen, int]:
    binary = shutil.which("redis-server" if server == "redis" else "nats-server")
    if binary is None:
        pytest.fail(f"{server}-server is not installed: run scripts/install-test-tools", pytrace=False)
    port = free_port()
    if server == "redis":
        # The load tool connects from 127.0.0.2 onwards, which protected mode refuses.
        listen = ["--port", str(port)]
        if tls:
            cert, key = tls
            listen = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", cert, "--tls-key-file", key,
                      "--tls-ca-cert-file", cert, "--tls-auth-clients", "no"]
        command = [binary, *listen, "--bind", "127.0.0.1", "--protected-mode", "no", "--dir", str(tmp_path),
                   "--save", ""]
    else:
        command = [binary, "-a", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"{server}-server did not start on port {port}", pytrace=False)
            time.sleep(0.05)


@pytest.mark.parametrize("server", ["redis", "nats"])
def test_the_peers_answer_their_own_pings(server, tmp_path):
    process, port = _start_peer(server, tmp_path)
    try:
        result = run_load(
            "request", "--target", server, "--port", str(port), "--pid", str(process.pid),
            "--clients", "3", "--duration", "1", "--publish", "ping",
        )
    finally:
        process.kill()
        process.wait()
    assert result["publish"] == "ping", result
    assert result["requests"] > 0 and result["latency_samples"] > 0, result
    assert result["failed"] == 0 and result["errors"] == {}, result


def test_a_durable_ping_is_refused():
    done = subprocess.run(
        [load_binary(), "request", "--target", "redis", "--port", "1", "--durable", "--publish", "ping"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "--durable and --publish ping exclude each other" in done.stderr, done.stderr


def test_redis_over_tls_answers_the_load_tool(tmp_path):
    """The TLS peer of the daemon's TLS listener: redis-server's --tls-port (Debian's build has TLS)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    process, port = _start_peer("redis", tmp_path, tls=(str(cert), str(key)))
    try:
        result = run_load(
            "request", "--target", "redis", "--transport", "tls", "--tls-ca", str(cert), "--port", str(port),
            "--pid", str(process.pid), "--clients", "3", "--duration", "1", "--durable",
        )
    finally:
        process.kill()
        process.wait()
    assert result["transport"] == "tls", result
    assert result["requests"] > 0 and result["latency_samples"] > 0, result
    assert result["failed"] == 0 and result["errors"] == {}, result


@pytest.mark.parametrize("transport", ["ws", "wss"])
def test_websocket_transports_apply_to_todostreamd_only(transport):
    done = subprocess.run(
        [load_binary(), "request", "--target", "redis", "--port", "1", "--transport", transport],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and f"--transport {transport} applies to todostreamd only" in done.stderr, done.stderr


def test_tls_applies_to_todostreamd_and_redis_only():
    done = subprocess.run(
        [load_binary(), "request", "--target", "nats", "--port", "1", "--transport", "tls"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "--transport tls applies to todostreamd and redis only" in done.stderr, done.stderr


def run_load_status(*args: str, timeout: int = 120) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Runs the load tool whatever its exit status: the run and its JSON result (None without one)."""
    done = subprocess.run([load_binary(), *args], capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    return done, (json.loads(lines[-1]) if lines else None)


@pytest.mark.parametrize(
    ("scenario", "target", "transport", "listener"),
    [
        ("request", "todostreamd", "ws", "tcp"),  # WebSocket to the NDJSON listener
        ("request", "todostreamd", "tcp", "http"),  # NDJSON to the HTTP listener
        ("request", "nats", "tcp", "tcp"),  # NATS to the NDJSON listener
        ("fanout", "todostreamd", "ws", "tcp"),
    ],
)
def test_a_port_speaking_another_protocol_fails_the_setup_in_time(daemon, scenario, target, transport, listener):
    port = daemon.tcp_port if listener == "tcp" else daemon.http_port
    count = ("--clients", "300") if scenario == "request" else ("--subscribers", "300")
    started = time.monotonic()
    done, result = run_load_status(
        scenario, "--target", target, "--transport", transport, "--port", str(port), "--setup-timeout", "1",
        *count, "--duration", "1", "--warmup", "0", timeout=60,
    )
    # One setup timeout (the clients set up together, and a batch of which none came up ends
    # the setup), not one per client.
    assert time.monotonic() - started < 20, done.stderr[-2000:]
    assert done.returncode == 1 and result is None, (done.returncode, done.stdout, done.stderr[-2000:])
    assert re.search(r"(no client|the publisher) could (not )?be set up", done.stderr), done.stderr[-2000:]
    assert "setup timed out after 1.0 s" in done.stderr or "closed during setup" in done.stderr, done.stderr[-2000:]


def test_the_setup_timeout_must_be_positive():
    done = subprocess.run(
        [load_binary(), "request", "--target", "todostreamd", "--port", "1", "--setup-timeout", "0"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 64 and "--setup-timeout must be" in done.stderr, done.stderr


def a_pid_that_has_exited() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_pid_of_no_process_is_refused():
    pid = a_pid_that_has_exited()
    done = subprocess.run(
        [load_binary(), "idle", "--target", "todostreamd", "--port", "1", "--pid", str(pid)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 64 and f"--pid {pid}: there is no such process" in done.stderr, done.stderr


def test_a_pid_not_listening_on_the_port_is_warned_about(daemon):
    # This test's own process listens on no port of the daemon's.
    done, result = run_load_status(
        "request", "--target", "todostreamd", "--port", str(daemon.tcp_port), "--pid", str(os.getpid()),
        "--clients", "1", "--duration", "0.2", "--warmup", "0",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"process {os.getpid()} (--pid) has no socket listening on port {daemon.tcp_port}" in done.stderr
    done, result = run_load_status(
        "request", "--target", "todostreamd", "--port", str(daemon.tcp_port), "--pid", str(daemon.pid),
        "--clients", "1", "--duration", "0.2", "--warmup", "0",
    )
    assert done.returncode == 0 and "no socket listening" not in done.stderr, done.stderr[-2000:]


@pytest.mark.daemon_args("--rate-limit", "1000000")
def test_an_rss_the_tool_could_not_read_is_unknown_not_zero(daemon):
    import resource

    def few_descriptors():
        resource.setrlimit(resource.RLIMIT_NOFILE, (150, 150))

    # Out of descriptors, the tool can open neither more connections nor /proc/PID/status.
    done = subprocess.run(
        [load_binary(), "idle", "--target", "todostreamd", "--port", str(daemon.tcp_port), "--pid", str(daemon.pid),
         "--connections", "400", "--batch", "400", "--settle", "0"],
        capture_output=True, text=True, timeout=120, preexec_fn=few_descriptors,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rss_after_kib"] is None and result["rss_per_connection_bytes"] is None, result
    assert "could not read the RSS" in done.stderr and "unknown" in done.stderr, done.stderr[-2000:]
    assert done.returncode == 2, done.stderr[-2000:]


def test_latencies_without_samples_are_null_and_nothing_measured_fails(daemon):
    # One publish every 10 s: the first goes out before the window, none within it.
    done, result = run_load_status(
        "fanout", "--target", "todostreamd", "--port", str(daemon.tcp_port), "--subscribers", "2",
        "--rate", "0.1", "--duration", "1", "--warmup", "0.5", "--drain", "0",
    )
    assert result is not None and result["latency_samples"] == 0, done.stderr[-2000:]
    for field in ("p50_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms"):
        assert result[field] is None, (field, result)
    assert "no latency samples" in done.stderr and "no loss, no errors" not in done.stderr, done.stderr
    assert done.returncode == 2 and "nothing was measured" in done.stderr, done.stderr[-2000:]


def test_requests_are_those_sent_in_the_window_and_answered(daemon):
    result = run_load(
        "request", "--target", "todostreamd", "--port", str(daemon.tcp_port), "--clients", "4", "--duration", "1",
        "--publish", "ping",
    )
    assert result["requests"] > 0 and result["requests"] == result["latency_samples"], result
    assert abs(result["requests_per_s"] - result["requests"] / result["duration_s"]) <= 0.01 * result["requests"] + 1


def test_the_help_names_the_exit_statuses():
    for scenario in ("request", "fanout", "idle", "slow"):
        done = subprocess.run([load_binary(), scenario, "--help"], capture_output=True, text=True, timeout=60)
        assert "Exit status: 0 when the run measured something" in " ".join(done.stdout.split()), done.stdout


def test_summarize_keeps_every_run_of_a_configuration(tmp_path):
    base = {"scenario": "request", "target": "todostreamd", "transport": "tcp", "clients": 4, "publish": "toggle",
            "p50_ms": 0.1, "p99_ms": 0.2, "p999_ms": 0.3, "errors": {}, "setup_failures": {}}
    rows = [
        {**base, "requests_per_s": 1000},
        {**base, "requests_per_s": 10, "errors": {"io: reset": 3}},
        {**base, "target": "nats", "requests_per_s": 500},
        {**base, "target": "redis", "transport": "tls", "requests_per_s": 400},
    ]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    markdown, document = tmp_path / "results.md", tmp_path / "results.json"
    done = subprocess.run(
        [load_binary(), "summarize", "--results", str(results), "--markdown", str(markdown), "--json", str(document)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    table = [line for line in markdown.read_text().splitlines() if line.startswith("| 4")]
    assert len(table) == 4, table
    assert any("1,000" in line for line in table) and any("io: reset ×3" in line for line in table), table
    assert any("redis (tls)" in line for line in table), table
