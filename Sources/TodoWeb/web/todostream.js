/**
 * todostream.js — a browser client for todostreamd's event stream (docs/PROTOCOL.md, 1.1).
 *
 * An ES module with no dependencies and no build step; the daemon serves it at /todostream.js
 * next to the page that uses it (app.js). Any other frontend can import it the same way:
 *
 *   import { TodoStream, OutboxFullError } from "/todostream.js";
 *
 *   const client = new TodoStream({
 *     token: () => sessionStorage.getItem("token"),   // only for daemons that require auth
 *     // Called on the first connect and whenever the client cannot resume (a `gap`, another
 *     // epoch, a seq it missed): load the whole state again. The client goes live when the
 *     // returned promise resolves; if it rejects, the client reconnects.
 *     onReset: async (client) => {
 *       const frame = await client.request({ type: "RequestTodoViewModels" });
 *       if (frame.error) throw new Error(frame.error.message);
 *       render(frame.payload);
 *     },
 *   });
 *   client.addEventListener("broadcast", (e) => apply(e.detail.frame));   // live and replayed
 *   client.addEventListener("state", (e) => show(e.detail));               // online, offline, …
 *   client.start();
 *
 *   const reply = await client.request({ type: "RequestTodoDetailViewModel", payload: vm });
 *   const { mid, done } = client.write({ type: "RequestToggleCompleteTodoViewModel", payload: vm });
 *   const outcome = await done;   // the reply, the broadcast, or a frame with `error`
 *
 * The connection. A WebSocket to /events on the page's host (`url` overrides it). After the
 * greeting the client authenticates with `auth` when the daemon requires it (the token comes
 * from `options.token()`; without one it reports state "auth" and waits for
 * `authenticate(token)`). It keeps the epoch and the highest seq it has seen; after a reconnect
 * it sends `resume` and gets exactly what it missed (broadcasts that come while the resume
 * runs, live ones ahead of the replay among them, are passed on in seq order once it is done).
 * When it cannot resume (first connect,
 * `gap`, a jump in seq) it reports a reset: the "reset" event, then `onReset`. A lost
 * connection is retried with exponential backoff and full jitter (0.5 s doubling to 15 s);
 * `{"op":"draining","reconnect_after_ms":N}` makes it wait N ms plus jitter instead. It pings
 * every 20 s and reconnects when no pong comes.
 *
 * Requests. `request(frame, { expect, timeoutMs })` sends the frame with a fresh `id` and
 * resolves with the first frame whose `re` is that id and whose type is the request's response
 * type (or `expect`), or with an `op:error`. It never rejects: a lost connection or no answer
 * within 15 s resolves with `{error: {code: "disconnected" | "timeout", message}}`, so callers
 * handle every failure as they handle the daemon's own (`frame.error`).
 *
 * Writes and the outbox. `write(frame)` is for the three state-changing requests (toggle,
 * delete, save). Each write gets a mutation id, `mid` (a random prefix made once per client
 * and a counter, §10), and waits in the outbox until it has an outcome. Writes are sent in
 * order whenever the client is live; made while offline, they are sent after the next resume.
 * A write whose connection broke before its answer is sent again with the same `mid`: the
 * daemon applies it exactly once, and answers a retry of an applied write with
 * `"duplicate":true` and the original outcome. A broadcast carrying the write's `mid` (live or
 * replayed by `resume`) also completes it. `unavailable` and `rate_limited` are retried a few
 * times; every other error (`conflict`, `validation_failed`, `not_found`, …) is the write's
 * outcome. The outbox holds at most `outboxLimit` (50) writes: past that `write` throws
 * `OutboxFullError` and nothing is queued. The outbox lives in memory: it survives reconnects,
 * not a reload of the page (writes still waiting then are lost). A daemon whose greeting does
 * not list the `mid` feature cannot tell a retry from a new write, so there a write in flight
 * when the connection breaks completes with `disconnected` instead of being sent again.
 *
 * Events (all CustomEvent, data in `detail`):
 *   "state"     {state, retryAt, outbox}: state is "connecting", "syncing", "online",
 *               "offline", "draining" or "auth"; retryAt (ms since the epoch) while waiting
 *               to reconnect
 *   "hello"     {frame}: every greeting
 *   "auth"      {message}: a token is needed (message: why the last one was refused, or null)
 *   "reset"     {reason}: "loaded" (first load), "refetched" (gap, epoch, missed seq)
 *   "synced"    {how}: live again: "loaded", "refetched" or "resumed"
 *   "draining"  {reconnectAfterMs}: the daemon is shutting down; the client waits that long
 *   "broadcast" {frame}: a broadcast (with `seq`), each seq once, in order
 *   "outbox"    {size, limit}: the number of writes waiting changed
 *   "error"     {frame}: an `op:error` that answers no request (e.g. `rate_limited` on a ping)
 */

const RESPONSE_FOR = {
  RequestTodoViewModels: "ResponseTodoViewModels",
  RequestToggleCompleteTodoViewModel: "ResponseTodoViewModel",
  RequestDeleteTodoViewModel: "ResponseTodoViewModel",
  RequestNewTodoDetailViewModel: "ResponseTodoDetailViewModel",
  RequestTodoDetailViewModel: "ResponseTodoDetailViewModel",
  RequestUpdateDetailViewModel: "ResponseUpdateDetailViewModel",
};

const ANSWER_FOR_OP = {
  ping: ["pong"],
  auth: ["authenticated"],
  resume: ["resumed", "gap"],
  subscribe: ["subscribed"],
  unsubscribe: ["unsubscribed"],
};

/** The requests that change state, which `write` accepts. */
export const WRITE_TYPES = new Set([
  "RequestToggleCompleteTodoViewModel",
  "RequestDeleteTodoViewModel",
  "RequestUpdateDetailViewModel",
]);

const RETRYABLE = new Set(["unavailable", "rate_limited"]);
const MAX_RETRIES = 5;

/** Thrown by `write` when the outbox is full; nothing was queued. */
export class OutboxFullError extends Error {
  constructor(limit) {
    super(`${limit} edits are already waiting to be sent; wait until the connection is back.`);
    this.name = "OutboxFullError";
    this.code = "outbox_full";
    this.limit = limit;
  }
}

/** 16 characters of base 32: 80 random bits, made once per client (§10). */
function randomPrefix() {
  const alphabet = "abcdefghijklmnopqrstuvwxyz234567";
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return [...bytes].map((byte) => alphabet[byte & 31]).join("");
}

function localError(code, message) {
  return { error: { code, message } };
}

export class TodoStream extends EventTarget {
  constructor(options = {}) {
    super();
    this.options = {
      url: null,
      token: () => null,
      onReset: null,
      outboxLimit: 50,
      requestTimeoutMs: 15000,
      helloTimeoutMs: 10000,
      pingEveryMs: 20000,
      pongTimeoutMs: 10000,
      backoffBaseMs: 500,
      backoffCapMs: 15000,
      ...options,
    };
    /** "connecting", "syncing", "online", "offline", "draining", "auth", or "stopped". */
    this.state = "stopped";
    this.live = false;
    this.epoch = null;
    this.lastSeq = null;
    this.greeting = null;
    this.retryAt = null;
    this.midPrefix = randomPrefix();
    this.midCounter = 0;
    this.socket = null;
    this.stopped = true;
    this.attempt = 0;
    this.drainDelay = null;
    /** While a resume runs: its socket, the seq it resumes after, the broadcasts held. */
    this.resuming = null;
    /** Whether the state the caller holds is complete up to lastSeq (an onReset finished). */
    this.complete = false;
    this.resetting = false;
    this.nextId = 1;
    /** id -> { expect, resolve, timer, write } */
    this.pending = new Map();
    /** Writes waiting for an outcome, in the order they were made. */
    this.outbox = [];
    this.timers = {};
  }

  // --- public API -----------------------------------------------------------------------

  /** Connects (and keeps reconnecting until `stop`). */
  start() {
    this.stopped = false;
    this.#connect();
  }

  /** Closes the connection and stops reconnecting. The outbox is kept. */
  stop() {
    this.stopped = true;
    this.#clearTimers();
    const socket = this.socket;
    if (socket) {
      this.#lost();
      socket.close(1000);
    }
    this.#setState("stopped");
  }

  /** Reconnects now instead of waiting for the backoff (e.g. a "Retry now" button). */
  reconnectNow() {
    if (this.socket || this.stopped) return;
    this.attempt = 0;
    this.#connect();
  }

  /** Authenticates with `token` now, or reconnects to do it. */
  authenticate(token) {
    if (this.socket && this.greeting?.auth === "required") this.#authenticate(token);
    else this.reconnectNow();
  }

  get features() {
    return this.greeting?.features ?? [];
  }

  get session() {
    return this.greeting?.session ?? null;
  }

  get outboxSize() {
    return this.outbox.length;
  }

  get outboxLimit() {
    return this.options.outboxLimit;
  }

  /** The next mutation id this client would use (e.g. to tag an optimistic edit). */
  newMid() {
    return `${this.midPrefix}:${++this.midCounter}`;
  }

  /**
   * Sends `frame` with a fresh `id`; resolves with its answer (see the comment at the top).
   * `expect`: the answer's type or op (or a list of them) when it is not the usual one.
   */
  request(frame, { expect, timeoutMs } = {}) {
    return new Promise((resolve) => {
      const names = expect ? [].concat(expect) : this.#expected(frame);
      if (!this.#call(frame, names, timeoutMs ?? this.options.requestTimeoutMs, resolve)) {
        resolve(localError("disconnected", "Not connected to the server. Please try again."));
      }
    });
  }

  /**
   * Queues a state-changing request in the outbox; returns `{ mid, done }`, where `done`
   * resolves with the write's outcome (it never rejects). Throws OutboxFullError when full.
   * `mid` may be given (from `newMid()`); otherwise a new one is made.
   */
  write(frame, { mid } = {}) {
    if (!WRITE_TYPES.has(frame.type)) throw new TypeError(`${frame.type} is not a write`);
    if (this.outbox.length >= this.options.outboxLimit) throw new OutboxFullError(this.options.outboxLimit);
    const entry = { frame, mid: mid ?? this.newMid(), sent: false, settled: false, retries: 0, id: null };
    entry.done = new Promise((resolve) => (entry.resolve = resolve));
    this.outbox.push(entry);
    this.#outboxChanged();
    if (this.live) this.#sendWrite(entry);
    return { mid: entry.mid, done: entry.done };
  }

  // --- the connection -------------------------------------------------------------------

  #url() {
    if (this.options.url) return this.options.url;
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    return `${scheme}//${location.host}/events`;
  }

  #setState(state) {
    this.state = state;
    if (state !== "offline" && state !== "draining") this.retryAt = null;
    this.dispatchEvent(
      new CustomEvent("state", { detail: { state, retryAt: this.retryAt, outbox: this.outbox.length } }),
    );
  }

  #emit(name, detail) {
    this.dispatchEvent(new CustomEvent(name, { detail }));
  }

  #clearTimers() {
    for (const timer of Object.values(this.timers)) {
      clearTimeout(timer);
      clearInterval(timer);
    }
    this.timers = {};
  }

  #connect() {
    clearTimeout(this.timers.reconnect);
    if (this.socket || this.stopped) return;
    this.#setState("connecting");
    let socket;
    try {
      socket = new WebSocket(this.#url());
    } catch {
      this.#scheduleReconnect();
      return;
    }
    this.socket = socket;
    this.timers.hello = setTimeout(() => socket.close(), this.options.helloTimeoutMs);
    socket.addEventListener("message", (event) => {
      if (socket !== this.socket || typeof event.data !== "string") return;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      if (frame && typeof frame === "object" && !Array.isArray(frame)) this.#handle(frame);
    });
    socket.addEventListener("close", () => {
      if (socket !== this.socket) return;
      this.#lost();
      this.#scheduleReconnect();
    });
  }

  /** The connection is gone: fail the requests waiting on it; writes wait to be sent again. */
  #lost() {
    clearTimeout(this.timers.hello);
    clearInterval(this.timers.ping);
    clearTimeout(this.timers.pong);
    clearTimeout(this.timers.drainClose);
    this.socket = null;
    this.live = false;
    const idempotent = this.features.includes("mid");
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const call of pending) {
      clearTimeout(call.timer);
      if (call.write) {
        call.write.sent = false;
        if (!idempotent) {
          this.#settle(
            call.write,
            localError("disconnected", "The connection was lost before the server answered; the edit may not have been saved."),
          );
        }
      } else {
        call.resolve(
          localError("disconnected", "The connection was lost before the server answered. Please try again."),
        );
      }
    }
  }

  #scheduleReconnect() {
    if (this.stopped) return;
    let delay;
    const draining = this.drainDelay !== null;
    if (draining) {
      // What the daemon asked for, plus jitter so that every page does not return at once.
      delay = this.drainDelay + Math.random() * Math.min(1000, this.drainDelay / 2 + 250);
      this.drainDelay = null;
    } else {
      const ceiling = Math.min(this.options.backoffCapMs, this.options.backoffBaseMs * 2 ** this.attempt);
      delay = ceiling / 2 + Math.random() * (ceiling / 2);
    }
    this.attempt++;
    this.retryAt = Date.now() + delay;
    this.#setState(draining ? "draining" : "offline");
    this.timers.reconnect = setTimeout(() => this.#connect(), delay);
  }

  #send(frame) {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) return false;
    socket.send(JSON.stringify(frame));
    return true;
  }

  #expected(frame) {
    if (frame.op) return ANSWER_FOR_OP[frame.op] ?? [];
    return RESPONSE_FOR[frame.type] ? [RESPONSE_FOR[frame.type]] : [];
  }

  /** Sends `frame` with a fresh id; `resolve` gets its answer. False when not connected. */
  #call(frame, expect, timeoutMs, resolve, write = null) {
    const id = this.nextId++;
    if (!this.#send({ ...frame, id })) return false;
    const call = { expect, resolve, write };
    call.timer = setTimeout(() => {
      if (this.pending.get(id) !== call) return;
      this.pending.delete(id);
      resolve(localError("timeout", "The server did not answer in time. Please try again."));
    }, timeoutMs);
    this.pending.set(id, call);
    return id;
  }

  #handle(frame) {
    if (frame.op === "hello") return this.#hello(frame);
    if (frame.op === "draining") return this.#draining(frame);
    if (typeof frame.seq === "number") this.#broadcast(frame);
    if (frame.re !== undefined) {
      const call = this.pending.get(frame.re);
      if (call && (call.expect.includes(frame.type ?? frame.op) || frame.op === "error")) {
        this.pending.delete(frame.re);
        clearTimeout(call.timer);
        call.resolve(frame);
      }
      if (call) return;
    }
    if (frame.op === "gap") return this.#resetFrom(frame, "refetched");
    if (frame.op === "error" && frame.error && frame.re === undefined) this.#emit("error", { frame });
  }

  #broadcast(frame) {
    // While a resume runs, a live broadcast may come ahead of the replay (after `auth` the
    // daemon's start hold is over, PROTOCOL §2): everything after the resume point waits here
    // and is passed on in seq order once `resumed` comes. (Passed on as it came, the live one
    // moved the position past the replay, whose broadcasts were then dropped as seen: lost
    // updates, with no refetch.)
    if (this.resuming?.socket === this.socket) {
      if (frame.seq > this.resuming.after) this.resuming.frames.push(frame);
      return;
    }
    if (this.lastSeq !== null && frame.seq <= this.lastSeq) return; // seen already
    const missed = this.live && this.lastSeq !== null && frame.seq > this.lastSeq + 1;
    this.lastSeq = frame.seq;
    this.#emit("broadcast", { frame });
    if (typeof frame.mid === "string") {
      const entry = this.outbox.find((write) => write.mid === frame.mid);
      if (entry) this.#settle(entry, frame);
    }
    // Broadcasts were skipped without a `gap` being said: the caller's state may be stale.
    if (missed) this.#reset("refetched");
  }

  #hello(frame) {
    clearTimeout(this.timers.hello);
    // The backoff starts over once the session is live (`#goLive`), not at the greeting: a
    // connection whose session cannot start (a reset that keeps failing) must not be retried
    // at once, again and again.
    this.drainDelay = null;
    this.greeting = frame;
    this.#emit("hello", { frame });
    this.#setState("syncing");
    if (frame.auth === "required") {
      const token = this.options.token?.();
      if (!token) {
        this.#setState("auth");
        this.#emit("auth", { message: null });
        return;
      }
      return this.#authenticate(token);
    }
    this.#startSession();
  }

  async #authenticate(token) {
    const frame = await this.request({ op: "auth", token });
    if (frame.error) {
      if (frame.error.code === "disconnected") return;
      this.#setState("auth");
      this.#emit("auth", { message: frame.error.message });
      return;
    }
    if (frame.role === "monitor") {
      // A monitor may watch but never publish: this page could not even load its list. Ask
      // for a view token instead (the connection stays, and takes the next token as it comes).
      this.#setState("auth");
      this.#emit("auth", {
        message: "That is a monitor token: it may watch but not change todos. Enter a view token.",
      });
      return;
    }
    this.#setState("syncing");
    this.#startSession();
  }

  async #startSession() {
    const greeting = this.greeting;
    if (this.epoch === null || this.lastSeq === null || !this.complete) {
      // The first connection (or the last reset never finished): load everything, then follow
      // the broadcasts after the greeting's seq.
      return this.#resetFrom(greeting, this.complete || this.epoch !== null ? "refetched" : "loaded");
    }
    // Back after a disconnect: ask for exactly what was missed. With another epoch the answer
    // is `gap`; until it comes, seqs of the new epoch are not filtered.
    const after = this.lastSeq;
    const epoch = this.epoch;
    if (greeting.epoch !== epoch) this.lastSeq = null;
    const socket = this.socket;
    const resuming = greeting.epoch === epoch ? { socket, after, frames: [] } : null;
    this.resuming = resuming;
    const frame = await this.request({ op: "resume", epoch, after });
    if (this.resuming === resuming) this.resuming = null;
    if (socket !== this.socket) return;
    if (frame.op === "resumed") {
      this.epoch = greeting.epoch;
      if (this.lastSeq === null || this.lastSeq < after) this.lastSeq = after;
      // The replay and any live broadcast that came ahead of it, in seq order, each once.
      let missed = false;
      for (const held of resuming?.frames.sort((a, b) => a.seq - b.seq) ?? []) {
        if (held.seq > this.lastSeq + 1) missed = true;
        this.#broadcast(held);
      }
      if (missed) return this.#reset("refetched");
      return this.#goLive("resumed");
    }
    if (frame.op === "gap") return this.#resetFrom({ epoch: frame.epoch ?? greeting.epoch, seq: frame.seq ?? greeting.seq }, "refetched");
    if (frame.error?.code !== "disconnected") this.#resetFrom(greeting, "refetched");
  }

  #resetFrom(position, reason) {
    this.epoch = position.epoch ?? this.epoch;
    this.lastSeq = typeof position.seq === "number" ? position.seq : 0;
    this.#reset(reason);
  }

  async #reset(reason) {
    if (this.resetting) return;
    this.resetting = true;
    this.complete = false;
    const socket = this.socket;
    this.#emit("reset", { reason });
    try {
      await this.options.onReset?.(this, reason);
    } catch (error) {
      this.resetting = false;
      if (socket === this.socket) {
        this.#emit("error", { frame: localError("reset_failed", String(error?.message ?? error)) });
        socket?.close();
      }
      return;
    }
    this.resetting = false;
    if (socket !== this.socket || !socket) return;
    this.complete = true;
    this.#goLive(reason);
  }

  #goLive(how) {
    const wasLive = this.live;
    this.live = true;
    this.attempt = 0;
    if (!wasLive) this.#setState("online");
    this.#emit("synced", { how });
    clearInterval(this.timers.ping);
    this.timers.ping = setInterval(() => this.#ping(), this.options.pingEveryMs);
    for (const entry of this.outbox) if (!entry.sent) this.#sendWrite(entry);
  }

  async #ping() {
    const socket = this.socket;
    if (!socket) return;
    clearTimeout(this.timers.pong);
    this.timers.pong = setTimeout(() => socket.close(), this.options.pongTimeoutMs);
    await this.request({ op: "ping" });
    clearTimeout(this.timers.pong);
  }

  #draining(frame) {
    const after = Number(frame.reconnect_after_ms);
    this.drainDelay = Number.isFinite(after) && after >= 0 ? Math.min(after, 5 * 60 * 1000) : 1000;
    this.live = false;
    this.#emit("draining", { reconnectAfterMs: this.drainDelay });
    this.#setState("draining");
    // The daemon closes the connection; if it does not, close it once its queue had time to flush.
    const socket = this.socket;
    this.timers.drainClose = setTimeout(() => {
      if (this.socket === socket) socket?.close();
    }, 5000);
  }

  // --- the outbox ---------------------------------------------------------------------------

  #sendWrite(entry) {
    if (entry.settled || entry.sent) return;
    entry.sent = true;
    const frame = { ...entry.frame, mid: entry.mid };
    const expect = this.#expected(frame);
    const id = this.#call(frame, expect, this.options.requestTimeoutMs, (answer) => this.#answered(entry, answer), entry);
    if (id === false) entry.sent = false;
    else entry.id = id;
  }

  #answered(entry, frame) {
    if (entry.settled) return;
    entry.sent = false;
    const code = frame.error?.code;
    if (code === "timeout") {
      // No answer: send it again (same mid) — applied once whatever happened to the first.
      if (this.live) this.#sendWrite(entry);
      return;
    }
    if (RETRYABLE.has(code) && entry.retries < MAX_RETRIES) {
      entry.retries++;
      setTimeout(() => this.live && this.#sendWrite(entry), 250 * 2 ** entry.retries);
      return;
    }
    this.#settle(entry, frame);
  }

  #settle(entry, frame) {
    if (entry.settled) return;
    entry.settled = true;
    const index = this.outbox.indexOf(entry);
    if (index >= 0) this.outbox.splice(index, 1);
    if (entry.id !== null) {
      const call = this.pending.get(entry.id);
      if (call?.write === entry) {
        clearTimeout(call.timer);
        this.pending.delete(entry.id);
      }
    }
    this.#outboxChanged();
    entry.resolve(frame);
  }

  #outboxChanged() {
    this.#emit("outbox", { size: this.outbox.length, limit: this.options.outboxLimit });
  }
}
