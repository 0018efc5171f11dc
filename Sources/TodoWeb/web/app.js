// todostream web frontend: a pure view client of the daemon's event stream.
//
// It publishes only the six view-layer requests (docs/PROTOCOL.md §6) over the WebSocket at
// /events and renders the view models it receives; every todo string it shows (title,
// subtitle, action titles, detail strings) comes from a view model. It keeps the epoch and the
// highest seq it has seen, resumes from them after a reconnect, and refetches the list when
// the daemon answers `gap`.

const RESPONSE_TODO = "ResponseTodoViewModel";

const BACKOFF_BASE_MS = 500;
const BACKOFF_CAP_MS = 15000;
const HELLO_TIMEOUT_MS = 10000;
const REQUEST_TIMEOUT_MS = 15000;
const PING_EVERY_MS = 20000;
const PONG_TIMEOUT_MS = 10000;
const NOTICE_MS = 7000;

const $ = (selector, root = document) => root.querySelector(selector);

const ui = {
  root: document.documentElement,
  app: $(".todoapp"),
  connection: $(".connection"),
  connectionText: $(".connection-text"),
  retry: $(".connection-retry"),
  authForm: $(".auth-form"),
  authToken: $("#auth-token"),
  authError: $("#auth-error"),
  newForm: $(".new-todo-form"),
  newTodo: $(".new-todo"),
  newError: $("#new-todo-error"),
  list: $(".todo-list"),
  empty: $(".empty"),
  count: $(".todo-count"),
  notices: $(".notices"),
  announcer: $("#announcer"),
  dialog: $("dialog.detail"),
  detailForm: $(".detail-form"),
  detailTitle: $("#detail-title"),
  detailSubtitle: $("#detail-subtitle"),
  detailCompleted: $("#detail-completed"),
  detailPriorityString: $('[data-testid="detail-priority-string"]'),
  detailCompletedString: $('[data-testid="detail-completed-string"]'),
  detailError: $('[data-testid="detail-error"]'),
  detailSave: $('[data-testid="detail-save"]'),
  detailCancel: $('[data-testid="detail-cancel"]'),
  detailDelete: $('[data-testid="detail-delete"]'),
  conflict: $('[data-testid="detail-conflict"]'),
  conflictMessage: $('[data-testid="detail-conflict-message"]'),
  conflictCurrent: $('[data-testid="detail-conflict-current"]'),
  conflictTitle: $('[data-testid="detail-conflict-title"]'),
  conflictSubtitle: $('[data-testid="detail-conflict-subtitle"]'),
  conflictComplete: $('[data-testid="detail-conflict-complete"]'),
  reload: $('[data-testid="detail-reload"]'),
};

const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)");

// ---------------------------------------------------------------------------------------------
// The list: view models by todo id, kept in the order the daemon defines (newest first by
// todo.createdAt, ties by creation order).

const store = {
  /** id -> { vm, rank, li } */
  todos: new Map(),
  /** id -> version of the broadcast that deleted it, so an older copy cannot bring it back. */
  tombstones: new Map(),
  /** ids changed by a broadcast since the last list request was sent. */
  touched: new Set(),
  rank: 0,
  /** Whether the list has been loaded at least once (the first load does not animate). */
  loaded: false,
};

function createdAtOf(vm) {
  const time = Date.parse(vm.todo.createdAt);
  return Number.isNaN(time) ? 0 : time;
}

function compareEntries(a, b) {
  return createdAtOf(b.vm) - createdAtOf(a.vm) || b.rank - a.rank;
}

function versionOf(vm) {
  return typeof vm?.todo?.version === "number" ? vm.todo.version : -1;
}

/** Applies a broadcast ResponseTodoViewModel (live or replayed). */
function applyTodo(vm, { animate = true } = {}) {
  if (!vm || !vm.todo || typeof vm.todo.id !== "string") return;
  const id = vm.todo.id.toLowerCase();
  const version = versionOf(vm);
  store.touched.add(id);
  const existing = store.todos.get(id);
  if (existing && versionOf(existing.vm) >= version) return;
  const tombstone = store.tombstones.get(id);
  if (tombstone !== undefined && tombstone >= version) return;
  if (vm.deleted) {
    store.tombstones.set(id, version);
    if (existing) removeEntry(id, { animate, announce: true });
    return;
  }
  store.tombstones.delete(id);
  if (existing) {
    existing.vm = vm;
    renderItem(existing.li, vm);
    if (animate) flash(existing.li, "updated");
  } else {
    const entry = { vm, rank: ++store.rank, li: createItem(vm) };
    store.todos.set(id, entry);
    placeItems();
    if (animate) {
      flash(entry.li, "inserted");
      announce(`Added “${vm.title}”.`);
    }
  }
  placeItems();
  renderFooter();
}

/** Applies a ResponseTodoViewModels list, merging with what broadcasts changed meanwhile. */
function applySnapshot(list) {
  const animate = store.loaded;
  const present = new Set();
  // The list is newest first; ranks rise with creation, so hand them out from the end.
  for (let index = list.length - 1; index >= 0; index--) {
    const vm = list[index];
    if (!vm || !vm.todo || typeof vm.todo.id !== "string") continue;
    const id = vm.todo.id.toLowerCase();
    present.add(id);
    const rank = ++store.rank;
    const existing = store.todos.get(id);
    const tombstone = store.tombstones.get(id);
    if (tombstone !== undefined && tombstone >= versionOf(vm)) continue;
    if (existing) {
      existing.rank = rank;
      if (versionOf(existing.vm) < versionOf(vm)) {
        existing.vm = vm;
        renderItem(existing.li, vm);
        if (animate) flash(existing.li, "updated");
      }
    } else if (!vm.deleted) {
      const entry = { vm, rank, li: createItem(vm) };
      store.todos.set(id, entry);
      if (animate) flash(entry.li, "inserted");
    }
  }
  for (const id of [...store.todos.keys()]) {
    if (!present.has(id) && !store.touched.has(id)) removeEntry(id, { animate, announce: false });
  }
  store.loaded = true;
  placeItems();
  renderFooter();
}

function removeEntry(id, { animate, announce: say }) {
  const entry = store.todos.get(id);
  if (!entry) return;
  store.todos.delete(id);
  const li = entry.li;
  const hadFocus = li.contains(document.activeElement);
  let next = li.nextElementSibling;
  while (next && next.classList.contains("removing")) next = next.nextElementSibling;
  let previous = li.previousElementSibling;
  while (previous && previous.classList.contains("removing")) previous = previous.previousElementSibling;
  li.classList.add("removing");
  li.setAttribute("aria-hidden", "true");
  li.removeAttribute("data-testid");
  li.dataset.removing = "true";
  for (const control of li.querySelectorAll("input, button")) control.disabled = true;
  const finish = () => li.remove();
  if (animate && !reducedMotion.matches) {
    li.addEventListener("animationend", finish, { once: true });
    setTimeout(finish, 600);
  } else {
    finish();
  }
  if (hadFocus) {
    const target = next || previous;
    (target ? target.querySelector(".toggle") : ui.newTodo).focus();
  }
  if (say) announce(`Removed “${entry.vm.title}”.`);
  renderFooter();
}

/** Puts the list items in order, moving only those that are out of place. */
function placeItems() {
  const active = document.activeElement;
  const sorted = [...store.todos.values()].sort(compareEntries);
  let cursor = ui.list.firstElementChild;
  for (const { li } of sorted) {
    while (cursor && cursor.classList.contains("removing")) cursor = cursor.nextElementSibling;
    if (cursor === li) {
      cursor = li.nextElementSibling;
      continue;
    }
    ui.list.insertBefore(li, cursor);
  }
  if (active && active !== document.activeElement && active.isConnected) active.focus({ preventScroll: true });
}

function flash(li, name) {
  if (reducedMotion.matches) return;
  li.classList.remove("inserted", "updated");
  void li.offsetWidth; // restart the animation
  li.classList.add(name);
  li.addEventListener("animationend", () => li.classList.remove(name), { once: true });
}

function renderFooter() {
  const open = [...store.todos.values()].filter((entry) => !entry.vm.complete).length;
  const strong = document.createElement("strong");
  strong.textContent = String(open);
  ui.count.replaceChildren(strong, ` ${open === 1 ? "item" : "items"} left`);
  ui.count.dataset.count = String(open);
  ui.empty.hidden = store.todos.size > 0 || !store.loaded;
  ui.list.dataset.count = String(store.todos.size);
}

let itemSerial = 0;

function createItem(vm) {
  const serial = ++itemSerial;
  const li = document.createElement("li");
  li.dataset.testid = "todo";
  li.dataset.id = vm.todo.id.toLowerCase();

  const view = document.createElement("div");
  view.className = "view";

  const toggle = document.createElement("input");
  toggle.type = "checkbox";
  toggle.className = "toggle";
  toggle.id = `toggle-${serial}`;
  toggle.dataset.testid = "toggle";
  toggle.addEventListener("change", () => {
    const entry = entryFor(li);
    // The page shows what the daemon says: put the box back until the broadcast arrives.
    toggle.checked = !!entry?.vm.complete;
    if (entry) toggleTodo(entry);
  });

  const text = document.createElement("div");
  text.className = "text";
  const label = document.createElement("label");
  label.className = "title";
  label.id = `title-${serial}`;
  label.dataset.testid = "todo-title";
  label.addEventListener("dblclick", () => {
    const entry = entryFor(li);
    if (entry) openEditor(entry, li.querySelector(".edit-button"));
  });
  const subtitle = document.createElement("span");
  subtitle.className = "subtitle";
  subtitle.dataset.testid = "todo-subtitle";
  text.append(label, subtitle);

  const edit = document.createElement("button");
  edit.type = "button";
  edit.className = "edit-button";
  edit.dataset.testid = "edit";
  edit.textContent = "Edit";
  edit.addEventListener("click", () => {
    const entry = entryFor(li);
    if (entry) openEditor(entry, edit);
  });

  const destroy = document.createElement("button");
  destroy.type = "button";
  destroy.className = "destroy";
  destroy.dataset.testid = "destroy";
  destroy.addEventListener("click", () => {
    const entry = entryFor(li);
    if (entry) deleteTodo(entry);
  });

  view.append(toggle, text, edit, destroy);
  li.append(view);
  renderItem(li, vm);
  return li;
}

function entryFor(li) {
  const entry = store.todos.get(li.dataset.id);
  return entry && entry.li === li ? entry : undefined;
}

function renderItem(li, vm) {
  li.classList.toggle("completed", !!vm.complete);
  li.classList.toggle("high", vm.todo.priority === "high");
  li.dataset.version = String(versionOf(vm));
  li.dataset.complete = String(!!vm.complete);
  delete li.dataset.pending;
  li.removeAttribute("aria-busy");
  const toggle = li.querySelector(".toggle");
  toggle.checked = !!vm.complete;
  toggle.setAttribute("aria-label", `${vm.completeActionTitle}: ${vm.title}`);
  toggle.title = vm.completeActionTitle;
  li.querySelector(".title").textContent = vm.title;
  const subtitle = li.querySelector(".subtitle");
  subtitle.textContent = vm.subtitle;
  subtitle.hidden = !vm.subtitle;
  li.querySelector(".edit-button").setAttribute("aria-label", `Edit: ${vm.title}`);
  const destroy = li.querySelector(".destroy");
  destroy.setAttribute("aria-label", `Delete: ${vm.title}`);
  destroy.title = "Delete";
}

function setPending(entry, what) {
  entry.li.dataset.pending = what;
  entry.li.setAttribute("aria-busy", "true");
}

function clearPending(entry) {
  if (!entry) return;
  delete entry.li.dataset.pending;
  entry.li.removeAttribute("aria-busy");
}

// ---------------------------------------------------------------------------------------------
// Actions: each one is a view-layer request.

function toggleTodo(entry) {
  if (!requireLive()) return;
  setPending(entry, "toggle");
  request({ type: "RequestToggleCompleteTodoViewModel", payload: entry.vm }, RESPONSE_TODO, (frame) => {
    clearPending(store.todos.get(entry.vm.todo.id.toLowerCase()));
    if (frame.error) notify(frame.error.message, { kind: "error" });
  });
}

function deleteTodo(entry) {
  if (!requireLive()) return;
  setPending(entry, "delete");
  const title = entry.vm.title;
  const id = entry.vm.todo.id;
  request({ type: "RequestDeleteTodoViewModel", payload: entry.vm }, RESPONSE_TODO, (frame) => {
    clearPending(store.todos.get(id.toLowerCase()));
    if (frame.error) {
      notify(frame.error.message, { kind: "error" });
      return;
    }
    notify(`Deleted “${title}”.`, { action: "Undo", onAction: () => restoreTodo(frame.payload ?? { todo: { id } }) });
  });
}

/** Undo of a delete: the stored todo's detail, saved again with `deleted: false`. */
function restoreTodo(vm) {
  if (!requireLive()) return;
  request({ type: "RequestTodoDetailViewModel", payload: vm }, "ResponseTodoDetailViewModel", (reply) => {
    if (reply.error) return notify(reply.error.message, { kind: "error" });
    const payload = { ...reply.payload, deleted: false };
    request({ type: "RequestUpdateDetailViewModel", payload }, "ResponseUpdateDetailViewModel", (saved) => {
      if (saved.error) notify(saved.error.message, { kind: "error" });
    });
  });
}

let creating = false;

ui.newForm.addEventListener("submit", (event) => {
  event.preventDefault();
  createTodo();
});

ui.newTodo.addEventListener("input", () => showFieldError(ui.newError, null, ui.newTodo));

function createTodo() {
  if (creating) return;
  const title = ui.newTodo.value;
  if (!connection.live) {
    showFieldError(ui.newError, "Not connected to the server yet; your todo is still here. Try again in a moment.", ui.newTodo);
    return;
  }
  creating = true;
  ui.newTodo.setAttribute("aria-busy", "true");
  ui.newForm.dataset.pending = "true";
  const done = (message) => {
    creating = false;
    ui.newTodo.removeAttribute("aria-busy");
    delete ui.newForm.dataset.pending;
    showFieldError(ui.newError, message, ui.newTodo);
  };
  request({ type: "RequestNewTodoDetailViewModel" }, "ResponseTodoDetailViewModel", (fresh) => {
    if (fresh.error) return done(fresh.error.message);
    const payload = { ...fresh.payload, title };
    request({ type: "RequestUpdateDetailViewModel", payload }, "ResponseUpdateDetailViewModel", (saved) => {
      if (saved.error) return done(saved.error.message);
      if (ui.newTodo.value === title) ui.newTodo.value = "";
      done(null);
    });
  });
}

function requireLive() {
  if (connection.live) return true;
  notify("Not connected to the server; nothing was changed. The page reconnects by itself.", { kind: "error" });
  return false;
}

function showFieldError(element, message, field) {
  element.textContent = message ?? "";
  element.hidden = !message;
  if (field) {
    if (message) field.setAttribute("aria-invalid", "true");
    else field.removeAttribute("aria-invalid");
  }
}

// ---------------------------------------------------------------------------------------------
// The detail editor.

/** { id, detail, returnFocus, serial } while the editor is open. */
let editor = null;
let editorSerial = 0;

const detailFields = {
  title: ui.detailTitle,
  subtitle: ui.detailSubtitle,
  completed: ui.detailCompleted,
  priority: ui.detailForm.querySelector('input[name="priority"]'),
};

function openEditor(entry, returnFocus) {
  if (!requireLive()) return;
  setPending(entry, "detail");
  request({ type: "RequestTodoDetailViewModel", payload: entry.vm }, "ResponseTodoDetailViewModel", (frame) => {
    clearPending(store.todos.get(entry.vm.todo.id.toLowerCase()));
    if (frame.error) return notify(frame.error.message, { kind: "error" });
    showEditor(frame.payload, returnFocus);
  });
}

function showEditor(detail, returnFocus) {
  editor = { id: detail.todo.id.toLowerCase(), detail, returnFocus, serial: ++editorSerial, saving: false };
  ui.dialog.dataset.id = editor.id;
  fillEditor(detail);
  showConflict(null);
  clearEditorErrors();
  if (!ui.dialog.open) ui.dialog.showModal();
  ui.detailTitle.focus();
  ui.detailTitle.select();
}

function fillEditor(detail) {
  ui.detailTitle.value = detail.title;
  ui.detailSubtitle.value = detail.subtitle;
  ui.detailCompleted.checked = !!detail.completed;
  for (const radio of ui.detailForm.querySelectorAll('input[name="priority"]')) {
    radio.checked = radio.value === detail.priority;
  }
  renderEditorBase(detail);
}

/** The display strings of the stored state, from the detail view model. */
function renderEditorBase(detail) {
  ui.detailPriorityString.textContent = detail.priorityString;
  ui.detailPriorityString.dataset.priority = detail.priority;
  ui.detailCompletedString.textContent = detail.completedString;
  ui.detailCompletedString.dataset.completed = String(!!detail.completed);
  ui.detailDelete.textContent = detail.deletedString;
  ui.detailDelete.dataset.deleted = String(!!detail.deleted);
  ui.dialog.dataset.version = String(versionOf(detail));
}

function editedDetail(overrides = {}) {
  const base = editor.detail;
  const priority = ui.detailForm.querySelector('input[name="priority"]:checked')?.value ?? base.priority;
  return {
    ...base,
    todo: { ...base.todo },
    title: ui.detailTitle.value,
    subtitle: ui.detailSubtitle.value,
    priority,
    completed: ui.detailCompleted.checked,
    deleted: !!base.deleted,
    ...overrides,
  };
}

function clearEditorErrors() {
  for (const element of ui.detailForm.querySelectorAll(".field-error")) {
    element.textContent = "";
    element.hidden = true;
  }
  for (const field of ui.detailForm.querySelectorAll("[aria-invalid]")) field.removeAttribute("aria-invalid");
}

function showEditorError(error) {
  const field = error.field && detailFields[error.field];
  const slot = field && ui.detailForm.querySelector(`.field-error[data-error-for="${error.field}"]`);
  if (slot) {
    showFieldError(slot, error.message, field);
    field.focus();
  } else {
    showFieldError(ui.detailError, error.message);
  }
}

function showConflict(error) {
  if (!error) {
    ui.conflict.hidden = true;
    return;
  }
  const current = error.current;
  ui.conflictMessage.textContent = error.message;
  ui.conflictTitle.textContent = current?.title ?? "";
  ui.conflictSubtitle.textContent = current?.subtitle ?? "";
  ui.conflictCurrent.classList.toggle("completed", !!current?.complete);
  ui.conflictCurrent.classList.toggle("deleted", !!current?.deleted);
  ui.conflictComplete.textContent = current?.deleted ? "(deleted)" : "";
  ui.conflict.hidden = false;
}

function saveEditor(overrides) {
  if (!editor || editor.saving) return;
  if (!requireLive()) {
    showFieldError(ui.detailError, "Not connected to the server; nothing was saved. Your edit is still here.");
    return;
  }
  const serial = editor.serial;
  const payload = editedDetail(overrides);
  editor.saving = true;
  ui.dialog.setAttribute("aria-busy", "true");
  clearEditorErrors();
  request({ type: "RequestUpdateDetailViewModel", payload }, "ResponseUpdateDetailViewModel", (frame) => {
    if (!editor || editor.serial !== serial) return;
    editor.saving = false;
    ui.dialog.removeAttribute("aria-busy");
    if (!frame.error) {
      showConflict(null);
      closeEditor();
      announce("Saved.");
      return;
    }
    if (frame.error.code === "conflict") {
      showConflict(frame.error);
      // Save again overwrites: the base becomes the stored todo, the fields keep the edit.
      if (frame.error.current?.todo) editor.detail = { ...editor.detail, todo: frame.error.current.todo };
      ui.dialog.dataset.version = String(versionOf(editor.detail));
      refreshEditorBase(serial);
      return;
    }
    showEditorError(frame.error);
  });
}

/** Fetches the stored detail view model after a conflict, for its strings and version only. */
function refreshEditorBase(serial) {
  request({ type: "RequestTodoDetailViewModel", payload: { todo: { id: editor.id } } }, "ResponseTodoDetailViewModel", (frame) => {
    if (!editor || editor.serial !== serial || frame.error) return;
    editor.detail = frame.payload;
    renderEditorBase(frame.payload);
  });
}

function closeEditor() {
  const returnFocus = editor?.returnFocus;
  const id = editor?.id;
  editor = null;
  if (ui.dialog.open) ui.dialog.close();
  delete ui.dialog.dataset.id;
  ui.dialog.removeAttribute("aria-busy");
  const target =
    returnFocus && returnFocus.isConnected && !returnFocus.disabled
      ? returnFocus
      : store.todos.get(id)?.li.querySelector(".edit-button") ?? ui.newTodo;
  target.focus();
}

ui.detailForm.addEventListener("submit", (event) => {
  event.preventDefault();
  saveEditor();
});
ui.detailCancel.addEventListener("click", () => closeEditor());
ui.dialog.addEventListener("cancel", (event) => {
  // Escape: the same as Cancel.
  event.preventDefault();
  closeEditor();
});
ui.detailDelete.addEventListener("click", () => {
  if (editor) saveEditor({ deleted: !editor.detail.deleted });
});
ui.reload.addEventListener("click", () => {
  if (!editor) return;
  const serial = editor.serial;
  request({ type: "RequestTodoDetailViewModel", payload: { todo: { id: editor.id } } }, "ResponseTodoDetailViewModel", (frame) => {
    if (!editor || editor.serial !== serial) return;
    if (frame.error) return showFieldError(ui.detailError, frame.error.message);
    editor.detail = frame.payload;
    fillEditor(frame.payload);
    showConflict(null);
    clearEditorErrors();
    ui.detailTitle.focus();
  });
});
for (const [name, field] of Object.entries(detailFields)) {
  const slot = ui.detailForm.querySelector(`.field-error[data-error-for="${name}"]`);
  field.addEventListener("input", () => showFieldError(slot, null, field));
}

// ---------------------------------------------------------------------------------------------
// Notices and announcements.

function notify(message, { kind = "info", action, onAction } = {}) {
  const notice = document.createElement("div");
  notice.className = `notice ${kind}`;
  notice.dataset.testid = "notice";
  notice.dataset.kind = kind;
  const text = document.createElement("span");
  text.textContent = message;
  notice.append(text);
  const dismiss = () => notice.remove();
  if (action) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = action;
    button.dataset.testid = "notice-action";
    button.addEventListener("click", () => {
      dismiss();
      onAction();
    });
    notice.append(button);
  }
  const close = document.createElement("button");
  close.type = "button";
  close.className = "notice-close";
  close.setAttribute("aria-label", "Dismiss");
  close.textContent = "×";
  close.addEventListener("click", dismiss);
  notice.append(close);
  ui.notices.append(notice);
  while (ui.notices.children.length > 3) ui.notices.firstElementChild.remove();
  let timer = setTimeout(dismiss, NOTICE_MS);
  // Keep it while the pointer or the keyboard focus is on it.
  notice.addEventListener("focusin", () => clearTimeout(timer));
  notice.addEventListener("mouseenter", () => clearTimeout(timer));
  notice.addEventListener("mouseleave", () => {
    clearTimeout(timer);
    timer = setTimeout(dismiss, NOTICE_MS);
  });
}

function announce(text) {
  ui.announcer.textContent = "";
  // A fresh text node makes screen readers read it even when it repeats.
  setTimeout(() => (ui.announcer.textContent = text), 30);
}

// ---------------------------------------------------------------------------------------------
// The connection: hello, resume/refetch, reconnect with back-off and jitter, draining.

const connection = {
  socket: null,
  live: false,
  attempt: 0,
  timer: null,
  countdown: null,
  helloTimer: null,
  pingTimer: null,
  pongTimer: null,
  /** ms the daemon asked us to wait (draining) before reconnecting. */
  drainDelay: null,
  epoch: null,
  lastSeq: null,
  /** Whether the list holds everything up to lastSeq (false until a list request is answered). */
  complete: false,
  nextId: 1,
  /** id -> { expect, handler, timer } */
  pending: new Map(),
  fetchId: null,
};

function socketURL() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/events`;
}

function setState(state, text, { retry = false } = {}) {
  ui.connection.dataset.state = state;
  ui.connectionText.textContent = text;
  ui.retry.hidden = !retry;
  ui.root.dataset.live = String(state === "online");
  ui.app.classList.toggle("stale", state !== "online");
}

function recordPosition() {
  ui.connection.dataset.epoch = connection.epoch ?? "";
  ui.connection.dataset.seq = connection.lastSeq === null ? "" : String(connection.lastSeq);
}

function connect() {
  clearTimeout(connection.timer);
  clearInterval(connection.countdown);
  connection.timer = null;
  if (connection.socket) return;
  setState("connecting", connection.attempt || store.loaded ? "Reconnecting…" : "Connecting…");
  let socket;
  try {
    socket = new WebSocket(socketURL());
  } catch (error) {
    scheduleReconnect();
    return;
  }
  connection.socket = socket;
  connection.helloTimer = setTimeout(() => socket.close(), HELLO_TIMEOUT_MS);
  socket.addEventListener("message", (event) => {
    if (socket !== connection.socket) return;
    if (typeof event.data !== "string") return;
    let frame;
    try {
      frame = JSON.parse(event.data);
    } catch {
      return;
    }
    if (frame && typeof frame === "object") handleFrame(frame);
  });
  socket.addEventListener("close", () => {
    if (socket !== connection.socket) return;
    disconnected();
  });
}

function disconnected() {
  clearTimeout(connection.helloTimer);
  clearInterval(connection.pingTimer);
  clearTimeout(connection.pongTimer);
  connection.socket = null;
  connection.live = false;
  connection.fetchId = null;
  const pending = [...connection.pending.values()];
  connection.pending.clear();
  for (const request of pending) {
    clearTimeout(request.timer);
    request.handler({
      error: { code: "disconnected", message: "The connection was lost before the server answered. Please try again." },
    });
  }
  scheduleReconnect();
}

function scheduleReconnect() {
  let delay;
  if (connection.drainDelay !== null) {
    // Draining: wait what the daemon asked, plus jitter so that every page does not return at once.
    delay = connection.drainDelay + Math.random() * Math.min(1000, connection.drainDelay / 2 + 250);
    connection.drainDelay = null;
  } else {
    const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** connection.attempt);
    delay = ceiling / 2 + Math.random() * (ceiling / 2);
  }
  connection.attempt++;
  const wakeAt = Date.now() + delay;
  const draining = ui.connection.dataset.state === "draining";
  const tick = () => {
    const seconds = Math.max(1, Math.ceil((wakeAt - Date.now()) / 1000));
    setState(
      draining ? "draining" : "offline",
      draining ? `Server restarting · reconnecting in ${seconds} s` : `Offline · retrying in ${seconds} s`,
      { retry: true },
    );
  };
  tick();
  clearInterval(connection.countdown);
  connection.countdown = setInterval(tick, 1000);
  clearTimeout(connection.timer);
  connection.timer = setTimeout(connect, delay);
}

function reconnectNow() {
  if (connection.socket) return;
  connection.attempt = 0;
  connect();
}

ui.retry.addEventListener("click", reconnectNow);
window.addEventListener("online", reconnectNow);
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible" && !connection.socket && connection.timer) reconnectNow();
});
window.addEventListener("pagehide", () => connection.socket?.close(1001));

function send(frame) {
  const socket = connection.socket;
  if (!socket || socket.readyState !== WebSocket.OPEN) return false;
  socket.send(JSON.stringify(frame));
  return true;
}

/**
 * Sends a frame with a fresh id; `handler` gets the first answer whose `re` is that id and
 * whose `type` (or `op`) is `expect` — or an `op:error`, or a local error when the connection
 * is lost or no answer comes.
 */
function request(frame, expect, handler) {
  const id = connection.nextId++;
  const entry = { expect: Array.isArray(expect) ? expect : [expect], handler };
  if (!send({ ...frame, id })) {
    handler({ error: { code: "disconnected", message: "Not connected to the server. Please try again." } });
    return id;
  }
  entry.timer = setTimeout(() => {
    if (connection.pending.get(id) !== entry) return;
    connection.pending.delete(id);
    handler({ error: { code: "timeout", message: "The server did not answer in time. Please try again." } });
  }, REQUEST_TIMEOUT_MS);
  connection.pending.set(id, entry);
  return id;
}

function handleFrame(frame) {
  if (frame.op === "hello") return hello(frame);
  if (frame.op === "draining") return draining(frame);

  // A broadcast: apply it in seq order (a copy of one caused by us carries `re` as well).
  if (typeof frame.seq === "number") applyBroadcast(frame);

  if (frame.re !== undefined && connection.pending.has(frame.re)) {
    const entry = connection.pending.get(frame.re);
    const name = frame.type ?? frame.op;
    if (entry.expect.includes(name) || frame.op === "error") {
      connection.pending.delete(frame.re);
      clearTimeout(entry.timer);
      entry.handler(frame);
    }
    return;
  }
  if (frame.op === "error" && frame.error) {
    notify(frame.error.message, { kind: "error" });
  }
}

function applyBroadcast(frame) {
  const missed = connection.lastSeq !== null && frame.seq > connection.lastSeq + 1 && connection.live;
  if (connection.lastSeq !== null && frame.seq <= connection.lastSeq) return; // already seen
  connection.lastSeq = frame.seq;
  recordPosition();
  if (frame.type === RESPONSE_TODO && frame.payload) applyTodo(frame.payload, { animate: store.loaded });
  // Broadcasts were missed without a `gap` being said: the list may be stale, so reload it.
  if (missed) refetch();
}

function hello(frame) {
  clearTimeout(connection.helloTimer);
  connection.attempt = 0;
  connection.drainDelay = null;
  connection.server = frame;
  ui.connection.dataset.session = frame.session ?? "";
  setState("syncing", "Syncing…");
  if (frame.auth === "required") {
    const token = savedToken();
    if (!token) return askForToken(null);
    return authenticate(token);
  }
  startSession(frame);
}

function startSession(greeting) {
  if (connection.epoch === null || connection.lastSeq === null || !connection.complete) {
    // The first connection (or the last list request never got its answer): load the whole
    // list, then follow the broadcasts after hello.seq.
    return refetchFrom(greeting, store.loaded ? "refetched" : "loaded");
  }
  // Back after a disconnect: ask for exactly what was missed. With another epoch (the journal
  // was reset) the answer is `gap`; until it comes, seqs of the new epoch are not filtered.
  const after = connection.lastSeq;
  const epoch = connection.epoch;
  if (greeting.epoch !== epoch) connection.lastSeq = null;
  request({ op: "resume", epoch, after }, ["resumed", "gap"], (frame) => {
    if (frame.op === "resumed") {
      connection.epoch = greeting.epoch;
      if (connection.lastSeq === null || connection.lastSeq < after) connection.lastSeq = after;
      recordPosition();
      ui.connection.dataset.sync = "resumed";
      return goLive();
    }
    if (frame.op === "gap") {
      return refetchFrom({ epoch: frame.epoch ?? greeting.epoch, seq: frame.seq ?? greeting.seq }, "refetched");
    }
    if (frame.error?.code !== "disconnected") refetchFrom(greeting, "refetched");
  });
}

function refetchFrom(position, how) {
  connection.epoch = position.epoch;
  connection.lastSeq = typeof position.seq === "number" ? position.seq : 0;
  recordPosition();
  refetch(how);
}

function refetch(how = "refetched") {
  if (connection.fetchId !== null) return;
  connection.complete = false;
  store.touched.clear();
  connection.fetchId = request({ type: "RequestTodoViewModels" }, "ResponseTodoViewModels", (frame) => {
    connection.fetchId = null;
    if (frame.error) {
      if (frame.error.code === "disconnected") return;
      notify(frame.error.message, { kind: "error" });
      connection.socket?.close();
      return;
    }
    applySnapshot(Array.isArray(frame.payload) ? frame.payload : []);
    connection.complete = true;
    ui.connection.dataset.sync = how;
    goLive();
  });
}

function goLive() {
  connection.live = true;
  setState("online", "Live");
  ui.authForm.hidden = true;
  clearInterval(connection.pingTimer);
  connection.pingTimer = setInterval(ping, PING_EVERY_MS);
}

function ping() {
  const socket = connection.socket;
  if (!socket) return;
  clearTimeout(connection.pongTimer);
  connection.pongTimer = setTimeout(() => socket.close(), PONG_TIMEOUT_MS);
  request({ op: "ping" }, "pong", () => clearTimeout(connection.pongTimer));
}

function draining(frame) {
  const after = Number(frame.reconnect_after_ms);
  connection.drainDelay = Number.isFinite(after) && after >= 0 ? Math.min(after, 5 * 60 * 1000) : 1000;
  ui.connection.dataset.drainAfterMs = String(connection.drainDelay);
  connection.live = false;
  setState("draining", "Server restarting…");
  // The daemon closes the connection; if it does not, close it once its queue had time to flush.
  const socket = connection.socket;
  setTimeout(() => {
    if (connection.socket === socket) socket?.close();
  }, 5000);
}

// Access tokens, for daemons that require auth (kept for this tab only).

function savedToken() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem("todostream-token", fromHash);
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("todostream-token");
}

function askForToken(message) {
  setState("auth", "Needs an access token");
  ui.authForm.hidden = false;
  showFieldError(ui.authError, message, ui.authToken);
  ui.authToken.focus();
}

function authenticate(token) {
  request({ op: "auth", token }, "authenticated", (frame) => {
    if (frame.error) {
      if (frame.error.code === "disconnected") return;
      sessionStorage.removeItem("todostream-token");
      return askForToken(frame.error.message);
    }
    ui.authForm.hidden = true;
    startSession(connection.server);
  });
}

ui.authForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const token = ui.authToken.value.trim();
  if (!token) return;
  sessionStorage.setItem("todostream-token", token);
  ui.authToken.value = "";
  if (connection.socket && connection.server?.auth === "required") authenticate(token);
  else reconnectNow();
});

// ---------------------------------------------------------------------------------------------

renderFooter();
connect();
