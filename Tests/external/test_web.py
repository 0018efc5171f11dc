"""The web frontend (issue 5) in headless Chromium against the real daemon binary.

Two browser pages stay open for the whole module; every test points them at its own daemon
(the `daemon` fixture of conftest.py). A plain Python socket speaking NDJSON plays the `nc`
user. Waits are explicit (WebDriverWait on what the page shows), never fixed sleeps.

Needs Debian's `chromium` and `chromium-driver` and Selenium from PyPI; when any of them is
missing the tests FAIL, they never skip. $CHROMIUM / $CHROMEDRIVER override the paths.

Screenshots go to ci-artifacts/ (web.png, web-phone.png). With UPDATE_DOCS_SCREENSHOT=1 the
desktop one is copied to docs/web.png too, for the README.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
import time
import urllib.request
from pathlib import Path

import pytest

try:
    from selenium import webdriver
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    SELENIUM_ERROR = None
except ImportError as error:  # reported as a failure by the `browsers` fixture
    SELENIUM_ERROR = error

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "ci-artifacts"
WAIT = 15.0
RESTART_WAIT = 45.0


# ---------------------------------------------------------------------------------------------
# A plain NDJSON client over TCP, as `nc` would be used.


class TCPClient:
    _ids = itertools.count(1)

    def __init__(self, port: int, timeout: float = WAIT):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.timeout = timeout
        self.buffer = b""
        self.backlog: list[dict] = []
        self.hello = self.recv()
        assert self.hello.get("op") == "hello", self.hello

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, frame: dict) -> None:
        self.sock.sendall(json.dumps(frame).encode() + b"\n")

    def recv(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no frame from the daemon within {self.timeout} s")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("the daemon closed the TCP connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def request(self, frame: dict, expect: str) -> dict:
        """Sends `frame` with a fresh id; returns the answer of type `expect` (or op:error)."""
        rid = f"py{next(self._ids)}"
        self.send({**frame, "id": rid})
        while True:
            reply = self.recv()
            if reply.get("re") == rid and (reply.get("type") == expect or reply.get("op") == "error"):
                return reply
            self.backlog.append(reply)

    def ok(self, frame: dict, expect: str) -> dict:
        reply = self.request(frame, expect)
        assert "error" not in reply, f"{frame} failed: {reply}"
        return reply["payload"]

    def create(self, title: str, **fields) -> dict:
        fresh = self.ok({"type": "RequestNewTodoDetailViewModel"}, "ResponseTodoDetailViewModel")
        return self.ok(
            {"type": "RequestUpdateDetailViewModel", "payload": {**fresh, "title": title, **fields}},
            "ResponseUpdateDetailViewModel",
        )

    def detail(self, todo_id: str) -> dict:
        return self.ok(
            {"type": "RequestTodoDetailViewModel", "payload": {"todo": {"id": todo_id}}}, "ResponseTodoDetailViewModel"
        )

    def update(self, todo_id: str, **fields) -> dict:
        detail = self.detail(todo_id)
        return self.ok(
            {"type": "RequestUpdateDetailViewModel", "payload": {**detail, **fields}}, "ResponseUpdateDetailViewModel"
        )

    def toggle(self, todo_id: str) -> dict:
        return self.ok(
            {"type": "RequestToggleCompleteTodoViewModel", "payload": {"todo": {"id": todo_id}}},
            "ResponseTodoViewModel",
        )

    def delete(self, todo_id: str) -> dict:
        return self.ok(
            {"type": "RequestDeleteTodoViewModel", "payload": {"todo": {"id": todo_id}}}, "ResponseTodoViewModel"
        )

    def todos(self) -> list[dict]:
        return self.ok({"type": "RequestTodoViewModels"}, "ResponseTodoViewModels")


# ---------------------------------------------------------------------------------------------
# The browser side.

ITEMS_JS = """
return [...document.querySelectorAll('.todo-list > li[data-testid="todo"]')].map(li => ({
  id: li.dataset.id,
  title: li.querySelector('.title').textContent,
  subtitle: li.querySelector('.subtitle').textContent,
  completed: li.classList.contains('completed'),
  checked: li.querySelector('.toggle').checked,
}));
"""

STATE_JS = """
const c = document.querySelector('[data-testid="connection"]');
return {state: c.dataset.state, text: c.querySelector('.connection-text').textContent, session: c.dataset.session,
        epoch: c.dataset.epoch, seq: c.dataset.seq, sync: c.dataset.sync, drain: c.dataset.drainAfterMs};
"""


def chrome_paths() -> tuple[str, str]:
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    missing = [
        name for name, path in (("chromium", chromium), ("chromedriver", driver)) if not path or not os.access(path, os.X_OK)
    ]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not installed: apt-get install chromium chromium-driver "
            "(or scripts/install-test-tools)",
            pytrace=False,
        )
    return chromium, driver


def new_driver(chromium: str, chromedriver: str):
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=900,900",
        "--force-device-scale-factor=1",
        "--disable-background-timer-throttling",
        "--disable-renderer-backgrounding",
        "--disable-backgrounding-occluded-windows",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    except WebDriverException as error:
        pytest.fail(f"cannot start headless Chromium ({chromium}, {chromedriver}): {error.msg}", pytrace=False)


class Page:
    """One browser page showing the web frontend, with the waits the tests need."""

    def __init__(self, driver, name: str):
        self.driver = driver
        self.name = name

    # navigation and waiting

    def open(self, daemon) -> "Page":
        self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        self.driver.get(f"{daemon.http_url}/")
        self.wait_live()
        return self

    def until(self, condition, what: str, timeout: float = WAIT):
        """Waits until `condition(self)` is truthy; on timeout fails with what the page shows."""
        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(lambda _: condition(self))
        except TimeoutException:
            raise AssertionError(
                f"page {self.name}: timed out after {timeout} s waiting for {what}\n"
                f"  connection: {self.state()}\n  todos: {self.items()}\n"
                f"  new-todo error: {self.text('[data-testid=new-todo-error]')!r}\n"
                f"  console: {self.console()}"
            ) from None

    def wait_live(self, timeout: float = WAIT):
        self.until(lambda page: page.state()["state"] == "online", "the connection indicator to say online", timeout)

    def state(self) -> dict:
        return self.driver.execute_script(STATE_JS)

    def items(self) -> list[dict]:
        return self.driver.execute_script(ITEMS_JS)

    def titles(self) -> list[str]:
        return [item["title"] for item in self.items()]

    def item(self, title: str) -> dict | None:
        return next((item for item in self.items() if item["title"] == title), None)

    def wait_titles(self, titles: list[str], timeout: float = WAIT):
        self.until(lambda page: page.titles() == titles, f"the list to be {titles}", timeout)

    def wait_item(self, title: str, what: str = "", timeout: float = WAIT, **expected) -> dict:
        def check(page):
            item = page.item(title)
            return item if item and all(item[key] == value for key, value in expected.items()) else None

        return self.until(check, f"{title!r} {what or expected}", timeout)

    def wait_gone(self, title: str, timeout: float = WAIT):
        self.until(lambda page: page.item(title) is None, f"{title!r} to disappear", timeout)

    def text(self, selector: str) -> str:
        elements = self.driver.find_elements(By.CSS_SELECTOR, selector)
        return elements[0].text if elements else ""

    def visible(self, selector: str) -> bool:
        elements = self.driver.find_elements(By.CSS_SELECTOR, selector)
        return bool(elements) and elements[0].is_displayed()

    def find(self, selector: str):
        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def console(self) -> list[str]:
        try:
            return [entry["message"] for entry in self.driver.get_log("browser")][-10:]
        except WebDriverException:
            return []

    def script_errors(self) -> list[str]:
        """SEVERE console entries, except failed WebSocket connects while the daemon is down."""
        try:
            entries = self.driver.get_log("browser")
        except WebDriverException:
            return []
        return [
            entry["message"]
            for entry in entries
            if entry["level"] == "SEVERE" and "WebSocket connection to" not in entry["message"]
        ]

    def active(self):
        return self.driver.switch_to.active_element

    # actions

    def li(self, title: str):
        self.wait_item(title, "to be listed")
        for li in self.driver.find_elements(By.CSS_SELECTOR, '.todo-list > li[data-testid="todo"]'):
            if li.find_element(By.CSS_SELECTOR, ".title").text == title:
                return li
        raise AssertionError(f"page {self.name}: no list item {title!r}")

    def create(self, title: str):
        field = self.find(".new-todo")
        field.send_keys(title, Keys.ENTER)
        self.wait_item(title, "to be created")
        self.until(lambda page: page.find(".new-todo").get_attribute("value") == "", "the new-todo field to clear")

    def toggle(self, title: str, completed: bool):
        self.li(title).find_element(By.CSS_SELECTOR, ".toggle").click()
        self.wait_item(title, completed=completed)

    def delete(self, title: str):
        self.li(title).find_element(By.CSS_SELECTOR, ".destroy").click()
        self.wait_gone(title)

    def open_editor(self, title: str):
        self.li(title).find_element(By.CSS_SELECTOR, ".edit-button").click()
        self.until(lambda page: page.visible('[data-testid="detail"]'), "the detail editor to open")
        return self.find('[data-testid="detail"]')

    def viewport(self, width: int, height: int, mobile: bool = False):
        """Exactly this viewport (CSS pixels), as a device of that size would have."""
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )
        self.until(
            lambda page: page.driver.execute_script("return [window.innerWidth, window.innerHeight]") == [width, height],
            f"a {width}x{height} viewport",
        )

    def editor_open(self) -> bool:
        return self.driver.execute_script('return document.querySelector("dialog.detail").open')


@pytest.fixture(scope="module")
def browsers():
    if SELENIUM_ERROR is not None:
        pytest.fail(f"Selenium is not installed (pip install selenium): {SELENIUM_ERROR}", pytrace=False)
    chromium, chromedriver = chrome_paths()
    drivers = []
    try:
        for _ in range(2):
            drivers.append(new_driver(chromium, chromedriver))
        yield drivers
    finally:
        for driver in drivers:
            driver.quit()


@pytest.fixture
def pages(browsers, daemon):
    """Page A and page B, both showing `daemon`'s web frontend and live."""
    a, b = Page(browsers[0], "A"), Page(browsers[1], "B")
    a.open(daemon)
    b.open(daemon)
    yield a, b
    errors = []
    for page in (a, b):
        errors += [f"page {page.name}: {message}" for message in page.script_errors()]
        # Leave the daemon before it stops, so the next test starts from a blank page.
        page.driver.get("about:blank")
    assert not errors, "the page logged errors:\n" + "\n".join(errors)


@pytest.fixture
def tcp(daemon):
    with TCPClient(daemon.tcp_port) as client:
        yield client


# ---------------------------------------------------------------------------------------------
# The tests.


def test_markup_follows_the_todomvc_spec(pages, tcp):
    a, _ = pages
    field = a.find(".new-todo")
    assert field.get_attribute("placeholder") == "What needs to be done?"
    assert a.driver.execute_script("return document.activeElement.classList.contains('new-todo')"), "autofocus"
    assert a.find(".todo-count").text == "0 items left"
    a.create("Buy milk")
    li = a.li("Buy milk")
    assert li.tag_name == "li" and li.find_element(By.XPATH, "..").get_attribute("class") == "todo-list"
    assert li.find_element(By.CSS_SELECTOR, "input.toggle").get_attribute("type") == "checkbox"
    assert li.find_element(By.CSS_SELECTOR, "button.destroy").is_displayed()
    assert li.find_element(By.CSS_SELECTOR, "label").text == "Buy milk"
    assert a.find(".todo-count").text == "1 item left"
    # Display strings come from the view model.
    [stored] = tcp.todos()
    assert a.item("Buy milk")["subtitle"] == stored["subtitle"] == "Priority: NORMAL"
    assert li.find_element(By.CSS_SELECTOR, ".toggle").get_attribute("aria-label") == "Complete: Buy milk"
    assert "completed" not in li.get_attribute("class")


def test_create_in_one_page_appears_in_the_other(pages, tcp):
    a, b = pages
    a.create("Buy milk")
    b.wait_titles(["Buy milk"])
    b.create("Walk the dog")
    a.wait_titles(["Walk the dog", "Buy milk"])  # newest first
    b.wait_titles(["Walk the dog", "Buy milk"])
    assert [todo["title"] for todo in tcp.todos()] == ["Walk the dog", "Buy milk"]
    a.until(lambda page: page.find(".todo-count").text == "2 items left", "the count to say 2")
    # Surrounding whitespace is trimmed by the daemon, and the page shows what it stored.
    a.find(".new-todo").send_keys("   Call mum  ", Keys.ENTER)
    b.wait_titles(["Call mum", "Walk the dog", "Buy milk"])


def test_toggle_and_delete_across_pages(pages, tcp):
    a, b = pages
    a.create("Buy milk")
    a.create("Walk the dog")
    b.wait_titles(["Walk the dog", "Buy milk"])

    a.toggle("Buy milk", completed=True)
    b.wait_item("Buy milk", completed=True, checked=True)
    a.until(lambda page: page.find(".todo-count").text == "1 item left", "the count to say 1")
    b.until(lambda page: page.find(".todo-count").text == "1 item left", "the count to say 1")
    assert b.li("Buy milk").find_element(By.CSS_SELECTOR, ".toggle").get_attribute("aria-label") == (
        "Uncomplete: Buy milk"
    )

    b.toggle("Buy milk", completed=False)
    a.wait_item("Buy milk", completed=False, checked=False)

    b.delete("Walk the dog")
    a.wait_gone("Walk the dog")
    a.wait_titles(["Buy milk"])
    assert [todo["title"] for todo in tcp.todos()] == ["Buy milk"]

    # Undo of the delete restores it everywhere.
    b.until(lambda page: page.visible('[data-testid="notice-action"]'), "the Undo notice")
    b.find('[data-testid="notice-action"]').click()
    a.wait_titles(["Walk the dog", "Buy milk"])
    b.wait_titles(["Walk the dog", "Buy milk"])


def test_change_from_a_tcp_client_appears_in_both_pages(pages, tcp):
    a, b = pages
    saved = tcp.create("From nc")
    todo_id = saved["todo"]["id"]
    for page in pages:
        page.wait_item("From nc", subtitle="Priority: NORMAL", completed=False)

    tcp.toggle(todo_id)
    for page in pages:
        page.wait_item("From nc", completed=True)

    tcp.update(todo_id, title="From nc, renamed", priority="high", subtitle="")
    for page in pages:
        page.wait_item("From nc, renamed", subtitle="Priority: HIGH", completed=True)
        page.wait_titles(["From nc, renamed"])

    tcp.delete(todo_id)
    for page in pages:
        page.wait_titles([])
        page.until(lambda p: p.visible('[data-testid="empty"]'), "the empty-list message")


def test_empty_title_saves_nothing_and_shows_the_error(pages, tcp):
    a, b = pages
    field = a.find(".new-todo")
    for title in ("", "   "):
        field.clear()
        field.send_keys(title, Keys.ENTER)
        a.until(lambda page: page.visible('[data-testid="new-todo-error"]'), "the error next to the field")
        assert a.text('[data-testid="new-todo-error"]') == "Please add a title."
        assert field.get_attribute("aria-invalid") == "true"
        assert "new-todo-error" in field.get_attribute("aria-describedby")
    assert tcp.todos() == []
    assert a.items() == [] and b.items() == []
    # Typing clears the error; a real title saves.
    field.send_keys("Now with a title")
    a.until(lambda page: not page.visible('[data-testid="new-todo-error"]'), "the error to clear")
    field.send_keys(Keys.ENTER)
    b.wait_titles(["Now with a title"])

    # The same in the detail editor: the error is shown next to the title field, nothing saved.
    dialog = a.open_editor("Now with a title")
    title = dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-title"]')
    title.clear()
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-save"]').click()
    a.until(lambda page: page.visible('[data-testid="detail-title-error"]'), "the title error in the editor")
    assert a.text('[data-testid="detail-title-error"]') == "Please add a title."
    assert a.editor_open(), "the editor stays open on a validation error"
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-cancel"]').click()
    a.until(lambda page: not page.editor_open(), "the editor to close on Cancel")
    assert [todo["title"] for todo in tcp.todos()] == ["Now with a title"]
    assert b.titles() == ["Now with a title"]


def test_detail_editor_saves_every_field(pages, tcp):
    a, b = pages
    a.create("Plan the trip")
    dialog = a.open_editor("Plan the trip")
    detail = tcp.detail(a.item("Plan the trip")["id"])
    # The editor shows the detail view model's own strings.
    assert a.text('[data-testid="detail-priority-string"]') == detail["priorityString"] == "NORMAL"
    assert a.text('[data-testid="detail-completed-string"]') == detail["completedString"] == "Incomplete"
    assert a.text('[data-testid="detail-delete"]') == detail["deletedString"] == "Delete"

    title = dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-title"]')
    title.clear()
    title.send_keys("Plan the summer trip")
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-subtitle"]').send_keys("Book the ferry")
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-priority-high"]').click()
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-completed"]').click()
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-save"]').click()
    a.until(lambda page: not page.editor_open(), "the editor to close after saving")
    for page in pages:
        page.wait_item("Plan the summer trip", subtitle="Priority: HIGH", completed=True)
    [stored] = tcp.todos()
    assert stored["todo"]["subtitle"] == "Book the ferry" and stored["todo"]["priority"] == "high"

    # Delete from the editor (its button says the detail view model's deletedString); a deleted
    # todo leaves every list, and comes back everywhere when another client restores it.
    a.open_editor("Plan the summer trip")
    a.find('[data-testid="detail-delete"]').click()
    for page in pages:
        page.wait_titles([])
    restored = tcp.update(stored["todo"]["id"], deleted=False)
    assert restored["deletedString"] == "Delete"
    for page in pages:
        page.wait_titles(["Plan the summer trip"])


def _conflicting_edit(pages, created: str, edit: str, meanwhile, seen_by_b: list[str]):
    """Page A creates `created` and edits its title to `edit` in the editor; meanwhile
    `meanwhile(todo_id)` changes it elsewhere (page B then shows `seen_by_b`); A saves and is
    shown the conflict. Returns the editor and its title field."""
    a, b = pages
    a.create(created)
    todo_id = a.item(created)["id"]
    dialog = a.open_editor(created)
    title = dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-title"]')
    title.clear()
    title.send_keys(edit)
    meanwhile(todo_id)
    b.wait_titles(seen_by_b)
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-save"]').click()
    a.until(lambda page: page.visible('[data-testid="detail-conflict"]'), "the conflict to be shown")
    return dialog, title


def test_conflict_shows_the_current_state_and_keeps_the_edit(pages, tcp):
    a, _ = pages
    # Meanwhile another client changes it.
    dialog, title = _conflicting_edit(
        pages, "Shared todo", "My edit", lambda todo_id: tcp.update(todo_id, title="Their edit"), ["Their edit"]
    )
    assert a.text('[data-testid="detail-conflict-title"]') == "Their edit"
    assert a.text('[data-testid="detail-conflict-subtitle"]') == "Priority: NORMAL"
    assert a.editor_open()
    assert title.get_attribute("value") == "My edit", "the user's edit is kept"
    assert [todo["title"] for todo in tcp.todos()] == ["Their edit"]
    # Saving again puts the kept edit over the current state.
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-save"]').click()
    a.until(lambda page: not page.editor_open(), "the editor to close after the second save")
    for page in pages:
        page.wait_titles(["My edit"])


def test_saving_again_after_a_delete_elsewhere_restores_the_todo_with_the_edit(pages, tcp):
    """The conflict panel says the todo was deleted and that saving again restores it; the
    second save does. (It was stored into the still deleted todo: "Saved." was announced and
    the edit was nowhere to be seen.)"""
    a, _ = pages
    dialog, _ = _conflicting_edit(pages, "Deleted elsewhere", "Kept edit", tcp.delete, [])
    assert "restores" in a.text('[data-testid="detail-conflict-complete"]')
    dialog.find_element(By.CSS_SELECTOR, '[data-testid="detail-save"]').click()
    a.until(lambda page: not page.editor_open(), "the editor to close after the second save")
    for page in pages:
        page.wait_titles(["Kept edit"])
    assert [(todo["title"], todo["deleted"]) for todo in tcp.todos()] == [("Kept edit", False)]


def test_keyboard_only(pages, tcp):
    a, b = pages
    driver = a.driver
    # Focus starts in the new-todo field.
    assert a.active().get_attribute("data-testid") == "new-todo"
    a.active().send_keys("Typed only", Keys.ENTER)
    b.wait_titles(["Typed only"])
    a.until(lambda page: page.active().get_attribute("value") == "", "the field to clear and keep focus")

    # Tab order: the field, then per todo: toggle, edit, delete.
    a.active().send_keys(Keys.TAB)
    assert a.active().get_attribute("data-testid") == "toggle"
    a.active().send_keys(Keys.SPACE)
    b.wait_item("Typed only", completed=True)
    a.active().send_keys(Keys.TAB)
    assert a.active().get_attribute("data-testid") == "edit"

    # Enter opens the editor with the title focused; Escape closes it and focus returns.
    a.active().send_keys(Keys.ENTER)
    a.until(lambda page: page.editor_open(), "the editor to open")
    a.until(lambda page: page.active().get_attribute("data-testid") == "detail-title", "focus in the title")
    order = []
    for _ in range(5):
        a.active().send_keys(Keys.TAB)
        order.append(a.active().get_attribute("data-testid"))
    assert order == ["detail-subtitle", "detail-priority-normal", "detail-completed", "detail-save", "detail-cancel"]
    a.active().send_keys(Keys.ESCAPE)
    a.until(lambda page: not page.editor_open(), "Escape to close the editor")
    assert a.active().get_attribute("data-testid") == "edit"

    # Enter in the title field saves.
    a.active().send_keys(Keys.ENTER)
    a.until(lambda page: page.active().get_attribute("data-testid") == "detail-title", "focus in the title")
    a.active().send_keys(Keys.END, " (edited)", Keys.ENTER)
    a.until(lambda page: not page.editor_open(), "Enter to save")
    b.wait_titles(["Typed only (edited)"])
    assert a.active().get_attribute("data-testid") == "edit"

    # Delete with the keyboard; focus goes somewhere sensible.
    a.active().send_keys(Keys.TAB)
    assert a.active().get_attribute("data-testid") == "destroy"
    a.active().send_keys(Keys.ENTER)
    b.wait_titles([])
    a.until(lambda page: page.active().get_attribute("data-testid") == "new-todo", "focus back in the field")

    # Every control has an accessible name.
    unnamed = driver.execute_script(
        """
        return [...document.querySelectorAll('input, textarea, button, select')].filter(el => {
          const named = (el.labels && el.labels.length) || el.getAttribute('aria-label') ||
            el.getAttribute('aria-labelledby') || (el.tagName === 'BUTTON' && el.textContent.trim());
          return !named;
        }).map(el => el.outerHTML.slice(0, 120));
        """
    )
    assert unnamed == []


def test_phone_width(pages, tcp):
    a, _ = pages
    tcp.create("A todo with a rather long title that has to wrap on a narrow phone screen", priority="high")
    tcp.create("Short one")
    a.wait_titles(["Short one", "A todo with a rather long title that has to wrap on a narrow phone screen"])
    a.viewport(375, 667, mobile=True)
    overflow = a.driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px at phone width"
    for li in a.driver.find_elements(By.CSS_SELECTOR, ".todo-list > li"):
        for selector in (".toggle", ".edit-button", ".destroy"):
            rect = li.find_element(By.CSS_SELECTOR, selector).rect
            assert rect["x"] >= 0 and rect["x"] + rect["width"] <= 375, f"{selector} is off screen: {rect}"
            assert rect["height"] >= 32, f"{selector} is too small to tap: {rect}"
    ARTIFACTS.mkdir(exist_ok=True)
    a.driver.save_screenshot(str(ARTIFACTS / "web-phone.png"))


def test_page_recovers_after_the_daemon_restarts(pages, tcp, daemon):
    a, b = pages
    a.create("Before the restart")
    b.wait_titles(["Before the restart"])
    before = a.state()
    tcp.close()

    daemon.restart()  # SIGTERM (the daemon sends `draining`), then a new process, same ports
    with TCPClient(daemon.tcp_port) as client:
        # Made while the pages are still away (they wait reconnect_after_ms after draining):
        # they must get it by resuming.
        client.create("While the pages were away")
        for page in pages:
            page.wait_live(RESTART_WAIT)
            page.wait_titles(["While the pages were away", "Before the restart"])
            after = page.state()
            assert after["session"] != before["session"], "the page did not reconnect"
            # The daemon asks for at least drainReconnectAfterMs (1 s by default) plus jitter.
            assert after["drain"] and int(after["drain"]) >= 1000, f"the page did not see `draining`: {after}"
            assert after["epoch"] == before["epoch"] == client.hello["epoch"]
            assert after["sync"] == "resumed", f"expected a resume within the same epoch: {after}"
        # Live again: changes from either side keep flowing.
        client.create("After the restart")
        a.wait_titles(["After the restart", "While the pages were away", "Before the restart"])
        b.toggle("After the restart", completed=True)
        a.wait_item("After the restart", completed=True)
        assert int(a.state()["seq"]) == int(b.state()["seq"]) == client.hello["seq"] + 3


def test_page_refetches_when_the_journal_is_another(pages, daemon, daemon_factory):
    """A daemon on the same ports but with another data dir (another epoch): resume answers
    `gap` and the page reloads the list, dropping what the old daemon had."""
    a, b = pages
    a.create("Only on the first daemon")
    b.wait_titles(["Only on the first daemon"])
    ports = dict(daemon.ports)
    daemon.stop()
    other = daemon_factory("--listen", f"127.0.0.1:{ports['tcp']}", "--http-listen", f"127.0.0.1:{ports['http']}")
    with TCPClient(other.tcp_port) as client:
        client.create("Only on the second daemon")
        for page in pages:
            page.wait_live(RESTART_WAIT)
            page.wait_titles(["Only on the second daemon"])
            state = page.state()
            assert state["epoch"] == client.hello["epoch"] and state["sync"] == "refetched", state


def test_screenshot_with_a_few_todos(pages, tcp):
    a, b = pages
    a.create("Buy oat milk")
    tcp.create("Book the ferry to Skye", priority="high", subtitle="")
    a.create("Water the plants")
    a.create("Reply to Sam's email")
    a.toggle("Water the plants", completed=True)
    b.wait_titles(["Reply to Sam's email", "Water the plants", "Book the ferry to Skye", "Buy oat milk"])
    a.driver.execute_script("document.activeElement.blur()")
    ActionChains(a.driver).move_to_element(a.find("h1")).perform()  # no hover highlight in the picture
    # Let the insert/update animations finish before the picture: wait until none is running.
    a.until(
        lambda page: page.driver.execute_script("return document.getAnimations().length === 0"),
        "animations to finish",
    )
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "web.png"
    a.viewport(900, 660)
    a.driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    if os.environ.get("UPDATE_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(path, REPO / "docs" / "web.png")


def _ws_connections_accepted(daemon) -> int:
    with urllib.request.urlopen(f"{daemon.http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith('todostream_connections_accepted_total{transport="ws"}'):
            return int(float(line.split()[-1]))
    raise AssertionError(f"no WebSocket connection count in /metrics:\n{text[:2000]}")


def test_the_third_bad_token_leaves_its_message_shown(browsers, daemon_factory):
    """After the third bad token the daemon closes the connection; the page reconnects and is
    asked for a token again. The message saying why the last one was refused stays (it showed
    for a moment, then the new connection's request for a token wiped it out), until a good
    token is taken."""
    daemon = daemon_factory("--token", "view:view-token-for-the-page")
    page = Page(browsers[0], "A")
    try:
        page.driver.get(f"{daemon.http_url}/")
        page.until(lambda p: p.visible('[data-testid="auth-form"]'), "the token form")
        accepted = _ws_connections_accepted(daemon)
        for attempt in range(3):
            page.find('[data-testid="auth-token"]').send_keys(f"wrong-token-{attempt}")
            page.find('[data-testid="auth-submit"]').click()
            page.until(lambda p: "not valid" in p.text('[data-testid="auth-error"]'), "the refusal")
            if attempt < 2:
                page.driver.execute_script("document.querySelector('[data-testid=\"auth-error\"]').textContent = ''")
        page.until(lambda p: _ws_connections_accepted(daemon) > accepted, "the page's next connection")
        page.until(lambda p: p.state()["state"] == "auth", "the token form on the next connection")
        assert page.visible('[data-testid="auth-form"]')
        assert "not valid" in page.text('[data-testid="auth-error"]'), page.text('[data-testid="auth-error"]')
        page.find('[data-testid="auth-token"]').send_keys("view-token-for-the-page")
        page.find('[data-testid="auth-submit"]').click()
        page.wait_live()
        assert not page.visible('[data-testid="auth-form"]')
    finally:
        page.driver.get("about:blank")


def test_a_monitor_token_asks_for_a_view_token_instead_of_reconnecting_in_a_loop(browsers, daemon_factory):
    """A monitor token authenticates, but a monitor may not publish, so the page cannot load its
    list with it. It once went on: reset refused, connection closed, and (the backoff started
    over at every greeting) a new connection a few times a second, for ever, with the token form
    never shown. Now the page asks for a view token and keeps the connection it has."""
    daemon = daemon_factory("--token", "view:view-token-for-the-page", "--monitor-token", "monitor-token-for-a-tap")
    page = Page(browsers[0], "A")
    try:
        page.driver.get(f"{daemon.http_url}/#token=monitor-token-for-a-tap")
        page.until(lambda p: p.visible('[data-testid="auth-form"]'), "the token form")
        page.until(lambda p: "monitor" in p.text('[data-testid="auth-error"]'), "the form to say why")
        assert page.state()["state"] == "auth", page.state()
        accepted = _ws_connections_accepted(daemon)
        time.sleep(2.0)  # what is measured is that nothing happens meanwhile
        assert _ws_connections_accepted(daemon) == accepted, "the page kept reconnecting with the monitor token"
        page.find('[data-testid="auth-token"]').send_keys("view-token-for-the-page")
        page.find('[data-testid="auth-submit"]').click()
        page.wait_live()
        assert not page.visible('[data-testid="auth-form"]')
        assert _ws_connections_accepted(daemon) == accepted, "the view token should be taken on the same connection"
    finally:
        page.driver.get("about:blank")


def test_an_answer_that_closes_leaves_the_client_its_answer_and_reads_what_still_comes(daemon):
    """An answer with Connection: close (here the 405 to a POST that expects 100-continue,
    sent at once, before its body) shuts the daemon's output and reads on: the client gets the
    answer, then the end, and what it still sends (the body it did not wait to send) meets no
    reset. Closed at once, the daemon's kernel reset the connection on those bytes, which can
    throw the answer away before the client reads it."""
    with socket.create_connection(("127.0.0.1", daemon.http_port), timeout=10) as raw:
        raw.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\nExpect: 100-continue\r\n\r\n")
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 405 "), answer[:200]
        try:
            raw.sendall(b"x" * 300_000)  # the body, late: read and dropped
            time.sleep(0.5)  # what is measured is that no reset comes meanwhile
            error = raw.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except ConnectionResetError:
            error = 104
        assert error == 0, f"the daemon reset the connection on the late body (error {error})"
