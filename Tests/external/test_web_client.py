"""The page's client module (Sources/TodoWeb/web/todostream.js) in headless Chromium: writes
made while the daemon is away wait in the outbox, are shown at once as pending, and are applied
exactly once when it is back; a write the daemon refuses (`conflict`, `validation_failed`) is
rolled back on the page with the daemon's message; and the module on its own (a write whose
connection breaks is applied once, a retry of its `mid` is a duplicate, the outbox is bounded,
ninety toggles with ten in flight survive a SIGKILL of the daemon, each applied exactly once).

The daemon is taken away for real (SIGTERM, `draining`) and started again on the data dir and
ports it had (`DaemonProcess.start_again`), so the pages reconnect to it by themselves. The final
state is checked from a separate NDJSON client over TCP. Same fixtures and rules as test_web.py:
Chromium, chromedriver or Selenium missing FAILS the tests; every wait polls with a deadline.
"""

from __future__ import annotations

import time

try:
    from selenium.webdriver.common.by import By
except ImportError:  # the `browsers` fixture reports it as a failure
    By = None

from test_web import RESTART_WAIT, WAIT, TCPClient, browsers, pages, tcp  # noqa: F401  (fixtures)

CLIENT_STATE_JS = """
const c = document.querySelector('[data-testid="connection"]');
return {state: c.dataset.state, text: c.querySelector('.connection-text').textContent,
        outbox: c.dataset.outbox, sync: c.dataset.sync};
"""

PENDING_JS = """
return [...document.querySelectorAll('.todo-list > li[data-testid="todo"]')].filter(li => li.classList.contains('pending'))
  .map(li => {
    const marker = li.querySelector('[data-testid="todo-pending"]');
    return {title: li.querySelector('.title').textContent, kind: li.dataset.pending,
            marker: marker && !marker.hidden && marker.getBoundingClientRect().width > 0 ? marker.textContent : null};
  });
"""

NOTICES_JS = """
return [...document.querySelectorAll('[data-testid="notice"]')].map(n => ({code: n.dataset.code || null,
  kind: n.dataset.kind, text: n.querySelector('span').textContent}));
"""


def client_state(page) -> dict:
    return page.driver.execute_script(CLIENT_STATE_JS)


def pending(page) -> list[dict]:
    return page.driver.execute_script(PENDING_JS)


def wait_offline(page):
    page.until(lambda p: client_state(p)["state"] == "offline", "the page to say it is offline", RESTART_WAIT)


def wait_waiting(page, count: int):
    text = f"Offline — {count} {'edit' if count == 1 else 'edits'} waiting"
    page.until(
        lambda p: client_state(p)["outbox"] == str(count) and client_state(p)["text"].startswith(text),
        f"the connection indicator to say {text!r}",
    )


def wait_settled(page):
    page.until(
        lambda p: client_state(p)["state"] == "online" and client_state(p)["outbox"] == "0" and not pending(p),
        "the page to be live with nothing pending",
        RESTART_WAIT,
    )


def click(page, title: str, selector: str):
    page.li(title).find_element(By.CSS_SELECTOR, selector).click()


def test_edits_in_two_tabs_while_the_daemon_is_away_converge(pages, tcp, daemon):
    a, b = pages
    milk = tcp.create("Buy milk")["todo"]["id"]
    dog = tcp.create("Walk the dog")["todo"]["id"]
    mum = tcp.create("Call mum")["todo"]["id"]
    for page in pages:
        page.wait_titles(["Call mum", "Walk the dog", "Buy milk"])
    tcp.close()

    daemon.stop()  # SIGTERM: the pages get `draining`, then find nobody there
    for page in pages:
        wait_offline(page)

    # Tab A: a toggle and a new todo; tab B: a delete and a toggle. Each shows at once, pending.
    a.toggle("Buy milk", completed=True)
    a.create("Written while offline")
    click(b, "Walk the dog", ".destroy")
    b.toggle("Call mum", completed=True)
    wait_waiting(a, 2)
    wait_waiting(b, 2)
    a.until(
        lambda p: sorted((row["title"], row["kind"]) for row in pending(p))
        == [("Buy milk", "toggle"), ("Written while offline", "create")],
        "A's two edits to be shown as pending",
    )
    b.until(
        lambda p: sorted((row["title"], row["kind"]) for row in pending(p))
        == [("Call mum", "toggle"), ("Walk the dog", "delete")],
        "B's two edits to be shown as pending",
    )
    for page in pages:
        assert all(row["marker"] and row["marker"].startswith("Pending") for row in pending(page)), pending(page)
    # A row waiting to be deleted cannot be toggled: the toggle would apply to the deleted todo.
    assert not b.li("Walk the dog").find_element(By.CSS_SELECTOR, ".toggle").is_enabled()
    # Neither tab sees the other's edits yet.
    assert a.item("Call mum")["completed"] is False and a.item("Walk the dog") is not None
    assert b.item("Buy milk")["completed"] is False and b.item("Written while offline") is None

    daemon.start_again()
    expected = ["Written while offline", "Call mum", "Buy milk"]
    for page in pages:
        page.wait_titles(expected, RESTART_WAIT)
        wait_settled(page)
        page.wait_item("Buy milk", completed=True, checked=True)
        page.wait_item("Call mum", completed=True, checked=True)
        page.wait_item("Written while offline", completed=False)
        assert client_state(page)["sync"] == "resumed", client_state(page)

    # The daemon's list, from a client that was not involved: each edit applied exactly once.
    with TCPClient(daemon.tcp_port) as check:
        todos = {todo["todo"]["id"]: todo for todo in check.todos()}
        by_title = {todo["title"]: todo for todo in todos.values()}
        assert [todo["title"] for todo in check.todos()] == expected
        assert todos[milk]["complete"] is True and todos[milk]["todo"]["version"] == 2, todos[milk]
        assert todos[mum]["complete"] is True and todos[mum]["todo"]["version"] == 2, todos[mum]
        assert by_title["Written while offline"]["todo"]["version"] == 1
        gone = check.detail(dog)
        assert gone["deleted"] is True and gone["todo"]["version"] == 2, gone
        # The pages show the daemon's own view models.
        for page in pages:
            assert {item["id"] for item in page.items()} == set(todos)


def test_a_conflicting_offline_save_is_rolled_back_with_the_daemons_message(pages, tcp, daemon):
    a, b = pages
    todo_id = tcp.create("Shared todo")["todo"]["id"]
    for page in pages:
        page.wait_titles(["Shared todo"])
    tcp.close()
    # Both tabs open the editor while live, then lose the daemon and save different titles.
    for page in pages:
        page.open_editor("Shared todo")
    daemon.stop()
    for page, title in ((a, "Title from A"), (b, "Title from B")):
        wait_offline(page)
        field = page.find('[data-testid="detail-title"]')
        field.clear()
        field.send_keys(title)
        if page is a:
            page.find('input[name="priority"][value="high"]').click()
        page.find('[data-testid="detail-save"]').click()
        page.until(lambda p: not p.editor_open(), "the editor to close (the save waits in the outbox)")
        # The row takes the whole edit at once: its title, and its priority (the row's subtitle).
        shown_priority = "Priority: HIGH" if page is a else "Priority: NORMAL"
        page.wait_item(title, "to be shown at once", subtitle=shown_priority)
        page.until(lambda p: [(row["title"], row["kind"]) for row in pending(p)] == [(title, "save")], "a pending save")
        wait_waiting(page, 1)

    daemon.start_again()
    # The first tab back wins; the other's save names a version that is gone: `conflict`, and
    # that tab rolls its edit back to the winner's title and says why.
    deadline = time.monotonic() + RESTART_WAIT
    conflicts = {}
    while time.monotonic() < deadline and not conflicts:
        for page in pages:
            found = [n for n in page.driver.execute_script(NOTICES_JS) if n["code"] == "conflict"]
            if found:
                conflicts[page.name] = found
        if not conflicts:
            time.sleep(0.05)  # polling the pages, bounded by the deadline
    assert len(conflicts) == 1, f"expected exactly one tab to be told of a conflict: {conflicts}"
    loser = a if "A" in conflicts else b
    winner = b if loser is a else a
    winning_title = "Title from B" if loser is a else "Title from A"
    for page in pages:
        page.wait_titles([winning_title], RESTART_WAIT)
        wait_settled(page)
    assert winner.driver.execute_script(NOTICES_JS) == [] or all(
        n["code"] != "conflict" for n in winner.driver.execute_script(NOTICES_JS)
    )

    with TCPClient(daemon.tcp_port) as check:
        [stored] = check.todos()
        assert stored["title"] == winning_title and stored["todo"]["version"] == 2, stored
        # The message the loser shows is the daemon's: the same stale save from here gets it.
        detail = check.detail(todo_id)
        stale = check.request(
            {"type": "RequestUpdateDetailViewModel", "payload": {**detail, "todo": {**detail["todo"], "version": 1}}},
            "ResponseUpdateDetailViewModel",
        )
        assert stale["error"]["code"] == "conflict", stale
    [notice] = conflicts[loser.name]
    assert notice["kind"] == "error" and notice["text"] == f"Not saved: {stale['error']['message']}", notice



def test_an_offline_save_the_daemon_refuses_is_rolled_back_with_its_message(pages, tcp, daemon):
    a, b = pages
    todo_id = tcp.create("Keep my title")["todo"]["id"]
    a.wait_titles(["Keep my title"])
    dialog = a.open_editor("Keep my title")
    daemon.stop()
    wait_offline(a)
    # An empty title and a ticked box: shown at once (the box), pending, sent when back.
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-title"]').clear()
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-completed"]').click()
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-save"]').click()
    a.until(lambda p: not p.editor_open(), "the editor to close (the save waits in the outbox)")
    a.wait_item("Keep my title", completed=True)
    a.until(lambda p: [row["kind"] for row in pending(p)] == ["save"], "a pending save")
    wait_waiting(a, 1)

    daemon.start_again()
    a.until(
        lambda p: any(n["code"] == "validation_failed" for n in p.driver.execute_script(NOTICES_JS)),
        "the refusal to be shown",
        RESTART_WAIT,
    )
    [notice] = [n for n in a.driver.execute_script(NOTICES_JS) if n["code"] == "validation_failed"]
    assert notice["text"] == "Not saved: Please add a title." and notice["kind"] == "error", notice
    wait_settled(a)
    a.wait_item("Keep my title", completed=False)
    b.wait_item("Keep my title", completed=False)
    with TCPClient(daemon.tcp_port) as check:
        [stored] = check.todos()
        assert stored["todo"]["id"] == todo_id and stored["todo"]["version"] == 1 and not stored["complete"], stored


def test_the_client_module_is_served_as_javascript(daemon):
    import urllib.request

    with urllib.request.urlopen(f"{daemon.http_url}/todostream.js", timeout=WAIT) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/javascript; charset=utf-8"
        assert response.headers["Cache-Control"] == "no-cache"
        body = response.read().decode()
    assert "export class TodoStream" in body
    with urllib.request.urlopen(f"{daemon.http_url}/app.js", timeout=WAIT) as response:
        assert 'from "./todostream.js"' in response.read().decode()


# The module on its own, as another frontend would use it: imported into a page of the daemon.

MODULE_JS = """
const done = arguments[arguments.length - 1];
const todoId = arguments[0];
(async () => {
  const { TodoStream, OutboxFullError } = await import("/todostream.js");
  const synced = (client) => new Promise((resolve) => client.addEventListener("synced", resolve, { once: true }));
  const open = async (options = {}) => {
    const client = new TodoStream({ onReset: async (c) => { await c.request({ type: "RequestTodoViewModels" }); }, ...options });
    const ready = synced(client);
    client.start();
    await ready;
    return client;
  };
  const toggle = { type: "RequestToggleCompleteTodoViewModel", payload: { todo: { id: todoId } } };

  // A write whose connection is closed right after it was sent: it is sent again with the same
  // mid after the resume (or confirmed by the replayed broadcast), and applied once.
  const first = await open();
  const write = first.write(toggle);
  first.socket.close();
  const outcome = await write.done;

  // Another client retrying that mid gets the original outcome, marked duplicate.
  const second = await open();
  const again = await second.write(toggle, { mid: write.mid }).done;

  // A bounded outbox: the caller is told when it is full, and nothing is queued.
  const offline = new TodoStream({ outboxLimit: 2, onReset: async () => {} });
  const queued = [offline.write(toggle), offline.write(toggle)];
  let full = null;
  try { offline.write(toggle); } catch (error) { full = { isOutboxFull: error instanceof OutboxFullError, code: error.code, size: offline.outboxSize }; }
  const ready = synced(offline);
  offline.start();
  await ready;
  const flushed = await Promise.all(queued.map((w) => w.done));
  for (const client of [first, second, offline]) client.stop();
  return { mid: write.mid, outcome, again, full, flushed, prefixes: [first.midPrefix, second.midPrefix] };
})().then(done, (error) => done({ failed: String(error && error.stack || error) }));
"""


def test_the_module_applies_each_write_once_and_bounds_its_outbox(browsers, daemon, tcp):
    driver = browsers[0]
    driver.get(f"{daemon.http_url}/")
    driver.set_script_timeout(RESTART_WAIT)
    todo_id = tcp.create("Toggled by the module")["todo"]["id"]
    result = driver.execute_async_script(MODULE_JS, todo_id)
    driver.get("about:blank")
    assert "failed" not in result, result["failed"]

    outcome, again = result["outcome"], result["again"]
    assert "error" not in outcome, outcome
    assert outcome["payload"]["complete"] is True and outcome["payload"]["todo"]["version"] == 2, outcome
    assert outcome["mid"] == result["mid"] and result["mid"].startswith(result["prefixes"][0] + ":"), result
    applied_seq = outcome.get("seq", outcome.get("applied_seq"))
    assert again["duplicate"] is True and again["applied_seq"] == applied_seq, again
    assert again["payload"] == outcome["payload"], (again, outcome)
    assert len(set(result["prefixes"])) == 2 and all(len(prefix) == 16 for prefix in result["prefixes"])

    assert result["full"] == {"isOutboxFull": True, "code": "outbox_full", "size": 2}, result["full"]
    assert [frame["payload"]["todo"]["version"] for frame in result["flushed"]] == [3, 4], result["flushed"]

    # One toggle by the first client (not two), then the two queued ones: version 4, complete
    # (a doubled first toggle would make it version 5, not complete).
    [stored] = tcp.todos()
    assert stored["todo"]["version"] == 4 and stored["complete"] is True, stored


# A live broadcast ahead of the replay. After `auth` the daemon's start hold is over
# (PROTOCOL §2), so a broadcast made between the greeting and the client's `resume` reaches it
# first, and the replay of what it missed (older seqs) comes after. A scripted server (a
# stand-in for `WebSocket`) makes that order every time.

RESUME_ORDER_JS = """
const done = arguments[arguments.length - 1];
(async () => {
  const sockets = [];
  class ScriptedSocket extends EventTarget {
    static OPEN = 1;
    constructor(url) {
      super();
      this.readyState = 1;
      this.sent = [];
      sockets.push(this);
      setTimeout(() => this.dispatchEvent(new Event("open")), 0);
    }
    send(text) { this.sent.push(JSON.parse(text)); this.onSend?.(JSON.parse(text)); }
    close() {
      if (this.readyState === 3) return;
      this.readyState = 3;
      setTimeout(() => this.dispatchEvent(new Event("close")), 0);
    }
    // Later, in order, as a socket's messages come (never inside the `send` that caused them).
    deliver(frame) { setTimeout(() => this.dispatchEvent(new MessageEvent("message", { data: JSON.stringify(frame) })), 0); }
  }
  const todo = (title, version, seq) => ({
    type: "ResponseTodoViewModel", seq,
    payload: { todo: { id: "6f1c0000-0000-0000-0000-000000000001", version }, title, subtitle: "",
               priority: "normal", complete: false, deleted: false },
  });
  window.WebSocket = ScriptedSocket;
  const { TodoStream } = await import("/todostream.js");
  const seen = [];
  const client = new TodoStream({
    url: "ws://scripted/events",
    backoffBaseMs: 1, backoffCapMs: 2,
    onReset: async (c) => { await c.request({ type: "RequestTodoViewModels" }); },
  });
  const syncs = [];
  client.addEventListener("synced", (event) => syncs.push(event.detail.how));
  client.addEventListener("broadcast", (event) => seen.push(event.detail.frame.seq));
  const wait = async (test) => { for (let i = 0; i < 500 && !test(); i++) await new Promise((r) => setTimeout(r, 10)); };
  client.start();
  await wait(() => sockets.length === 1);
  const first = sockets[0];
  first.onSend = (frame) => {
    if (frame.type === "RequestTodoViewModels") first.deliver({ type: "ResponseTodoViewModels", re: frame.id, payload: { todos: [] } });
  };
  first.deliver({ op: "hello", session: "s1", epoch: "E", seq: 57, protocol: 1, features: ["mid"], auth: "none", subscriptions: ["Response*"] });
  await wait(() => syncs.length === 1);
  first.close();
  await wait(() => sockets.length === 2);
  const second = sockets[1];
  second.onSend = (frame) => {
    if (frame.op !== "resume") return;
    second.deliver(todo("live", 4, 60));       // live, ahead of the replay
    second.deliver(todo("replayed", 2, 58));   // the replay of what was missed
    second.deliver(todo("replayed", 3, 59));
    second.deliver({ op: "resumed", re: frame.id, from: 58, to: 60 });
  };
  second.deliver({ op: "hello", session: "s2", epoch: "E", seq: 60, protocol: 1, features: ["mid"], auth: "none", subscriptions: ["Response*"] });
  await wait(() => syncs.length === 2);
  const resume = second.sent.find((frame) => frame.op === "resume");
  client.stop();
  return { seen, syncs, resume, lastSeq: client.lastSeq, sent: sockets.map((socket) => socket.sent) };
})().then(done, (error) => done({ failed: String(error && error.stack || error) }));
"""


def test_a_live_broadcast_ahead_of_the_replay_loses_nothing(browsers, daemon):
    """Every broadcast is passed on once, in seq order, and the position ends at the newest:
    the replayed 58 and 59 were dropped as seen once the live 60 had moved the position (lost
    updates on the page, with no refetch)."""
    driver = browsers[0]
    driver.get(f"{daemon.http_url}/")
    driver.set_script_timeout(RESTART_WAIT)
    result = driver.execute_async_script(RESUME_ORDER_JS)
    driver.get("about:blank")
    assert "failed" not in result, result["failed"]
    assert (result["resume"] or {}).get("after") == 57 and result["resume"]["epoch"] == "E", result
    assert result["seen"] == [58, 59, 60], result
    assert result["syncs"] == ["loaded", "resumed"], result
    assert result["lastSeq"] == 60, result


# SIGKILL while writes are in flight: the module's outbox sends every unanswered write again
# with its mid once the daemon is back, and each is applied exactly once.

KILL_JS = """
const ids = arguments[0];
const per = arguments[1];
window.__kill = { completed: 0, errors: [], finished: false, failed: null };
(async () => {
  const { TodoStream } = await import("/todostream.js");
  const client = new TodoStream({ onReset: async (c) => { await c.request({ type: "RequestTodoViewModels" }); } });
  const ready = new Promise((resolve) => client.addEventListener("synced", resolve, { once: true }));
  client.start();
  await ready;
  const inflight = new Set();
  for (let i = 0; i < per; i++) {
    for (const id of ids) {
      while (inflight.size >= 10) await Promise.race(inflight);
      const write = client.write({ type: "RequestToggleCompleteTodoViewModel", payload: { todo: { id } } });
      const settled = write.done.then((outcome) => {
        if (outcome.error) window.__kill.errors.push(outcome.error);
        window.__kill.completed += 1;
        inflight.delete(settled);
      });
      inflight.add(settled);
    }
  }
  await Promise.all(inflight);
  client.stop();
  window.__kill.finished = true;
})().catch((error) => { window.__kill.failed = String(error && error.stack || error); });
"""


def test_writes_through_the_module_are_applied_once_across_a_sigkill_of_the_daemon(browsers, daemon, tcp):
    driver = browsers[0]
    driver.get(f"{daemon.http_url}/")
    ids = [tcp.create(f"Killed under {k}")["todo"]["id"] for k in range(3)]
    per = 30
    total = per * len(ids)
    tcp.close()
    driver.execute_script(KILL_JS, ids, per)

    def state() -> dict:
        return driver.execute_script("return window.__kill;")

    deadline = time.monotonic() + RESTART_WAIT
    while (s := state())["completed"] < total // 4 and not s["failed"]:
        assert time.monotonic() < deadline, f"the writes did not get going: {s}"
        time.sleep(0.01)  # polling the page, bounded by the deadline
    daemon.kill()  # SIGKILL, with up to ten writes unanswered
    killed_at = state()["completed"]
    assert killed_at < total, "every write was answered before the kill; the test proves nothing"
    daemon.start_again()
    deadline = time.monotonic() + RESTART_WAIT
    while not (s := state())["finished"] and not s["failed"]:
        assert time.monotonic() < deadline, f"the outbox did not drain after the restart: {s}"
        time.sleep(0.05)  # polling the page, bounded by the deadline
    driver.get("about:blank")
    assert not s["failed"], s["failed"]
    assert s["errors"] == [] and s["completed"] == total, s

    with TCPClient(daemon.tcp_port) as check:
        stored = {todo["todo"]["id"]: todo for todo in check.todos()}
    for todo_id in ids:
        # Version 1 is the creation; each toggle adds exactly one, none lost, none doubled.
        assert stored[todo_id]["todo"]["version"] == 1 + per, (stored[todo_id], killed_at)
        assert stored[todo_id]["complete"] is (per % 2 == 1)
