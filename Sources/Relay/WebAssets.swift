// The web frontend, embedded at build time by scripts/embed-web from web/.
// Do not edit by hand: edit web/ and run scripts/embed-web.

struct WebAsset: Sendable {
    let contentType: String
    let bytes: [UInt8]
}

enum WebAssets {
    static let files: [String: WebAsset] = [
        "/app.js": WebAsset(
            contentType: "text/javascript; charset=utf-8",
            bytes: Array(
                #"""
                // todostream web frontend: a pure view client of the daemon's event stream.
                //
                // It publishes only the six view-layer requests (PROTOCOL.md §6) over the WebSocket at
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

                """#.utf8
            )
        ),
        "/favicon.svg": WebAsset(
            contentType: "image/svg+xml",
            bytes: Array(
                #"""
                <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#b83f45"/><path d="M9 16.5l5 5 9-11" fill="none" stroke="#fff" stroke-width="3.5" stroke-linecap="round" stroke-linejoin="round"/></svg>

                """#.utf8
            )
        ),
        "/index.html": WebAsset(
            contentType: "text/html; charset=utf-8",
            bytes: Array(
                #"""
                <!doctype html>
                <html lang="en">
                <head>
                <meta charset="utf-8">
                <meta name="viewport" content="width=device-width, initial-scale=1">
                <meta name="color-scheme" content="light">
                <title>todos · todostream</title>
                <link rel="icon" href="/favicon.svg" type="image/svg+xml">
                <link rel="stylesheet" href="/style.css">
                <script type="module" src="/app.js"></script>
                </head>
                <body>
                <a class="skip-link" href="#new-todo">Skip to the new todo field</a>

                <section class="todoapp" data-testid="app" aria-labelledby="app-title">
                  <header class="header">
                    <h1 id="app-title">todos</h1>
                    <div class="connection" data-testid="connection" data-state="connecting" role="status" aria-live="polite">
                      <span class="connection-dot" aria-hidden="true"></span>
                      <span class="connection-text" data-testid="connection-text">Connecting…</span>
                      <button type="button" class="connection-retry" data-testid="connection-retry" hidden>Retry now</button>
                    </div>
                    <form class="auth-form" data-testid="auth-form" hidden>
                      <label for="auth-token">This server needs an access token</label>
                      <div class="auth-row">
                        <input id="auth-token" class="auth-token" data-testid="auth-token" type="password" autocomplete="off" required>
                        <button type="submit" data-testid="auth-submit">Connect</button>
                      </div>
                      <p class="field-error" id="auth-error" data-testid="auth-error" hidden></p>
                    </form>
                    <form class="new-todo-form" data-testid="new-todo-form" autocomplete="off">
                      <label for="new-todo" class="visually-hidden">New todo</label>
                      <input id="new-todo" class="new-todo" data-testid="new-todo" placeholder="What needs to be done?"
                             autofocus aria-describedby="new-todo-error" enterkeyhint="done">
                      <p class="field-error" id="new-todo-error" data-testid="new-todo-error" data-error-for="new-todo" hidden></p>
                    </form>
                  </header>

                  <section class="main" data-testid="main" aria-label="Todo list">
                    <p class="empty" data-testid="empty" hidden>Nothing to do yet.</p>
                    <ul class="todo-list" data-testid="todo-list" aria-labelledby="app-title"></ul>
                  </section>

                  <footer class="footer" data-testid="footer">
                    <span class="todo-count" data-testid="todo-count" aria-live="polite"><strong>0</strong> items left</span>
                    <span class="hint">Enter adds · double-click a title to edit</span>
                  </footer>
                </section>

                <div class="notices" data-testid="notices" role="alert" aria-live="assertive"></div>
                <div class="visually-hidden" data-testid="announcer" aria-live="polite" id="announcer"></div>

                <dialog class="detail" data-testid="detail" aria-labelledby="detail-heading">
                  <form class="detail-form" data-testid="detail-form" method="dialog" novalidate>
                    <header class="detail-header">
                      <h2 id="detail-heading">Edit todo</h2>
                      <p class="detail-state" data-testid="detail-state">
                        <span class="chip" data-testid="detail-priority-string"></span>
                        <span class="chip" data-testid="detail-completed-string"></span>
                      </p>
                    </header>

                    <div class="conflict" data-testid="detail-conflict" role="alert" hidden>
                      <p class="conflict-message" data-testid="detail-conflict-message"></p>
                      <p class="conflict-label">Current state:</p>
                      <div class="conflict-current" data-testid="detail-conflict-current">
                        <span class="conflict-title" data-testid="detail-conflict-title"></span>
                        <span class="conflict-subtitle" data-testid="detail-conflict-subtitle"></span>
                        <span class="conflict-complete" data-testid="detail-conflict-complete"></span>
                      </div>
                      <p class="conflict-help">Your edit is kept below. Save again to replace the current state with it, or
                        <button type="button" class="link-button" data-testid="detail-reload">load the current state</button>.</p>
                    </div>

                    <div class="field">
                      <label for="detail-title">Title</label>
                      <input id="detail-title" name="title" data-testid="detail-title" autocomplete="off"
                             aria-describedby="detail-title-error">
                      <p class="field-error" id="detail-title-error" data-testid="detail-title-error" data-error-for="title" hidden></p>
                    </div>

                    <div class="field">
                      <label for="detail-subtitle">Subtitle</label>
                      <textarea id="detail-subtitle" name="subtitle" data-testid="detail-subtitle" rows="3"
                                aria-describedby="detail-subtitle-error"></textarea>
                      <p class="field-error" id="detail-subtitle-error" data-testid="detail-subtitle-error" data-error-for="subtitle" hidden></p>
                    </div>

                    <fieldset class="field priority" aria-describedby="detail-priority-error">
                      <legend>Priority</legend>
                      <label class="choice"><input type="radio" name="priority" value="high" data-testid="detail-priority-high"> HIGH</label>
                      <label class="choice"><input type="radio" name="priority" value="normal" data-testid="detail-priority-normal"> NORMAL</label>
                      <p class="field-error" id="detail-priority-error" data-testid="detail-priority-error" data-error-for="priority" hidden></p>
                    </fieldset>

                    <div class="field">
                      <label class="choice"><input type="checkbox" id="detail-completed" name="completed" data-testid="detail-completed"
                             aria-describedby="detail-completed-error"> Completed</label>
                      <p class="field-error" id="detail-completed-error" data-testid="detail-completed-error" data-error-for="completed" hidden></p>
                    </div>

                    <p class="field-error detail-error" data-testid="detail-error" data-error-for="" hidden></p>

                    <div class="detail-actions">
                      <button type="submit" value="save" class="primary" data-testid="detail-save">Save</button>
                      <button type="button" value="cancel" data-testid="detail-cancel">Cancel</button>
                      <button type="button" class="danger" data-testid="detail-delete"></button>
                    </div>
                  </form>
                </dialog>

                <noscript><p class="noscript">This page needs JavaScript to show the live todo list.</p></noscript>
                </body>
                </html>

                """#.utf8
            )
        ),
        "/style.css": WebAsset(
            contentType: "text/css; charset=utf-8",
            bytes: Array(
                #"""
                /* todostream web frontend — TodoMVC-style markup and look, no framework. */

                :root {
                  --accent: #b83f45;
                  --accent-dark: #8f2f34;
                  --text: #1f1f1f;
                  --muted: #5f5f5f;
                  --line: #e6e6e6;
                  --page: #f5f5f5;
                  --card: #fff;
                  --ok: #2e7d32;
                  --warn: #a15c00;
                  --bad: #b3261e;
                  --focus: #1a5fb4;
                  --radius: 6px;
                  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
                  font-size: 16px;
                  line-height: 1.4;
                  color: var(--text);
                  background: var(--page);
                  -webkit-text-size-adjust: 100%;
                }

                *,
                *::before,
                *::after {
                  box-sizing: border-box;
                }

                body {
                  margin: 0;
                  padding: 0 1rem 6rem;
                  min-width: 240px;
                }

                button,
                input,
                textarea {
                  font: inherit;
                  color: inherit;
                }

                :focus-visible {
                  outline: 3px solid var(--focus);
                  outline-offset: 2px;
                }

                [hidden] {
                  display: none !important;
                }

                .visually-hidden {
                  position: absolute !important;
                  width: 1px;
                  height: 1px;
                  margin: -1px;
                  padding: 0;
                  overflow: hidden;
                  clip: rect(0 0 0 0);
                  white-space: nowrap;
                  border: 0;
                }

                .skip-link {
                  position: absolute;
                  left: 1rem;
                  top: -3rem;
                  padding: 0.5rem 0.75rem;
                  background: var(--card);
                  border-radius: var(--radius);
                  z-index: 10;
                }

                .skip-link:focus {
                  top: 0.5rem;
                }

                /* The app card */

                .todoapp {
                  max-width: 550px;
                  margin: 0 auto;
                }

                .header h1 {
                  margin: 1.5rem 0 0.25rem;
                  text-align: center;
                  font-size: clamp(3rem, 14vw, 5.5rem);
                  font-weight: 200;
                  line-height: 1.1;
                  letter-spacing: -0.02em;
                  color: var(--accent);
                }

                /* Connection indicator */

                .connection {
                  display: flex;
                  align-items: center;
                  justify-content: center;
                  flex-wrap: wrap;
                  gap: 0.5rem;
                  min-height: 2rem;
                  margin-bottom: 0.75rem;
                  font-size: 0.875rem;
                  color: var(--muted);
                }

                .connection-dot {
                  width: 0.625rem;
                  height: 0.625rem;
                  border-radius: 50%;
                  background: var(--warn);
                  box-shadow: 0 0 0 3px rgb(161 92 0 / 0.15);
                }

                .connection[data-state="online"] .connection-dot {
                  background: var(--ok);
                  box-shadow: 0 0 0 3px rgb(46 125 50 / 0.15);
                }

                .connection[data-state="offline"] .connection-dot,
                .connection[data-state="auth"] .connection-dot {
                  background: var(--bad);
                  box-shadow: 0 0 0 3px rgb(179 38 30 / 0.15);
                }

                .connection[data-state="connecting"] .connection-dot,
                .connection[data-state="syncing"] .connection-dot,
                .connection[data-state="draining"] .connection-dot {
                  animation: pulse 1s ease-in-out infinite alternate;
                }

                .connection-retry,
                .link-button {
                  padding: 0.125rem 0.5rem;
                  border: 1px solid currentColor;
                  border-radius: var(--radius);
                  background: transparent;
                  color: var(--focus);
                  cursor: pointer;
                }

                .link-button {
                  padding: 0;
                  border: 0;
                  text-decoration: underline;
                }

                /* Token form (only when the daemon requires auth) */

                .auth-form {
                  margin: 0 0 1rem;
                  padding: 0.75rem 1rem;
                  background: var(--card);
                  border-radius: var(--radius);
                  box-shadow: 0 1px 3px rgb(0 0 0 / 0.15);
                }

                .auth-row {
                  display: flex;
                  gap: 0.5rem;
                  margin-top: 0.375rem;
                }

                .auth-row input {
                  flex: 1;
                  min-width: 0;
                  padding: 0.5rem;
                  border: 1px solid #bbb;
                  border-radius: var(--radius);
                }

                .auth-row button {
                  padding: 0.5rem 1rem;
                  border: 0;
                  border-radius: var(--radius);
                  background: var(--accent);
                  color: #fff;
                  cursor: pointer;
                }

                /* New todo */

                .new-todo-form {
                  position: relative;
                  background: var(--card);
                  border-radius: var(--radius) var(--radius) 0 0;
                  box-shadow: 0 2px 4px rgb(0 0 0 / 0.12), 0 20px 40px rgb(0 0 0 / 0.06);
                }

                .new-todo {
                  display: block;
                  width: 100%;
                  padding: 1rem 1rem 1rem 3.75rem;
                  border: 0;
                  border-bottom: 1px solid var(--line);
                  border-radius: var(--radius) var(--radius) 0 0;
                  background: transparent;
                  font-size: 1.375rem;
                  line-height: 1.4;
                }

                .new-todo::placeholder {
                  font-style: italic;
                  color: #8a8a8a;
                }

                .new-todo:focus-visible {
                  outline: 0;
                  box-shadow: inset 0 0 0 2px var(--focus);
                }

                .new-todo[aria-busy="true"] {
                  color: var(--muted);
                }

                .field-error {
                  margin: 0.25rem 0 0;
                  color: var(--bad);
                  font-size: 0.9rem;
                }

                .field-error::before {
                  content: "⚠ ";
                }

                .new-todo-form .field-error {
                  margin: 0;
                  padding: 0.5rem 1rem 0.625rem 3.75rem;
                  border-bottom: 1px solid var(--line);
                  background: #fdf0ef;
                }

                /* The list */

                .main {
                  background: var(--card);
                  box-shadow: 0 2px 4px rgb(0 0 0 / 0.12);
                }

                .todoapp.stale .main {
                  opacity: 0.7;
                }

                .empty {
                  margin: 0;
                  padding: 1.25rem 1rem 1.25rem 3.75rem;
                  color: var(--muted);
                  font-style: italic;
                }

                .todo-list {
                  margin: 0;
                  padding: 0;
                  list-style: none;
                }

                .todo-list li {
                  position: relative;
                  border-bottom: 1px solid var(--line);
                  background: var(--card);
                  overflow: hidden;
                }

                .todo-list li .view {
                  display: flex;
                  align-items: center;
                  gap: 0.5rem;
                  min-height: 3.75rem;
                  padding: 0.5rem 0.5rem 0.5rem 0.75rem;
                }

                .todo-list li .toggle {
                  appearance: none;
                  flex: none;
                  width: 2.125rem;
                  height: 2.125rem;
                  margin: 0;
                  border: 2px solid #c9c9c9;
                  border-radius: 50%;
                  background: var(--card);
                  cursor: pointer;
                }

                .todo-list li .toggle:checked {
                  border-color: #5dc2af;
                  background: #5dc2af
                    url("data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 20 20'%3E%3Cpath d='M5 10.5l3.2 3.2L15 6.5' fill='none' stroke='white' stroke-width='2.4' stroke-linecap='round' stroke-linejoin='round'/%3E%3C/svg%3E")
                    center / 70% no-repeat;
                }

                .todo-list li .text {
                  flex: 1;
                  min-width: 0;
                  display: flex;
                  flex-direction: column;
                }

                .todo-list li .title {
                  display: block;
                  font-size: 1.25rem;
                  overflow-wrap: anywhere;
                  cursor: default;
                  transition: color 0.3s;
                }

                .todo-list li.completed .title {
                  color: #8a8a8a;
                  text-decoration: line-through;
                }

                .todo-list li .subtitle {
                  font-size: 0.8rem;
                  letter-spacing: 0.02em;
                  color: var(--muted);
                }

                .todo-list li.high .subtitle {
                  color: var(--accent-dark);
                  font-weight: 600;
                }

                .edit-button,
                .destroy {
                  flex: none;
                  min-width: 2.75rem;
                  min-height: 2.75rem;
                  border: 0;
                  border-radius: var(--radius);
                  background: transparent;
                  cursor: pointer;
                }

                .edit-button {
                  padding: 0 0.5rem;
                  font-size: 0.875rem;
                  color: var(--focus);
                }

                .edit-button:hover {
                  background: #eef3fb;
                }

                .destroy {
                  font-size: 1.75rem;
                  line-height: 1;
                  color: #a05a5e;
                  opacity: 0.55;
                  transition: opacity 0.15s, color 0.15s;
                }

                .destroy::after {
                  content: "×";
                }

                .todo-list li:hover .destroy,
                .destroy:focus-visible {
                  opacity: 1;
                }

                .destroy:hover {
                  color: var(--bad);
                }

                .todo-list li[aria-busy="true"] .view {
                  opacity: 0.6;
                }

                /* Live changes */

                .todo-list li.inserted {
                  animation: todo-in 0.3s ease-out;
                }

                .todo-list li.updated {
                  animation: todo-flash 0.8s ease-out;
                }

                .todo-list li.removing {
                  pointer-events: none;
                  animation: todo-out 0.28s ease-in forwards;
                }

                @keyframes todo-in {
                  from {
                    max-height: 0;
                    opacity: 0;
                    transform: translateY(-0.5rem);
                    background: #fff8d6;
                  }
                  to {
                    max-height: 12rem;
                    opacity: 1;
                    transform: none;
                  }
                }

                @keyframes todo-flash {
                  from {
                    background: #fff3b0;
                  }
                  to {
                    background: var(--card);
                  }
                }

                @keyframes todo-out {
                  from {
                    max-height: 12rem;
                    opacity: 1;
                  }
                  to {
                    max-height: 0;
                    opacity: 0;
                    transform: translateX(2rem);
                  }
                }

                @keyframes pulse {
                  from {
                    opacity: 0.35;
                  }
                  to {
                    opacity: 1;
                  }
                }

                @media (prefers-reduced-motion: reduce) {
                  *,
                  *::before,
                  *::after {
                    animation: none !important;
                    transition: none !important;
                  }
                }

                /* Footer */

                .footer {
                  display: flex;
                  flex-wrap: wrap;
                  justify-content: space-between;
                  gap: 0.25rem 1rem;
                  padding: 0.625rem 1rem;
                  border-radius: 0 0 var(--radius) var(--radius);
                  background: var(--card);
                  box-shadow: 0 2px 4px rgb(0 0 0 / 0.12), 0 8px 0 -3px #f6f6f6, 0 9px 1px -3px rgb(0 0 0 / 0.2);
                  font-size: 0.875rem;
                  color: var(--muted);
                }

                .hint {
                  color: #767676;
                }

                /* Notices */

                .notices {
                  position: fixed;
                  left: 50%;
                  bottom: 1rem;
                  transform: translateX(-50%);
                  display: flex;
                  flex-direction: column;
                  gap: 0.5rem;
                  width: min(550px, calc(100% - 2rem));
                  z-index: 20;
                }

                .notice {
                  display: flex;
                  align-items: center;
                  gap: 0.75rem;
                  padding: 0.625rem 0.5rem 0.625rem 1rem;
                  border-radius: var(--radius);
                  background: #2b2b2b;
                  color: #fff;
                  box-shadow: 0 4px 12px rgb(0 0 0 / 0.25);
                  animation: todo-in 0.2s ease-out;
                }

                .notice.error {
                  background: var(--bad);
                }

                .notice span {
                  flex: 1;
                }

                .notice button {
                  min-height: 2.25rem;
                  padding: 0 0.75rem;
                  border: 1px solid rgb(255 255 255 / 0.6);
                  border-radius: var(--radius);
                  background: transparent;
                  color: #fff;
                  cursor: pointer;
                }

                .notice .notice-close {
                  border-color: transparent;
                  font-size: 1.25rem;
                }

                .notice :focus-visible {
                  outline-color: #fff;
                }

                /* The detail editor */

                .detail {
                  width: min(30rem, calc(100% - 2rem));
                  max-height: calc(100% - 2rem);
                  padding: 0;
                  border: 0;
                  border-radius: 10px;
                  box-shadow: 0 12px 40px rgb(0 0 0 / 0.3);
                }

                .detail::backdrop {
                  background: rgb(0 0 0 / 0.35);
                }

                .detail-form {
                  display: flex;
                  flex-direction: column;
                  gap: 1rem;
                  padding: 1.25rem;
                }

                .detail-header {
                  display: flex;
                  flex-wrap: wrap;
                  align-items: baseline;
                  justify-content: space-between;
                  gap: 0.5rem;
                }

                .detail-header h2 {
                  margin: 0;
                  font-size: 1.25rem;
                }

                .detail-state {
                  display: flex;
                  gap: 0.375rem;
                  margin: 0;
                }

                .chip {
                  padding: 0.125rem 0.5rem;
                  border-radius: 999px;
                  background: #eee;
                  font-size: 0.75rem;
                  font-weight: 600;
                  letter-spacing: 0.03em;
                  color: #444;
                }

                .chip[data-priority="high"] {
                  background: #f8e0e1;
                  color: var(--accent-dark);
                }

                .chip[data-completed="true"] {
                  background: #dcf1ec;
                  color: #1f6b5d;
                }

                .field {
                  display: flex;
                  flex-direction: column;
                  gap: 0.25rem;
                  margin: 0;
                }

                .field > label,
                .field legend {
                  font-weight: 600;
                  font-size: 0.9rem;
                }

                .field input:not([type]),
                .field textarea {
                  width: 100%;
                  padding: 0.5rem 0.625rem;
                  border: 1px solid #b5b5b5;
                  border-radius: var(--radius);
                  background: #fff;
                }

                .field textarea {
                  resize: vertical;
                  min-height: 4.5rem;
                }

                .field [aria-invalid="true"] {
                  border-color: var(--bad);
                  box-shadow: 0 0 0 1px var(--bad);
                }

                fieldset.field {
                  flex-direction: row;
                  flex-wrap: wrap;
                  align-items: center;
                  gap: 0.25rem 1.25rem;
                  padding: 0;
                  border: 0;
                }

                fieldset.field legend {
                  float: left;
                  width: 100%;
                  margin-bottom: 0.25rem;
                  padding: 0;
                }

                fieldset.field .field-error {
                  width: 100%;
                }

                .choice,
                .field > label.choice {
                  font-weight: 400;
                  font-size: 1rem;
                  display: inline-flex;
                  align-items: center;
                  gap: 0.5rem;
                  min-height: 2.75rem;
                  cursor: pointer;
                }

                .choice input {
                  width: 1.25rem;
                  height: 1.25rem;
                  margin: 0;
                  accent-color: var(--accent);
                }

                .conflict {
                  padding: 0.75rem 1rem;
                  border-left: 4px solid var(--warn);
                  border-radius: var(--radius);
                  background: #fff6e5;
                  font-size: 0.9rem;
                }

                .conflict p {
                  margin: 0 0 0.375rem;
                }

                .conflict-label {
                  font-weight: 600;
                }

                .conflict-current {
                  display: flex;
                  flex-direction: column;
                  margin-bottom: 0.5rem;
                  padding: 0.375rem 0.625rem;
                  border-radius: var(--radius);
                  background: #fff;
                }

                .conflict-current.completed .conflict-title {
                  text-decoration: line-through;
                  color: #8a8a8a;
                }

                .conflict-title {
                  font-size: 1.05rem;
                }

                .conflict-subtitle,
                .conflict-complete {
                  font-size: 0.8rem;
                  color: var(--muted);
                }

                .detail-error {
                  margin: 0;
                }

                .detail-actions {
                  display: flex;
                  flex-wrap: wrap;
                  gap: 0.5rem;
                }

                .detail-actions button {
                  min-height: 2.75rem;
                  padding: 0 1.125rem;
                  border: 1px solid #b5b5b5;
                  border-radius: var(--radius);
                  background: #fff;
                  cursor: pointer;
                }

                .detail-actions .primary {
                  border-color: var(--accent);
                  background: var(--accent);
                  color: #fff;
                }

                .detail-actions .danger {
                  margin-left: auto;
                  border-color: transparent;
                  color: var(--bad);
                }

                .detail-actions .danger[data-deleted="true"] {
                  color: var(--ok);
                }

                .detail[aria-busy="true"] .detail-actions button {
                  opacity: 0.6;
                }

                .noscript {
                  text-align: center;
                }

                /* Phone width */

                @media (max-width: 480px) {
                  body {
                    padding: 0 0.5rem 6rem;
                  }

                  .header h1 {
                    margin-top: 0.75rem;
                  }

                  .new-todo {
                    padding-left: 1rem;
                    font-size: 1.125rem;
                  }

                  .new-todo-form .field-error,
                  .empty {
                    padding-left: 1rem;
                  }

                  .todo-list li .view {
                    gap: 0.375rem;
                    padding-left: 0.5rem;
                  }

                  .todo-list li .title {
                    font-size: 1.0625rem;
                  }

                  .destroy {
                    opacity: 0.8;
                  }

                  .hint {
                    display: none;
                  }

                  .detail-form {
                    padding: 1rem;
                  }

                  .detail-actions .danger {
                    margin-left: 0;
                  }
                }

                """#.utf8
            )
        ),
    ]
}
