"""Resume after a reconnect (docs/PROTOCOL.md §5, issue 4), against the real daemon over TCP (and one
case over WebSocket): replay of what was missed, `resumed`, then live events with nothing
missed or doubled — also while other clients keep writing, and across a daemon restart."""

import threading
import time

import pytest

from helpers import (
    LineClient,
    WSClient,
    create_todo,
    list_todos,
    next_id,
    toggle,
)


def bseqs(frames):
    return [f["seq"] for f in frames if "seq" in f and "op" not in f]


def strip_re(frame):
    return {k: v for k, v in frame.items() if k != "re"}


def resume_and_collect(c, epoch, after, rid=None):
    """Sends resume; returns (frames received before `resumed` that are broadcasts, resumed)."""
    rid = rid or next_id("resume")
    c.send({"op": "resume", "id": rid, "epoch": epoch, "after": after})
    before = []
    while True:
        f = c.recv(timeout=20)
        if f.get("re") == rid:
            return before, f
        before.append(f)


def test_resume_replays_what_was_missed_then_resumed_then_live(daemon):
    with LineClient(daemon.tcp_port, name="observer") as obs, LineClient(daemon.tcp_port, name="writer") as w:
        obs.ping()
        with LineClient(daemon.tcp_port, name="A") as a:
            epoch = a.hello["epoch"]
            _, b0 = create_todo(a, "resume base")
            last = b0["seq"]
        tid = b0["payload"]["todo"]["id"]
        missed = [toggle(w, {"id": tid}) for _ in range(3)]
        missed_seqs = [m["seq"] for m in missed]
        assert missed_seqs == [last + 1, last + 2, last + 3], missed_seqs
        for m in missed:
            obs.expect_seq(m["seq"])
        with LineClient(daemon.tcp_port, name="A-again") as a2:
            assert a2.hello["epoch"] == epoch
            replayed, resumed = resume_and_collect(a2, epoch, last, rid="r1")
            assert resumed.get("op") == "resumed", resumed
            assert resumed.get("from") == last + 1 and resumed.get("to") == last + 3, resumed
            assert bseqs(replayed) == missed_seqs, f"expected replay of {missed_seqs} before resumed, got {replayed}"
            for f in replayed:
                assert "re" not in f, f"replayed frames carry no re: {f}"
                first = next(o for o in obs.history if o.get("seq") == f["seq"] and "op" not in o)
                assert f == first, f"replayed frame differs from the original broadcast\n got {f}\nwant {first}"
            live = toggle(w, {"id": tid})
            got = a2.expect_seq(live["seq"])
            assert "re" not in got
            assert bseqs(a2.history) == missed_seqs + [live["seq"]], f"no seq missed or doubled: {bseqs(a2.history)}"


def test_resume_with_nothing_missed(daemon):
    with LineClient(daemon.tcp_port) as a:
        create_todo(a, "nothing missed")
    with LineClient(daemon.tcp_port) as a2:
        after = a2.hello["seq"]
        replayed, resumed = resume_and_collect(a2, a2.hello["epoch"], after)
        assert resumed.get("op") == "resumed", resumed
        assert (resumed.get("from"), resumed.get("to")) == (after + 1, after), f"from must be after+1 and to after: {resumed}"
        assert bseqs(replayed) == [], replayed
        a2.ping()


def test_resume_with_a_foreign_epoch_is_gap(daemon):
    with LineClient(daemon.tcp_port) as a:
        _, b = create_todo(a, "gap")
    with LineClient(daemon.tcp_port) as c:
        replayed, gap = resume_and_collect(c, "0123456789abcdef-not-this-epoch", 0, rid=7)
        assert gap.get("op") == "gap", gap
        assert gap.get("re") == 7 and gap.get("epoch") == c.hello["epoch"] and gap.get("seq") == b["seq"], gap
        assert bseqs(replayed) == [], replayed
        # the client refetches
        assert b["payload"]["todo"]["id"] in [t["todo"]["id"] for t in list_todos(c)]
        c.ping()


def test_resume_replays_only_what_matches_the_subscriptions(daemon):
    with LineClient(daemon.tcp_port) as a:
        epoch, after = a.hello["epoch"], a.hello["seq"]
        _, b = create_todo(a, "filtered")
        toggle(a, {"id": b["payload"]["todo"]["id"]})
    with LineClient(daemon.tcp_port) as c:
        r = c.request({"op": "unsubscribe", "types": ["Response*"]})
        assert r["types"] == [], r
        replayed, resumed = resume_and_collect(c, epoch, after)
        assert resumed.get("op") == "resumed", resumed
        assert bseqs(replayed) == [], f"a client subscribed to nothing gets nothing replayed: {replayed}"


def test_resume_skips_what_the_connection_already_received_live(daemon):
    with LineClient(daemon.tcp_port, name="writer") as w:
        _, b = create_todo(w, "late resume")
        tid = b["payload"]["todo"]["id"]
        after = b["seq"]
        m1, m2 = toggle(w, {"id": tid}), toggle(w, {"id": tid})
        with LineClient(daemon.tcp_port, name="late") as c:
            c.ping()  # live from now on
            m3 = toggle(w, {"id": tid})
            c.expect_seq(m3["seq"])
            replayed, resumed = resume_and_collect(c, c.hello["epoch"], after)
            assert resumed.get("op") == "resumed" and resumed.get("from") == after + 1, resumed
            assert resumed.get("to") == m3["seq"], f"to is the newest seq the client now has: {resumed}"
            m4 = toggle(w, {"id": tid})
            c.expect_seq(m4["seq"])
            got = bseqs(c.history)
            assert sorted(got) == [m1["seq"], m2["seq"], m3["seq"], m4["seq"]] and len(set(got)) == len(got), (
                f"each seq exactly once on this connection: {got}"
            )


def test_resume_across_a_daemon_restart_keeps_the_epoch(daemon_factory):
    d = daemon_factory()
    with LineClient(d.tcp_port, name="A") as a:
        epoch = a.hello["epoch"]
        _, b = create_todo(a, "survives restart")
        after = b["seq"]
    with LineClient(d.tcp_port, name="writer") as w:
        tid = b["payload"]["todo"]["id"]
        missed = [toggle(w, {"id": tid}) for _ in range(2)]
    d.restart()
    with LineClient(d.tcp_port, name="A-after-restart") as a2:
        assert a2.hello["epoch"] == epoch, f"the epoch must survive a restart: {epoch} → {a2.hello['epoch']}"
        assert a2.hello["seq"] == missed[-1]["seq"], a2.hello
        replayed, resumed = resume_and_collect(a2, epoch, after)
        assert resumed.get("op") == "resumed", resumed
        assert (resumed.get("from"), resumed.get("to")) == (after + 1, missed[-1]["seq"]), resumed
        assert [strip_re(m) for m in missed] == replayed, f"replayed exactly as first broadcast:\n got {replayed}\nwant {missed}"
        with LineClient(d.tcp_port, name="writer2") as w2:
            t = toggle(w2, {"id": tid})
        assert t["seq"] == missed[-1]["seq"] + 1, "seq continues after a restart"
        a2.expect_seq(t["seq"])
        assert t["payload"]["todo"]["version"] == missed[-1]["payload"]["todo"]["version"] + 1


def test_acknowledged_writes_and_their_broadcasts_survive_kill_9(daemon_factory):
    """§6: a write is durable before any response about it is sent; §5: its broadcast is in the
    journal with it. SIGKILL right after the last answer, then start again on the same data."""
    d = daemon_factory()
    with LineClient(d.tcp_port, name="A") as a:
        epoch, start = a.hello["epoch"], a.hello["seq"]
        made = [create_todo(a, f"durable {i}")[1] for i in range(3)]
        flipped = toggle(a, {"id": made[0]["payload"]["todo"]["id"]})
        gone = a.request({"type": "RequestDeleteTodoViewModel", "payload": {"todo": {"id": made[1]["payload"]["todo"]["id"]}}})
        assert "seq" in gone, gone
        d.kill()
    d.start()
    with LineClient(d.tcp_port, name="after-kill") as c:
        assert c.hello["epoch"] == epoch and c.hello["seq"] == gone["seq"], c.hello
        listed = {t["todo"]["id"]: t for t in list_todos(c)}
        assert made[0]["payload"]["todo"]["id"] in listed and listed[made[0]["payload"]["todo"]["id"]]["complete"] is True
        assert made[2]["payload"]["todo"]["id"] in listed
        assert made[1]["payload"]["todo"]["id"] not in listed, "the acknowledged delete survived"
        replayed, resumed = resume_and_collect(c, epoch, start)
        assert resumed.get("op") == "resumed", resumed
        assert bseqs(replayed) == list(range(start + 1, gone["seq"] + 1)), replayed
        assert replayed[-1] == strip_re(gone) and replayed[-2] == strip_re(flipped)


def test_resume_while_others_keep_writing_misses_and_doubles_nothing(daemon_factory):
    """Two writers pipeline 1,500 toggles each; a reader disconnects and resumes three times in
    the middle. Over the whole run it must see every seq exactly once, in order."""
    d = daemon_factory("--rate-limit", "1000000")
    per_writer, window = 1500, 16
    failures: list = []
    finals: list = []

    def writer(name):
        try:
            with LineClient(d.tcp_port, name=name) as c:
                c.request({"op": "unsubscribe", "types": ["Response*"]})
                _, b = create_todo(c, f"todo of {name}")
                tid = b["payload"]["todo"]["id"]
                sent = done = 0
                last = b["seq"]
                while done < per_writer:
                    while sent < per_writer and sent - done < window:
                        c.send({"type": "RequestToggleCompleteTodoViewModel", "id": f"{name}-{sent}", "payload": {"todo": {"id": tid}}})
                        sent += 1
                    f = c.recv(timeout=30)
                    if f.get("error"):
                        failures.append(f)
                        return
                    # Broadcasts that reached it before its unsubscribe took effect (held since
                    # the greeting, or read while waiting for an answer) are not its own copies.
                    if "seq" in f and str(f.get("re", "")).startswith(f"{name}-"):
                        assert f["seq"] > last, f"{name} got seq {f['seq']} after {last}: {f}"
                        last = f["seq"]
                        done += 1
                finals.append(last)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(repr(e)[:500])

    with LineClient(d.tcp_port, name="reader") as first:
        epoch = first.hello["epoch"]
        start = first.hello["seq"]
        first.ping()
        threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in ("w1", "w2")]
        for t in threads:
            t.start()
        seen = []

        def next_frame(reader):
            # A writer that failed stops the broadcasts: report its failure, not the silence.
            deadline = time.monotonic() + 30
            while True:
                assert not failures, failures[:3]
                try:
                    return reader.recv(timeout=1)
                except TimeoutError:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{reader.name}: nothing for 30 s after seq {seen[-1:]}") from None

        reader = first
        for cut in (300, 1200, 2200):
            while not seen or seen[-1] < start + cut:
                f = next_frame(reader)
                if "seq" in f and "op" not in f:
                    seen.append(f["seq"])
            reader.close()
            reader = LineClient(d.tcp_port, name=f"reader-after-{cut}")
            rid = next_id("resume")
            reader.send({"op": "resume", "id": rid, "epoch": epoch, "after": seen[-1]})
            resumed = None
            while resumed is None:
                f = next_frame(reader)
                if f.get("re") == rid:
                    resumed = f
                elif "seq" in f and "op" not in f:
                    seen.append(f["seq"])
            assert resumed.get("op") == "resumed", f"resume during writes answered {resumed}"
        for t in threads:
            t.join(timeout=120)
        assert not failures, failures[:3]
        final = max(finals)
        assert final == start + 2 + 2 * per_writer, (final, start)
        while seen[-1] < final:
            f = reader.recv(timeout=30)
            if "seq" in f and "op" not in f:
                seen.append(f["seq"])
        reader.close()
    expected = list(range(start + 1, final + 1))
    if seen != expected:
        dups = sorted({s for s in seen if seen.count(s) > 1})[:10]
        missing = sorted(set(expected) - set(seen))[:10]
        disorder = next((i for i in range(1, len(seen)) if seen[i] <= seen[i - 1]), None)
        pytest.fail(f"across 3 resumes: {len(seen)} seqs seen, {len(expected)} expected; duplicates {dups}; missing {missing}; "
                    f"first out-of-order at index {disorder}")


def test_resume_over_websocket(daemon):
    with LineClient(daemon.tcp_port, name="tcp-writer") as w:
        with WSClient(daemon.http_port, name="ws") as c:
            epoch = c.hello["epoch"]
            _, b = create_todo(c, "ws resume")
            after = b["seq"]
        missed = toggle(w, {"id": b["payload"]["todo"]["id"]})
        with WSClient(daemon.http_port, name="ws-again") as c2:
            replayed, resumed = resume_and_collect(c2, epoch, after)
            assert resumed.get("op") == "resumed" and (resumed["from"], resumed["to"]) == (after + 1, missed["seq"]), resumed
            assert replayed == [strip_re(missed)], replayed
