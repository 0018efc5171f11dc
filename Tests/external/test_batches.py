"""The batch write path under pipelining and a crash: several clients pipeline hundreds of saves
each while the daemon is killed with SIGKILL; after a restart on the same data every save that
was acknowledged is there, and the journal holds one gapless order through it."""

import json
import socket
import threading
import time

from helpers import LineClient, create_todo, list_todos


def test_no_acknowledged_write_is_lost_when_the_daemon_is_killed_mid_run(daemon_factory):
    d = daemon_factory()  # SQLite, synchronous=full
    clients, saves_each = 6, 400
    todos = []
    with LineClient(d.tcp_port, name="setup") as setup:
        epoch = setup.hello["epoch"]
        for k in range(clients):
            _, broadcast = create_todo(setup, f"c{k}-start")
            todos.append(broadcast["payload"]["todo"]["id"])
    acked = [dict(index=-1, version=0, seq=0) for _ in range(clients)]
    started = threading.Event()

    def run(k: int) -> None:
        sock = socket.create_connection(("127.0.0.1", d.tcp_port), timeout=30)
        with sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            stream = sock.makefile("rb")
            stream.readline()  # hello
            sock.sendall(json.dumps({"op": "unsubscribe", "id": "u", "types": ["Response*"]}).encode() + b"\n")
            burst = b"".join(
                json.dumps(
                    {
                        "type": "RequestUpdateDetailViewModel",
                        "id": f"{k}-{i}",
                        "payload": {"todo": {"id": todos[k]}, "title": f"c{k}-{i}", "subtitle": "x" * 400},
                    }
                ).encode()
                + b"\n"
                for i in range(saves_each)
            )
            sending = threading.Thread(target=lambda: _send_quietly(sock, burst), daemon=True)
            sending.start()
            started.set()
            last = -1
            try:
                for line in stream:
                    frame = json.loads(line)
                    if frame.get("type") != "ResponseUpdateDetailViewModel":
                        continue
                    assert "error" not in frame, frame
                    index = int(frame["re"].split("-")[1])
                    assert index == last + 1, f"client {k}: answer {index} after {last}"
                    last = index
                    acked[k] = dict(index=index, version=frame["payload"]["todo"]["version"], seq=0)
            except (ConnectionError, OSError, ValueError):
                pass  # the daemon was killed; a torn last line is not an acknowledgement

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    started.wait(10)
    # Kill once a good part of the saves is acknowledged, while the rest are in flight.
    deadline = time.time() + 30
    while time.time() < deadline and sum(a["index"] + 1 for a in acked) < clients * saves_each // 3:
        time.sleep(0.005)
    d.kill()
    for t in threads:
        t.join(timeout=30)
    total_acked = sum(a["index"] + 1 for a in acked)
    assert total_acked > 0, "nothing was acknowledged before the kill"
    assert total_acked < clients * saves_each, "the kill came after everything was answered; the test proves nothing"

    d.start()
    with LineClient(d.tcp_port, name="after") as c:
        assert c.hello["epoch"] == epoch
        stored = {t["todo"]["id"]: t["todo"] for t in list_todos(c)}
        for k in range(clients):
            todo = stored[todos[k]]
            # Version 1 is the creation; save i made version i + 2.
            assert todo["version"] >= acked[k]["version"], f"client {k}: acknowledged save lost ({todo}, {acked[k]})"
            # A client none of whose saves committed before the kill still has its creation.
            expected = f"c{k}-start" if todo["version"] == 1 else f"c{k}-{todo['version'] - 2}"
            assert todo["title"] == expected, todo
        head = c.hello["seq"]
        assert head == clients + sum(stored[todos[k]]["version"] - 1 for k in range(clients)), "seqs are gapless"
        # The journal replays one gapless order through the head.
        c.send({"op": "resume", "id": "r", "epoch": epoch, "after": 0})
        seqs = []
        while True:
            f = c.recv(timeout=30)
            if f.get("re") == "r":
                assert f.get("op") == "resumed", f
                break
            seqs.append(f["seq"])
        assert seqs == list(range(1, head + 1))


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass
