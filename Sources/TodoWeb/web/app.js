// todostream web frontend: a pure view client of the daemon's event stream.
//
// It publishes only the six view-layer requests (docs/PROTOCOL.md §6) and renders the view
// models it receives. The connection — reconnects, resume, `gap`, request correlation and the
// outbox of writes made while offline — is todostream.js; this file is the view. Writes are
// shown at once, marked as pending, until the daemon confirms them (a broadcast with their
// `mid`) or refuses them (the edit is rolled back and the daemon's message shown).

import { OutboxFullError, TodoStream } from "./todostream.js";

const RESPONSE_TODO = "ResponseTodoViewModel";
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
  /**
   * id -> { vm, rank, li, overlays, local }: `vm` is what the daemon last said; `overlays` are
   * this page's writes not confirmed yet ({ mid, kind, patch, settled, appliedVersion }), shown
   * on top of it; `local` marks a todo created here and not yet confirmed.
   */
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
    existing.local = false;
    dropSettled(existing);
    render(existing);
    if (animate) flash(existing.li, "updated");
  } else {
    const entry = { vm, rank: ++store.rank, li: createItem(vm), overlays: [], local: false };
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
        existing.local = false;
        dropSettled(existing);
        render(existing);
        if (animate) flash(existing.li, "updated");
      }
    } else if (!vm.deleted) {
      const entry = { vm, rank, li: createItem(vm), overlays: [], local: false };
      store.todos.set(id, entry);
      if (animate) flash(entry.li, "inserted");
    }
  }
  for (const id of [...store.todos.keys()]) {
    const entry = store.todos.get(id);
    if (entry.local) continue; // created here, not sent yet
    if (!present.has(id) && !store.touched.has(id)) removeEntry(id, { animate, announce: false });
    else if (entry.overlays.some((overlay) => overlay.settled)) {
      // Writes the daemon answered whose broadcast this list now holds (or never will send).
      entry.overlays = entry.overlays.filter((overlay) => !overlay.settled);
      render(entry);
    }
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
  const open = [...store.todos.values()].filter(
    (entry) => !displayed(entry).complete && pendingKind(entry) !== "delete",
  ).length;
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
    // The box shows the pending toggle once it is queued (render), not the click itself.
    toggle.checked = entry ? !!displayed(entry).complete : toggle.checked;
    if (entry && pendingKind(entry) !== "delete") toggleTodo(entry);
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
  const marker = document.createElement("span");
  marker.className = "pending-marker";
  marker.dataset.testid = "todo-pending";
  marker.hidden = true;
  text.append(label, subtitle, marker);

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
  renderItem(li, vm, null);
  return li;
}

function entryFor(li) {
  const entry = store.todos.get(li.dataset.id);
  return entry && entry.li === li ? entry : undefined;
}

/** The row as this page shows it: the daemon's view model with the pending writes on top. */
function displayed(entry) {
  return entry.overlays.reduce((vm, overlay) => overlay.patch(vm), entry.vm);
}

/** The kind of the newest pending write on a row ("toggle", "delete", "save", "create"), or null. */
function pendingKind(entry) {
  const open = entry.overlays.filter((overlay) => !overlay.settled);
  if (open.some((overlay) => overlay.kind === "delete")) return "delete";
  return open.length ? open[open.length - 1].kind : entry.overlays.length ? "save" : null;
}

function render(entry) {
  renderItem(entry.li, displayed(entry), pendingKind(entry));
}

/** Forgets writes that were answered and whose version the row's view model has reached. */
function dropSettled(entry) {
  const version = versionOf(entry.vm);
  entry.overlays = entry.overlays.filter((overlay) => !(overlay.settled && overlay.appliedVersion <= version));
}

const PENDING_TEXT = {
  toggle: "not saved yet",
  save: "not saved yet",
  create: "not saved yet",
  delete: "delete not sent yet",
};

function renderItem(li, vm, pending) {
  li.classList.toggle("completed", !!vm.complete);
  li.classList.toggle("high", vm.todo.priority === "high");
  li.classList.toggle("pending", !!pending);
  li.classList.toggle("pending-delete", pending === "delete");
  li.dataset.version = String(versionOf(vm));
  li.dataset.complete = String(!!vm.complete);
  if (pending) li.dataset.pending = pending;
  else delete li.dataset.pending;
  const marker = li.querySelector(".pending-marker");
  marker.hidden = !pending;
  marker.textContent = pending ? (client.live ? "Saving…" : `Pending · ${PENDING_TEXT[pending]}`) : "";
  li.removeAttribute("aria-busy");
  const toggle = li.querySelector(".toggle");
  toggle.checked = !!vm.complete;
  // A row waiting to be deleted is not toggled: the toggle would apply to the deleted todo.
  toggle.disabled = pending === "delete";
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

// ---------------------------------------------------------------------------------------------
// Actions: each one is a view-layer request. Writes go through the client's outbox: shown at
// once as pending, sent now or after the next resume, confirmed by their broadcast.

/** The version a write on this row must name: the stored one plus this page's pending writes. */
function expectedVersion(entry, base = entry.vm) {
  return Math.max(0, versionOf(base)) + entry.overlays.filter((overlay) => !overlay.settled).length;
}

/**
 * Queues `frame` in the outbox and shows it on the row of `id` (when listed) through `patch`.
 * Returns the client's { mid, done }, or null when the outbox is full (the user is told).
 */
function queueWrite(id, kind, frame, patch, { editorSerial = null } = {}) {
  let write;
  try {
    write = client.write(frame);
  } catch (error) {
    if (!(error instanceof OutboxFullError)) throw error;
    notify(error.message, { kind: "error", code: error.code });
    return null;
  }
  const overlay = { mid: write.mid, kind, patch, settled: false, appliedVersion: Infinity, editorSerial };
  const entry = store.todos.get(id);
  if (entry) {
    entry.overlays.push(overlay);
    render(entry);
    renderFooter();
  }
  write.done.then((answer) => settleWrite(id, overlay, answer));
  return write;
}

function removeOverlay(entry, overlay) {
  const index = entry.overlays.indexOf(overlay);
  if (index >= 0) entry.overlays.splice(index, 1);
}

/** The outcome of a queued write: confirm it, or roll it back with the daemon's message. */
function settleWrite(id, overlay, answer) {
  const entry = store.todos.get(id);
  if (answer.error) {
    if (entry) {
      removeOverlay(entry, overlay);
      if (entry.local && overlay.kind === "create") {
        removeEntry(id, { animate: true, announce: false });
      } else {
        render(entry);
        flash(entry.li, "rolled-back");
      }
      renderFooter();
    }
    // An editor still waiting for this save shows the error itself.
    const shownByEditor = editor && editor.saving && editor.serial === overlay.editorSerial;
    if (!shownByEditor && overlay.kind !== "create") {
      notify(`Not saved: ${answer.error.message}`, { kind: "error", code: answer.error.code });
    }
    return;
  }
  if (answer.type === RESPONSE_TODO && answer.payload) {
    // A toggle or delete (its broadcast, or a duplicate's reply with the original outcome).
    if (entry) removeOverlay(entry, overlay);
    applyTodo(answer.payload, { animate: store.loaded });
  } else if (entry) {
    // A save's reply: its broadcast follows (with the mid); keep the edit shown until then.
    overlay.settled = true;
    overlay.appliedVersion = answer.duplicate ? -Infinity : versionOf(answer.payload);
    dropSettled(entry);
  }
  const current = store.todos.get(id);
  if (current) render(current);
  renderFooter();
}

/** A ResponseTodoViewModel broadcast; one carrying a mid of this page confirms that write. */
function applyBroadcastTodo(frame) {
  const id = frame.payload.todo?.id?.toLowerCase();
  const entry = id && store.todos.get(id);
  if (entry && frame.mid) {
    const overlay = entry.overlays.find((candidate) => candidate.mid === frame.mid);
    if (overlay) removeOverlay(entry, overlay);
  }
  applyTodo(frame.payload, { animate: store.loaded });
  const current = id && store.todos.get(id);
  if (current) render(current);
}

function toggleTodo(entry) {
  const id = entry.vm.todo.id.toLowerCase();
  const payload = { todo: { id, version: expectedVersion(entry) } };
  queueWrite(id, "toggle", { type: "RequestToggleCompleteTodoViewModel", payload }, (vm) => ({
    ...vm,
    complete: !vm.complete,
  }));
}

function deleteTodo(entry) {
  const id = entry.vm.todo.id.toLowerCase();
  const title = displayed(entry).title;
  const payload = { todo: { id, version: expectedVersion(entry) } };
  const write = queueWrite(id, "delete", { type: "RequestDeleteTodoViewModel", payload }, (vm) => vm);
  write?.done.then((answer) => {
    if (answer.error) return;
    notify(`Deleted “${title}”.`, { action: "Undo", onAction: () => restoreTodo(answer.payload ?? { todo: { id } }) });
  });
}

/** Undo of a delete: the stored todo's detail, saved again with `deleted: false`. */
async function restoreTodo(vm) {
  if (!requireLive()) return;
  const reply = await client.request({ type: "RequestTodoDetailViewModel", payload: { todo: { id: vm.todo.id } } });
  if (reply.error) return notify(reply.error.message, { kind: "error" });
  const payload = { ...reply.payload, deleted: false };
  queueWrite(reply.payload.todo.id.toLowerCase(), "save", { type: "RequestUpdateDetailViewModel", payload }, (v) => v);
}

ui.newForm.addEventListener("submit", (event) => {
  event.preventDefault();
  createTodo();
});

ui.newTodo.addEventListener("input", () => showFieldError(ui.newError, null, ui.newTodo));

/** A UUID for a todo created here (the daemon creates it on the first save of an unknown id). */
function newTodoId() {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((byte) => byte.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * A new todo: a save of a fresh id with version 0 (PROTOCOL.md §6), so that it can wait in the
 * outbox like any write. A non-blank title is listed at once as pending.
 */
function createTodo() {
  const title = ui.newTodo.value;
  const id = newTodoId();
  const shown = title.trim();
  if (shown) {
    const todo = {
      id,
      createdAt: new Date().toISOString(),
      title: shown,
      subtitle: "",
      priority: "normal",
      completedAt: null,
      deleted: false,
      version: 0,
    };
    const vm = { todo, title: shown, subtitle: "", complete: false, deleted: false, completeActionTitle: "Complete" };
    const entry = { vm, rank: ++store.rank, li: createItem(vm), overlays: [], local: true };
    store.todos.set(id, entry);
    placeItems();
    flash(entry.li, "inserted");
  }
  const write = queueWrite(id, "create", { type: "RequestUpdateDetailViewModel", payload: { todo: { id, version: 0 }, title } }, (vm) => vm);
  if (!write) {
    if (shown) removeEntry(id, { animate: false, announce: false });
    return;
  }
  if (shown) ui.newTodo.value = "";
  showFieldError(ui.newError, null, ui.newTodo);
  write.done.then((answer) => {
    if (!answer.error) return;
    // Rolled back: the title goes back into the field (unless something new was typed).
    if (!ui.newTodo.value) ui.newTodo.value = title;
    showFieldError(ui.newError, answer.error.message, ui.newTodo);
  });
}

function requireLive() {
  if (client.live) return true;
  notify("Not connected to the server; this needs the server. The page reconnects by itself.", { kind: "error" });
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

async function openEditor(entry, returnFocus) {
  if (!requireLive()) return;
  const li = entry.li;
  li.setAttribute("aria-busy", "true");
  const id = entry.vm.todo.id.toLowerCase();
  const frame = await client.request({ type: "RequestTodoDetailViewModel", payload: { todo: { id } } });
  li.removeAttribute("aria-busy");
  if (frame.error) return notify(frame.error.message, { kind: "error" });
  showEditor(frame.payload, returnFocus);
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
  ui.conflictComplete.textContent = current?.deleted ? "(deleted: saving again restores it, with your edit)" : "";
  ui.conflict.hidden = false;
}

/**
 * Saves the editor's fields. Live, the editor waits for the answer (and shows a conflict or a
 * validation error in place); offline, the save waits in the outbox and the editor closes.
 * Either way the row shows the edit at once, as pending.
 */
function saveEditor(overrides) {
  if (!editor || editor.saving) return;
  const serial = editor.serial;
  const payload = editedDetail(overrides);
  // After a conflict with a todo deleted elsewhere, "save again" means this edit, which was of
  // a todo not deleted: it restores it (kept deleted, the save was announced and invisible).
  if (editor.restoreOnSave && overrides?.deleted === undefined) payload.deleted = false;
  const entry = store.todos.get(editor.id);
  payload.todo.version = entry ? expectedVersion(entry, editor.detail) : versionOf(editor.detail);
  const deleting = payload.deleted && !editor.detail.deleted;
  const shownTitle = payload.title.trim();
  // The row as the save will leave it: title, completion and priority (the row's subtitle is
  // its priority, as the view model words it).
  const patch = deleting
    ? (vm) => vm
    : (vm) => {
        const priority = payload.priority ?? vm.todo.priority;
        const complete = !!payload.completed;
        return {
          ...vm,
          title: shownTitle || vm.title,
          subtitle: `Priority: ${priority === "high" ? "HIGH" : "NORMAL"}`,
          complete,
          completeActionTitle: complete ? "Uncomplete" : "Complete",
          todo: { ...vm.todo, title: shownTitle || vm.todo.title, priority },
        };
      };
  const write = queueWrite(editor.id, deleting ? "delete" : "save", { type: "RequestUpdateDetailViewModel", payload }, patch, {
    editorSerial: serial,
  });
  if (!write) return;
  if (!client.live) {
    closeEditor();
    announce("Saved on this page; it is sent when the connection is back.");
    return;
  }
  editor.saving = true;
  ui.dialog.setAttribute("aria-busy", "true");
  clearEditorErrors();
  write.done.then((frame) => {
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
      editor.restoreOnSave = !!frame.error.current?.deleted && !payload.deleted;
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
async function refreshEditorBase(serial) {
  const frame = await client.request({ type: "RequestTodoDetailViewModel", payload: { todo: { id: editor.id } } });
  if (!editor || editor.serial !== serial || frame.error) return;
  editor.detail = frame.payload;
  renderEditorBase(frame.payload);
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
ui.reload.addEventListener("click", async () => {
  if (!editor) return;
  const serial = editor.serial;
  const frame = await client.request({ type: "RequestTodoDetailViewModel", payload: { todo: { id: editor.id } } });
  if (!editor || editor.serial !== serial) return;
  if (frame.error) return showFieldError(ui.detailError, frame.error.message);
  editor.detail = frame.payload;
  fillEditor(frame.payload);
  showConflict(null);
  clearEditorErrors();
  ui.detailTitle.focus();
});
for (const [name, field] of Object.entries(detailFields)) {
  const slot = ui.detailForm.querySelector(`.field-error[data-error-for="${name}"]`);
  field.addEventListener("input", () => showFieldError(slot, null, field));
}

// ---------------------------------------------------------------------------------------------
// Notices and announcements.

function notify(message, { kind = "info", code, action, onAction } = {}) {
  const notice = document.createElement("div");
  notice.className = `notice ${kind}`;
  notice.dataset.testid = "notice";
  notice.dataset.kind = kind;
  if (code) notice.dataset.code = code;
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
// The connection (todostream.js): what the page shows of it, and the list it reloads on a reset.

const client = new TodoStream({ token: savedToken, onReset: reloadList });

/** Loads the whole list (first connect, `gap`, another epoch); the client then goes live. */
async function reloadList() {
  store.touched.clear();
  const frame = await client.request({ type: "RequestTodoViewModels" });
  if (frame.error) {
    if (frame.error.code !== "disconnected") notify(frame.error.message, { kind: "error" });
    throw new Error(frame.error.message);
  }
  applySnapshot(Array.isArray(frame.payload) ? frame.payload : []);
}

function plural(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

let countdown = null;

function renderConnection() {
  const state = client.state;
  const waiting = client.outboxSize;
  const edits = waiting ? ` — ${plural(waiting, "edit", "edits")} waiting` : "";
  const seconds = client.retryAt ? Math.max(1, Math.ceil((client.retryAt - Date.now()) / 1000)) : 0;
  let text;
  switch (state) {
    case "online":
      text = waiting ? `Live · sending ${plural(waiting, "edit", "edits")}` : "Live";
      break;
    case "offline":
      text = `Offline${edits} · retrying in ${seconds} s`;
      break;
    case "draining":
      text = `Offline${edits} · server restarting, reconnecting in ${seconds} s`;
      break;
    case "syncing":
      text = "Syncing…";
      break;
    case "auth":
      text = "Needs an access token";
      break;
    default:
      text = store.loaded ? "Reconnecting…" : "Connecting…";
  }
  ui.connection.dataset.state = state;
  ui.connection.dataset.outbox = String(waiting);
  ui.connectionText.textContent = text;
  ui.retry.hidden = state !== "offline" && state !== "draining";
  ui.root.dataset.live = String(state === "online");
  ui.app.classList.toggle("stale", state !== "online");
  clearInterval(countdown);
  countdown = client.retryAt && !ui.retry.hidden ? setInterval(renderConnection, 1000) : null;
}

function recordPosition() {
  ui.connection.dataset.epoch = client.epoch ?? "";
  ui.connection.dataset.seq = client.lastSeq === null ? "" : String(client.lastSeq);
}

client.addEventListener("state", () => {
  renderConnection();
  for (const entry of store.todos.values()) if (entry.overlays.length) render(entry);
});
client.addEventListener("outbox", renderConnection);
client.addEventListener("hello", (event) => (ui.connection.dataset.session = event.detail.frame.session ?? ""));
client.addEventListener("draining", (event) => (ui.connection.dataset.drainAfterMs = String(event.detail.reconnectAfterMs)));
client.addEventListener("synced", (event) => {
  ui.connection.dataset.sync = event.detail.how;
  ui.authForm.hidden = true;
  lastRefusal = null;
  recordPosition();
});
client.addEventListener("broadcast", (event) => {
  const frame = event.detail.frame;
  recordPosition();
  if (frame.type === RESPONSE_TODO && frame.payload) applyBroadcastTodo(frame);
});
client.addEventListener("error", (event) => {
  const error = event.detail.frame.error;
  if (error?.message) notify(error.message, { kind: "error", code: error.code });
});
client.addEventListener("auth", (event) => askForToken(event.detail.message));

ui.retry.addEventListener("click", () => client.reconnectNow());
window.addEventListener("online", () => client.reconnectNow());
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible") client.reconnectNow();
});
window.addEventListener("pagehide", () => client.socket?.close(1000));

// Access tokens, for daemons that require auth (kept for this tab only).

function savedToken() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem("todostream-token", fromHash);
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("todostream-token");
}

/** Why the last token was refused, until one is accepted: the daemon closes the connection
 * after the third bad token, and the next connection's plain request for a token must not wipe
 * out the message that says why. */
let lastRefusal = null;

function askForToken(message) {
  if (message) {
    sessionStorage.removeItem("todostream-token");
    lastRefusal = message;
  }
  ui.authForm.hidden = false;
  showFieldError(ui.authError, message ?? lastRefusal, ui.authToken);
  ui.authToken.focus();
}

ui.authForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const token = ui.authToken.value.trim();
  if (!token) return;
  sessionStorage.setItem("todostream-token", token);
  ui.authToken.value = "";
  client.authenticate(token);
});

// ---------------------------------------------------------------------------------------------

renderFooter();
renderConnection();
client.start();
