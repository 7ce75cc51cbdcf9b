'use strict';
// The session core: no sockets, no timers, no clock of its own (the
// driver's now()).
//
// It keeps what one broker session is: the requests written to the
// connection and not answered yet (replies come in request order, so the
// oldest takes the next reply line), the queue of requests not written
// yet, the holds, the queued waits, the watches, and the local per-key
// lock. It turns each line read into a completion: an EVENT line goes to
// the hold, wait or watch it names, any other line to the oldest request.
// When the connection breaks, it decides what becomes of every request
// that was in flight once the next connection is up: resumed (RESUME) or a
// new session.
//
// The driver (client.js) owns the I/O: it calls takeOutgoing() when it
// can write, feed() for each line read, connectionLost() and, on the next
// connection, runs handshake() and then reconcile(). It gives the core
// now(), defer(fn) (user callbacks, run after the core's turn),
// wakeWriter() (something was queued), wrapHold(state) (the caller's face
// of a new hold) and holdLost(state, err).

const P = require('./protocol');
const {
  ConnectError, LockLostError, LockTimeoutError, NotHeldError, ProtocolError, SessionLostError,
  UnavailableError, VersionError, WaitCancelledError, busy, describe, errorForCode,
  errorFromReply, lost,
} = require('./errors');

// A wait the caller wants without end is asked for in steps of this (the
// broker clamps it to its max_wait_ms); each TIMEOUT re-issues it.
const FOREVER_STEP_MS = P.MAX_MS;

const noop = () => {};

// A promise with its settlement at hand; settled once, later outcomes
// dropped. Its rejection counts as handled: an outcome nobody awaits any
// more (a caller that gave up) must not end the process.
class Outcome {
  constructor() {
    this.done = false;
    this.promise = new Promise((resolve, reject) => {
      this.resolveFn = resolve;
      this.rejectFn = reject;
    });
    this.promise.catch(noop);
  }

  resolve(value) {
    if (this.done) return;
    this.done = true;
    this.resolveFn(value);
  }

  reject(err) {
    if (this.done) return;
    this.done = true;
    this.rejectFn(err);
  }
}

function settle(out, value, err) {
  if (!out) return;
  if (err) out.reject(err);
  else out.resolve(value);
}

// A FIFO with O(1) shift.
class Deque {
  constructor() {
    this.items = [];
    this.head = 0;
  }

  get length() { return this.items.length - this.head; }

  push(x) { this.items.push(x); }

  shift() {
    if (this.head >= this.items.length) return undefined;
    const x = this.items[this.head];
    this.items[this.head++] = undefined;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return x;
  }

  drain() {
    const out = this.items.slice(this.head);
    this.items = [];
    this.head = 0;
    return out;
  }
}

// ------------------------------------------------------------------ holds

// One hold of this session on a key, as the core knows it.
class HoldState {
  constructor(key, token, kind, limit, value, session) {
    this.key = key;
    this.token = token;
    this.kind = kind; // exclusive, shared, semaphore
    this.limit = limit;
    this.value = value;
    this.session = session; // Core.session when granted
    this.lostError = null;
    this.released = false;
    this.listeners = [];
    this.hasLocal = false; // holds the local key lock
    this.face = null; // the caller's Hold
    this.controller = null; // its AbortController, made when asked for
    this.grantedAt = 0; // the driver's now() when granted
    this.ended = false; // counted in Core.counters
  }

  get lost() { return this.lostError !== null; }
}

// A key this session watches: the latest state, and who listens (each
// listener is called with each state, or once with the error that ended
// the watch: the broker refused WATCH).
class WatchState {
  constructor(key) {
    this.key = key;
    this.state = null;
    this.listeners = new Set();
    this.active = true;
  }
}

// --------------------------------------------------------------- requests

// A request line and what to do with its reply. line() is asked when the
// request is written (a wait computes what is left of its deadline then);
// null drops it unsent.
class Request {
  constructor(text, out = null, parse = null, replay = true) {
    this.text = text;
    this.out = out;
    this.parse = parse;
    this.replay = replay; // sent again after a reconnect
    this.abandoned = false; // its caller gave up: the reply is dropped
    this.key = '';
    this.blocking = false; // holds back the session's later replies (1.1)
  }

  line() {
    if (this.abandoned || (this.out && this.out.done)) return null;
    return this.text;
  }

  reply(core, line) {
    if (line.startsWith('ERR')) {
      settle(this.out, null, errorFromReply(line, this.text));
      return;
    }
    let value = line;
    try {
      if (this.parse) value = this.parse(line);
    } catch (e) {
      settle(this.out, null, e);
      return;
    }
    settle(this.out, value);
  }

  // The connection broke before the reply: true to send it again on the
  // new connection (after reconcile), else settled here.
  dropped() {
    if (this.replay && !this.abandoned) return true;
    const key = this.key || null;
    settle(this.out, null, new ConnectError(describe(key || this.text.split(' ', 1)[0],
      'the connection was lost before the reply'), { key, request: this.text }));
    return false;
  }
}

// ACQUIRE ... ASYNC and its outcome: an `OK <token>` at once, or `OK
// QUEUED` then one of GRANTED, TIMEOUT, FAILED. Re-issued with what is
// left of the caller's deadline when the broker's clamped wait ran out
// first, or when a new connection lost the queued wait.
class Acquire extends Request {
  constructor(key, out, {
    shared = false, limit = null, deadline = null, ttlMs = null, value = null, listeners = [], now,
  }) {
    super(`ACQUIRE ${key}`, out);
    this.key = key;
    this.shared = shared;
    this.limit = limit;
    this.deadline = deadline; // the driver's now() clock; null: no end
    this.started = now;
    // a caller who would wait hears TIMEOUT, not BUSY, even when the
    // deadline passed before the request could be written
    this.patient = deadline === null || deadline > now;
    this.ttlMs = ttlMs;
    this.value = value;
    this.listeners = listeners;
    this.hasLocal = false; // holds the local key lock
    // local (behind another of this client), new, sent, queued, dropped
    // (its connection broke), done
    this.state = 'new';
    this.cancelError = null;
    this.waitMs = 0;
  }

  get kind() {
    if (this.shared) return 'shared';
    return this.limit !== null ? 'semaphore' : 'exclusive';
  }

  line(core) {
    if (this.state === 'done') return null;
    if (this.cancelError) {
      this.finish(core, this.cancelError);
      return null;
    }
    if (this.deadline === null) {
      this.waitMs = FOREVER_STEP_MS;
    } else {
      const left = this.deadline - core.driver.now();
      this.waitMs = left <= 0 ? 0 : P.toMs(left, 'wait');
    }
    const async = core.asyncWaits;
    this.blocking = !async && this.waitMs > 0;
    this.text = P.acquireLine(this.key, {
      shared: this.shared, limit: this.limit, waitMs: this.waitMs, ttlMs: this.ttlMs,
      value: this.value, async,
    });
    this.state = 'sent';
    return this.text;
  }

  reply(core, line) {
    if (this.state === 'done') {
      if (line.startsWith('OK ') && line !== 'OK QUEUED') core.strayGrant(this.key);
      return;
    }
    if (line === 'OK QUEUED') {
      this.state = 'queued';
      core.waits.set(this.key, this);
      if (this.cancelError) core.submit(new Cancel(this.key));
    } else if (line.startsWith('OK ')) {
      this.granted(core, line.slice(3));
    } else if (line === 'BUSY') {
      this.notGranted(core);
    } else {
      this.finish(core, errorFromReply(line, this.text));
    }
  }

  event(core, ev) {
    if (core.waits.get(this.key) === this) core.waits.delete(this.key);
    const line = ['EVENT', ev.kind, ev.key, ...ev.args].join(' ');
    if (ev.kind === 'GRANTED' && ev.args.length) {
      this.granted(core, ev.args[0]);
    } else if (ev.kind === 'TIMEOUT') {
      this.notGranted(core, line);
    } else { // FAILED <CODE>
      this.finish(core, errorForCode(ev.args[0] || 'UNAVAILABLE', 'the wait ended', this.text, {
        key: this.key, reply: line,
      }));
    }
  }

  granted(core, word) {
    let token;
    try {
      token = P.parseToken(word);
    } catch (e) {
      this.finish(core, e);
      return;
    }
    if (this.cancelError) {
      core.strayGrant(this.key);
      this.finish(core, this.cancelError);
      return;
    }
    const hold = new HoldState(this.key, token, this.kind, this.limit, this.value, core.session);
    hold.listeners = this.listeners;
    hold.hasLocal = this.hasLocal;
    hold.grantedAt = core.driver.now();
    this.hasLocal = false;
    core.holds.set(this.key, hold);
    if (core.handshaking) core.listed.add(this.key); // granted after the RESUME's list
    this.state = 'done';
    core.count('waits', this.key, hold.grantedAt - this.started);
    hold.face = core.driver.wrapHold(hold);
    settle(this.out, hold.face);
  }

  notGranted(core, reply = 'BUSY') {
    if (this.cancelError) {
      this.finish(core, this.cancelError);
    } else if (this.waitMs === 0 && !this.patient) {
      this.finish(core, busy(this.key, reply, this.text));
    } else if (this.deadline === null || this.deadline - core.driver.now() > 1) {
      core.submit(this); // the broker clamped the wait: go on
    } else {
      this.finish(core, this.timedOut(reply));
    }
  }

  // The error of a wait whose deadline passed (cause: what ended it).
  timedOut(reply = null, cause = undefined) {
    const took = this.deadline === null ? 'its wait' : `${+(this.deadline - this.started).toFixed(3)} ms`;
    return new LockTimeoutError(describe(this.key, `not granted within ${took}`), {
      key: this.key, reply, request: this.text, cause,
    });
  }

  // Ends without a hold.
  finish(core, err) {
    if (this.state === 'done') return;
    this.state = 'done';
    core.count('waits', this.key, core.driver.now() - this.started);
    if (core.waits.get(this.key) === this) core.waits.delete(this.key);
    if (this.hasLocal) {
      this.hasLocal = false;
      core.localDone(this.key);
    }
    settle(this.out, null, err);
  }

  // The caller gives up (aborted, or its deadline passed while the broker
  // could not tell it): withdraw the wait, give back a grant that comes
  // anyway, end with err.
  cancel(core, err) {
    if (this.state === 'done' || this.cancelError) return;
    this.cancelError = err;
    if (this.state === 'queued') {
      core.submit(new Cancel(this.key));
    } else if (this.state !== 'sent') { // local, new, dropped
      this.finish(core, err);
    } // sent: the reply decides (OK QUEUED -> CANCEL, OK -> release)
    settle(this.out, null, err);
  }

  dropped(core, resumed) {
    if (this.state === 'done') return false;
    if (this.cancelError) {
      this.finish(core, this.cancelError);
      return false;
    }
    if (resumed && core.requeued.has(this.key)) {
      this.state = 'queued'; // its OK QUEUED was lost, not the wait
      core.waits.set(this.key, this);
      return false;
    }
    this.state = 'dropped';
    return true;
  }
}

// RELEASE <key> [LINGER ms] of a hold.
class Release extends Request {
  constructor(hold, lingerMs, out = null) {
    super(lingerMs ? `RELEASE ${hold.key} LINGER ${lingerMs}` : `RELEASE ${hold.key}`, out);
    this.key = hold.key;
    this.hold = hold;
  }

  line() {
    return this.text; // sent even when its caller gave up: the key must go
  }

  ended(core) {
    core.forget(this.hold);
    core.letGo(this.hold);
  }

  reply(core, line) {
    if (line.startsWith('OK')) {
      this.ended(core);
      settle(this.out, undefined);
      return;
    }
    let err = errorFromReply(line, this.text);
    if ((err instanceof LockLostError || err instanceof NotHeldError) && this.hold.lostError) {
      err = this.hold.lostError;
    } else if (err instanceof LockLostError) {
      err = lost(this.key, this.hold.token, err.text, { reply: line, request: this.text });
      core.markLost(this.hold, err);
    } else if (err instanceof UnavailableError) {
      // the broker frees it once Redis answers: for us it is gone
      core.driver.debug(`${err.message} (the broker finishes the release)`);
      this.ended(core);
      settle(this.out, undefined);
      return;
    }
    this.ended(core);
    settle(this.out, null, err);
  }

  dropped(core, resumed, listed) {
    if (resumed && listed.has(this.key)) return true; // still ours: again
    this.ended(core);
    settle(this.out, undefined, this.hold.lostError); // the old session's end freed it
    return false;
  }
}

// RENEW or PROCLAIM: a request on a hold; ERR LOST marks it lost.
class HoldRequest extends Request {
  constructor(text, hold, out, parse = null) {
    super(text, out, parse);
    this.key = hold.key;
    this.hold = hold;
  }

  reply(core, line) {
    if (line.startsWith('ERR LOST')) {
      const { text } = errorFromReply(line);
      core.markLost(this.hold, lost(this.key, this.hold.token, text, { reply: line, request: this.text }));
      settle(this.out, null, this.hold.lostError);
      return;
    }
    super.reply(core, line);
  }

  dropped(core, resumed, listed) {
    if (resumed && listed.has(this.key)) return true;
    settle(this.out, null, this.hold.lostError
      || lost(this.key, this.hold.token, 'not kept across the reconnect', { request: this.text }));
    return false;
  }
}

// CANCEL <key> of a queued wait.
class Cancel extends Request {
  constructor(key, out = null) {
    super(`CANCEL ${key}`, out);
    this.key = key;
  }

  reply(core, line) {
    const acq = core.waits.get(this.key);
    if (line === 'OK 1' && acq) {
      acq.finish(core, acq.cancelError || new WaitCancelledError(describe(this.key, 'the wait was cancelled'), {
        key: this.key, reply: line, request: this.text,
      }));
    }
    settle(this.out, line);
  }

  dropped(core) {
    if (core.waits.has(this.key)) return true; // still queued after the RESUME
    settle(this.out, 'OK 0');
    return false;
  }
}

// WATCH <key>: OK, then the state comes as an event.
class Watch extends Request {
  constructor(key, out = null) {
    super(`WATCH ${key}`, out);
    this.key = key;
  }

  reply(core, line) {
    if (line.startsWith('ERR')) {
      // e.g. a broker without WATCH after a failover: the watch ends,
      // loudly, and is not asked for again
      const err = errorFromReply(line, this.text);
      core.watchFailed(this.key, err);
      settle(this.out, null, err);
      return;
    }
    super.reply(core, line);
  }

  dropped(core) {
    const w = core.watches.get(this.key);
    if (w && w.active) return true; // WATCH again: it answers OK, state again
    settle(this.out, undefined);
    return false;
  }
}

// ------------------------------------------------------------------- core

class Core {
  constructor(driver, { name = null, graceMs = 0, auth = null, allowOld = false } = {}) {
    this.driver = driver;
    this.name = name;
    this.graceMs = graceMs;
    this.auth = auth;
    this.allowOld = allowOld;
    this.clientId = null;
    this.secret = null;
    this.version = null; // [major, minor, patch]
    this.asyncWaits = true; // false against a 1.1 broker
    this.session = 0; // +1 per new session (not per RESUME)
    this.outq = [];
    this.pending = new Deque();
    this.holds = new Map();
    this.waits = new Map();
    this.watches = new Map();
    this.local = new Map(); // key -> the requests queued behind its local lock
    this.dropped = [];
    this.requeued = new Set(); // EVENT QUEUED after a RESUME
    this.listed = new Set(); // the keys a RESUME gave back
    this.handshaking = false;
    this.blocking = 0; // 1.1 blocking waits in flight
    this.resumeError = null;
    this.counters = {
      waits: 0, waitSecondsTotal: 0, holds: 0, holdSecondsTotal: 0, losses: 0, resumes: 0, reconnects: 0,
    };
    this.onCounter = null; // (event) => void
  }

  // A call is in progress: a request written or to write, a wait, a
  // caller behind the local key lock.
  busy() {
    if (this.pending.length || this.outq.length || this.waits.size || this.dropped.length) return true;
    for (const queue of this.local.values()) if (queue.length) return true;
    return false;
  }

  // ---------------------------------------------------------- writing

  // Queue req for writing (front: ahead of what callers queued).
  submit(req) {
    this.outq.push(req);
    this.driver.wakeWriter();
  }

  // The queued requests' lines (now pending), to write at once.
  takeOutgoing() {
    if (!this.outq.length) return '';
    const reqs = this.outq;
    this.outq = [];
    let out = '';
    for (const req of reqs) {
      const text = req.line(this);
      if (text === null) continue;
      this.pending.push(req);
      if (req.blocking) this.blocking++;
      out += `${text}\n`;
    }
    return out;
  }

  // ---------------------------------------------------------- reading

  // One line read from the connection (without its line end).
  feed(line) {
    if (line.startsWith('EVENT ')) {
      this.event(P.parseEvent(line));
      return;
    }
    if (!line) return;
    P.replyKind(line);
    const req = this.pending.shift();
    if (!req) throw new ProtocolError(`a reply nobody asked for: ${JSON.stringify(line)}`);
    if (req.blocking) this.blocking--;
    req.reply(this, line);
  }

  event(ev) {
    switch (ev.kind) {
      case 'LOST': {
        const hold = this.holds.get(ev.key);
        if (hold && ev.args[0] === String(hold.token)) {
          this.markLost(hold, lost(ev.key, hold.token, '', { reply: ['EVENT', ev.kind, ev.key, ...ev.args].join(' ') }));
        }
        break;
      }
      case 'GRANTED': case 'TIMEOUT': case 'FAILED': {
        const acq = this.findWait(ev.key);
        if (acq) acq.event(this, ev);
        else if (ev.kind === 'GRANTED') this.strayGrant(ev.key);
        break;
      }
      case 'QUEUED':
        this.requeued.add(ev.key);
        break;
      case 'HOLDER': case 'FREE': {
        const w = this.watches.get(ev.key);
        if (w && w.active) this.watchChanged(w, P.watchState(ev));
        break;
      }
      default:
        this.driver.debug(`event ignored: ${ev.kind} ${ev.key}`);
    }
  }

  // The wait an outcome event names: a queued one, or (while a RESUME is
  // being settled) one whose OK QUEUED the old connection lost.
  findWait(key) {
    const acq = this.waits.get(key);
    if (acq) return acq;
    return this.dropped.find((r) => r instanceof Acquire && r.key === key && r.state !== 'done') || null;
  }

  // ------------------------------------------------------------ holds

  // The hold is gone: its listeners run, its signal aborts, and the key
  // is free for this client's other callers (nobody holds it here).
  markLost(hold, err, quiet = false) {
    if (hold.lostError || hold.released) return;
    hold.lostError = err;
    if (!quiet) {
      this.driver.debug(err.message);
      this.count('losses', hold.key);
    }
    this.holdEnded(hold);
    this.letGo(hold);
    for (const fn of hold.listeners) this.driver.defer(() => fn(err));
    this.driver.holdLost(hold, err);
  }

  letGo(hold) {
    if (hold.hasLocal) {
      hold.hasLocal = false;
      this.localDone(hold.key);
    }
  }

  forget(hold) {
    hold.released = true;
    this.holdEnded(hold);
    if (this.holds.get(hold.key) === hold) this.holds.delete(hold.key);
  }

  // Counts a hold's end once (released, lost or the session's end); a
  // ghost (a grant nobody knew of, token 0) is not counted.
  holdEnded(hold) {
    if (hold.ended || !hold.token) return;
    hold.ended = true;
    this.count('holds', hold.key, this.driver.now() - hold.grantedAt);
  }

  // One event for the counters (waits, holds: with the ms observed) and,
  // after the core's turn, for onCounter.
  count(name, key = null, ms = 0) {
    this.counters[name]++;
    const total = `${name.slice(0, -1)}SecondsTotal`; // waits -> waitSecondsTotal
    if (total in this.counters) this.counters[total] += ms / 1000;
    const hook = this.onCounter;
    if (hook) this.driver.defer(() => hook(Object.freeze({ name, key, seconds: ms / 1000 })));
  }

  // A grant nobody will use (its caller gave up, or a RESUME listed a key
  // whose OK was lost with the connection): give it back.
  strayGrant(key) {
    if (this.holds.has(key) && !this.holds.get(key).lost) return;
    this.submit(new Release(new HoldState(key, 0, 'exclusive', null, null, this.session), null));
  }

  // A caller ends its hold (RELEASE); the local key lock goes to the next
  // caller of this client once the broker answered.
  release(hold, lingerMs, out) {
    if (hold.lostError || hold.released) {
      // nothing to send: the broker holds nothing for it any more (and a
      // RELEASE could end a later hold of the same key)
      this.forget(hold);
      settle(out, null, hold.lostError || lost(hold.key, hold.token, 'the session ended', { cls: SessionLostError }));
      return;
    }
    this.submit(new Release(hold, lingerMs, out));
  }

  // --------------------------------------------------- the local key lock

  // Queue acq behind the library's local lock on its key: one request or
  // hold per key and client object at a time, whatever the broker's
  // per-session reentrancy would allow.
  start(acq) {
    const queue = this.local.get(acq.key);
    if (!queue) {
      this.local.set(acq.key, []);
      acq.hasLocal = true;
      this.submit(acq);
      return;
    }
    if (acq.deadline !== null && acq.deadline <= this.driver.now()) {
      acq.state = 'done'; // one try, and this client has the key
      this.count('waits', acq.key);
      settle(acq.out, null, busy(acq.key, null, acq.text, 'another caller of this client'));
      return;
    }
    acq.state = 'local';
    queue.push(acq);
  }

  // The key's request or hold is over: the next of this client.
  localDone(key) {
    const queue = this.local.get(key);
    if (!queue) return;
    while (queue.length) {
      const next = queue.shift();
      if (next.state !== 'local') continue;
      next.hasLocal = true;
      next.state = 'new';
      this.submit(next);
      return;
    }
    this.local.delete(key);
  }

  // ------------------------------------------------------------ watches

  watchChanged(w, state) {
    w.state = state;
    for (const fn of w.listeners) this.driver.defer(() => fn(state));
  }

  // The broker refused to watch key: its listeners are told, and it is
  // watched no more (never asked for again).
  watchFailed(key, err) {
    const w = this.watches.get(key);
    if (!w || !w.active) return;
    this.watches.delete(key);
    w.active = false;
    this.driver.debug(`${err.message}: the watch ended`);
    for (const fn of w.listeners) this.driver.defer(() => fn(err));
  }

  // -------------------------------------------------------- connections

  // The connection is gone: what was in flight waits for the next.
  connectionLost() {
    for (let req = this.pending.shift(); req; req = this.pending.shift()) this.dropped.push(req);
    this.blocking = 0;
    for (const acq of this.waits.values()) acq.state = 'dropped';
  }

  // No connection could be made (the retry budget ran out): every request
  // fails, every hold is lost, the waits end.
  failAll(err, quiet = false) {
    const reqs = this.dropped.concat(this.pending.drain(), this.outq);
    this.dropped = [];
    this.outq = [];
    for (const acq of [...this.waits.values()]) acq.finish(this, err);
    for (const req of reqs) {
      if (req instanceof Acquire) {
        req.finish(this, err);
      } else {
        if (req instanceof Release) {
          req.ended(this); // the session's end frees it
          settle(req.out, undefined);
        }
        settle(req.out, null, err);
      }
    }
    this.endSession(err.message, quiet);
  }

  // The client is closed: everything fails, the requests queued behind the
  // local key locks too (nothing will be sent again).
  shutdown(err) {
    this.failAll(err, true);
    while (this.outq.length || this.local.size) {
      for (const queue of this.local.values()) {
        for (const acq of queue) acq.finish(this, err);
      }
      this.local.clear();
      this.failAll(err, true);
    }
  }

  // The session is gone: every hold is lost (SessionLostError, why).
  endSession(why, quiet = false) {
    for (const hold of this.holds.values()) {
      this.markLost(hold, lost(hold.key, hold.token, why, { cls: SessionLostError }), quiet);
    }
    this.holds.clear();
    this.session++;
  }

  // A generator: yields arrays of request lines, is given the array of
  // their replies, returns true (resumed) or false (a new session).
  // Throws NotAuthenticatedError, VersionError, BrokerError.
  /** @returns {Generator<string[], boolean, string[]>} */
  * handshake(resume) {
    this.handshaking = true;
    this.requeued = new Set();
    this.listed = new Set();
    this.resumeError = null;
    const lines = [];
    if (this.auth) lines.push(`AUTH ${this.auth}`);
    const hello = this.name ? `HELLO ${this.name}` : 'HELLO';
    const resuming = resume && this.graceMs > 0 && this.secret !== null;
    lines.push(resuming || !this.graceMs ? hello : `${hello} GRACE ${this.graceMs}`);
    lines.push('EVENTS ON');
    if (resuming) lines.push(`RESUME ${this.clientId} ${this.secret}`);
    const replies = yield lines;
    if (this.auth) {
      const r = replies.shift();
      if (r !== 'OK') throw errorFromReply(r, 'AUTH');
    }
    this.hello(replies[0], !resuming);
    if (replies[1] !== 'OK') throw errorFromReply(replies[1], 'EVENTS ON');
    if (!resuming) return false;
    const answer = replies[2];
    if (answer.startsWith('OK')) {
      for (const key of P.parseList(answer)) this.listed.add(key);
      yield ['PING']; // the events the RESUME sends come before its reply
      return true;
    }
    const err = errorFromReply(answer, 'RESUME');
    if (err.code === 'UNAVAILABLE') throw err;
    this.driver.debug(`session ${this.clientId} could not be resumed: ${err.message}`);
    this.resumeError = err;
    const again = yield [`${hello} GRACE ${this.graceMs}`];
    this.hello(again[0], true);
    return false;
  }

  hello(reply, fresh) {
    if (!reply.startsWith('OK ')) throw errorFromReply(reply, 'HELLO');
    const version = P.parseVersion(reply);
    const recent = P.versionAtLeast(version, P.MIN_VERSION);
    if (!recent && !this.allowOld) {
      throw new VersionError(`the broker speaks lockbroker/${version.join('.')}; this library needs protocol ${P.MIN_VERSION.join('.')} or later`);
    }
    this.version = version;
    this.asyncWaits = recent;
    if (fresh) {
      const w = reply.split(' ');
      this.clientId = w[1];
      this.secret = w[3] || null;
    }
  }

  // After the handshake: what the old connection left, settled or queued
  // again, ahead of anything callers queued meanwhile. Resumed: a hold
  // RESUME does not list is lost, a listed key nobody knew of (its OK was
  // lost with the connection) is released, a wait the broker did not say
  // QUEUED for is issued again, a wait it did but nobody wants is
  // cancelled. A new session: every hold is lost, every wait issued again,
  // every watch set again.
  reconcile(resumed) {
    const listed = resumed ? this.listed : new Set();
    const front = [];
    if (resumed) {
      const releasing = new Set(this.dropped.filter((r) => r instanceof Release).map((r) => r.key));
      for (const [key, hold] of [...this.holds]) {
        if (!listed.has(key) && !releasing.has(key)) {
          this.markLost(hold, lost(key, hold.token, 'not kept by the RESUME', { request: 'RESUME' }));
          this.forget(hold);
        }
      }
      for (const key of [...listed].sort()) {
        if (!this.holds.has(key)) {
          front.push(new Release(new HoldState(key, 0, 'exclusive', null, null, this.session), null));
        }
      }
    }
    for (const [key, acq] of [...this.waits]) {
      if (resumed && this.requeued.has(key)) {
        acq.state = 'queued';
        continue;
      }
      this.waits.delete(key);
      if (acq.dropped(this, resumed, listed)) front.push(acq);
    }
    const dropped = this.dropped;
    this.dropped = [];
    for (const req of dropped) {
      if (req.dropped(this, resumed, listed)) front.push(req);
    }
    if (resumed) {
      for (const key of this.requeued) {
        if (!this.waits.has(key)) front.push(new Cancel(key)); // its caller gave up
      }
    } else {
      const why = this.resumeError;
      this.endSession(why ? `the session could not be resumed (${why.text})`
        : 'the connection was lost, and the session with it');
      for (const [key, w] of this.watches) {
        if (w.active && !front.some((r) => r instanceof Watch && r.key === key)) front.push(new Watch(key));
      }
    }
    this.outq = front.concat(this.outq);
    this.resumeError = null;
    this.requeued = new Set();
    this.listed = new Set();
    this.handshaking = false;
  }
}

module.exports = {
  Core, Outcome, Deque, HoldState, WatchState, Request, Acquire, Release, HoldRequest, Cancel,
  Watch, FOREVER_STEP_MS, settle,
};
