'use strict';
// Client: one broker session over one connection, shared by every async
// caller of a process. It drives the session core (core.js): requests are
// written as they come, batched per turn of the event loop (pipelined),
// replies and EVENT lines are routed by the core; a timer sends the idle
// PING and declares a silent connection dead; a broken connection is
// resumed (RESUME) on the next broker of the list, with backoff, within
// the retry budget. Hold and Watch are the caller's faces of a hold and
// of a watch.
//
// The end of the process ends the session with QUIT, so the broker frees
// its locks at once rather than after the grace: an idle client's socket
// does not keep the process alive ('beforeExit' then closes it), and
// process.exit() (the 'exit' event) writes QUIT before the process goes.

const { EventEmitter } = require('events');
const { AsyncLocalStorage } = require('async_hooks');
const { performance } = require('perf_hooks');
const util = require('util');
const P = require('./protocol');
const {
  Core, Outcome, Acquire, Request, HoldRequest, Watch: WatchRequest, WatchState,
} = require('./core');
const {
  ClosedError, ConnectError, LockBrokerError, LockTimeoutError, NotAuthenticatedError, UsageError,
  VersionError, WaitCancelledError, describe, keyOf,
} = require('./errors');
const { openConnection } = require('./connection');

const debug = util.debuglog('lockbroker');
const now = () => performance.now();
// Node >= 18.18 and 20.4 have it; older 18s get Node's own name for it.
const asyncDispose = Symbol.asyncDispose || Symbol.for('nodejs.asyncDispose');

const DEFAULTS = {
  // ms the broker keeps a broken session's locks for a RESUME: long enough
  // to resume on another broker after a broker's kill -9 (measured: 50
  // clients back within 40 ms), short enough that a crashed app's locks
  // are free within seconds. The same in every lockbroker library.
  grace: 5000,
  auth: null,
  tls: null,
  name: null,
  connectTimeout: 5000,
  resumeTimeout: null, // the grace (10 s without one)
  // ms without a byte from the broker before the idle PING, and then
  // without any before the connection is declared dead: a broker whose
  // host vanished (no FIN, no RST) is found within their sum, 4 s, and the
  // session resumed elsewhere while its record lives (the grace plus two
  // of the broker's touch periods after its last touch: 6.7 s at the least
  // for the default grace). The same in every lockbroker library.
  pingInterval: 2000,
  pingTimeout: 2000,
  requestTimeout: 30000,
  onEvent: null,
  onCounter: null,
};

function positive(options, what) {
  const v = options[what];
  if (typeof v !== 'number' || !(v > 0)) throw new TypeError(`${what} must be a number of milliseconds > 0, not ${v}`);
  return v;
}

// The options, checked once; brokers as a list of { host, port }.
function makeOptions(brokers, options) {
  const o = { ...DEFAULTS, ...options };
  const list = (Array.isArray(brokers) ? brokers : String(brokers).split(','))
    .map((b) => String(b).trim()).filter(Boolean);
  if (!list.length) throw new TypeError('no broker address');
  o.brokers = list.map((b) => P.parseAddress(b));
  if (o.auth != null) P.checkWord(o.auth, 'the auth token');
  if (o.name != null) P.checkWord(o.name, 'the session name');
  o.graceMs = o.grace ? P.toMs(o.grace, 'grace') : 0;
  if (o.resumeTimeout == null) o.resumeTimeout = o.graceMs || 10000;
  for (const what of ['connectTimeout', 'resumeTimeout', 'pingInterval', 'pingTimeout', 'requestTimeout']) {
    positive(o, what);
  }
  if (o.tls === true) o.tlsOptions = {};
  else if (o.tls && typeof o.tls === 'object') o.tlsOptions = o.tls;
  else o.tlsOptions = null;
  // each handshake reply (HELLO, RESUME) may take this long: a broker that
  // accepts connections but answers nothing is passed over for the next
  o.handshakeTimeout = Math.min(o.connectTimeout, Math.max(1000, o.pingTimeout));
  // how long past a wait's deadline the broker's own TIMEOUT may take
  o.margin = Math.max(1000, o.pingTimeout);
  o.allowOld = process.env.LOCKBROKER_ALLOW_OLD === '1';
  return o;
}

// The keys a withLock() callback runs under, per client: a second take of
// one of them there is a UsageError (it would wait for itself).
const scopes = new AsyncLocalStorage();

function inScope(client, key) {
  for (let s = scopes.getStore(); s; s = s.parent) {
    if (s.client === client && s.key === key) return true;
  }
  return false;
}

// What an aborted signal ends a wait with: LockTimeoutError when it timed
// out (AbortSignal.timeout()), else WaitCancelledError.
function cancelledBy(signal, key = null, request = null) {
  const reason = signal.reason;
  if (reason && reason.name === 'TimeoutError') {
    return new LockTimeoutError(describe(key, 'not granted before the signal timed out'), {
      key, request, cause: reason,
    });
  }
  return new WaitCancelledError(describe(key, 'the wait was aborted'), { key, request, cause: reason });
}

// The error of a request the broker did not answer in time.
function noAnswer(request, ms) {
  const key = keyOf(request);
  return new ConnectError(describe(key || request.split(' ', 1)[0], `no answer within ${ms} ms`), { key, request });
}

// The clients whose session is open: the end of the process ends each.
const live = new Set();
let hooked = false;

function track(client) {
  live.add(client);
  if (hooked) return;
  hooked = true;
  // the event loop ran dry: nothing is asked of these clients any more
  process.on('beforeExit', () => {
    for (const c of [...live]) c.close().catch(() => {});
  });
  // process.exit(), or the end after beforeExit: only synchronous work
  process.on('exit', () => {
    for (const c of [...live]) c.endNow();
  });
}

class Client extends EventEmitter {
  // brokers: "host:port", a comma-separated list or an array; see the
  // README (and index.d.ts) for the options.
  constructor(brokers = '127.0.0.1:7711', options = {}) {
    super();
    this.opts = makeOptions(brokers, options);
    this.core = new Core(this, {
      name: this.opts.name, graceMs: this.opts.graceMs, auth: this.opts.auth, allowOld: this.opts.allowOld,
    });
    this.conn = null;
    this.started = false;
    this.connected = false;
    this.closed = false;
    this.closing = false; // QUIT sent: the end is no break
    this.closePromise = null; // close()'s, once called
    this.current = 0; // the broker in use
    this.pingSent = null;
    this.pingTimer = null;
    this.pingRecheck = null; // the PING's deadline judged after the I/O of this turn
    this.flushSoon = false;
    this.sleeping = null; // the reconnect's backoff: { timer, wake }
    this.core.onCounter = (event) => {
      if (this.opts.onCounter) this.opts.onCounter(event);
      this.emit('counter', event);
    };
    this.watchFaces = new Set(); // the open Watch objects
    this.reffed = true; // the socket keeps the event loop alive
  }

  // Makes a client and connects it.
  static async connect(brokers, options) {
    return new Client(brokers, options).connect();
  }

  get clientId() { return this.core.clientId; }

  get version() { return this.core.version ? this.core.version.join('.') : null; }

  get broker() { return P.addressText(this.opts.brokers[this.current]); }

  // A snapshot of the client's counters (see the README's Counters).
  counters() { return Object.freeze({ ...this.core.counters }); }

  // ------------------------------------------------ the core's driver
  now() { return now(); }

  defer(fn) { queueMicrotask(fn); }

  debug(text) { debug('%s', text); }

  wakeWriter() {
    if (!this.flushSoon) {
      this.flushSoon = true;
      queueMicrotask(() => this.flush());
    }
  }

  wrapHold(state) { return new Hold(this, state); }

  holdLost(state, err) {
    this.defer(() => {
      if (state.controller) state.controller.abort(err);
      this.emit('lost', state.face, err);
    });
  }

  flush() {
    this.flushSoon = false;
    if (this.connected && this.conn) {
      const data = this.core.takeOutgoing();
      if (data) this.conn.write(data);
    }
    this.updateRef();
  }

  // The socket (and the reconnect's backoff) keeps the process alive only
  // while the client is busy: a call in progress or a watch with someone
  // listening for its changes. An idle client lets a script end.
  updateRef() {
    const busy = this.busy();
    if (busy === this.reffed) return;
    this.reffed = busy;
    const socket = this.conn && this.conn.socket;
    if (socket) {
      if (busy) socket.ref();
      else socket.unref();
    }
    if (this.sleeping) {
      if (busy) this.sleeping.timer.ref();
      else this.sleeping.timer.unref();
    }
  }

  busy() {
    return this.core.busy() || [...this.watchFaces].some((w) => w.listenerCount('change') > 0);
  }

  // ----------------------------------------------------- connections

  // Connects to the first broker that answers (AUTH, HELLO, the version
  // check). Rejects with VersionError, NotAuthenticatedError or
  // ConnectError (then the client is closed).
  async connect() {
    if (this.started) throw new UsageError('connect() once per client');
    this.started = true;
    const errors = [];
    for (let i = 0; i < this.opts.brokers.length; i++) {
      try {
        const { conn } = await this.openSession(i, false);
        if (this.closed) {
          conn.destroy();
          break;
        }
        this.install(conn, i, false);
        this.connectionEvent('connected', i);
        track(this);
        return this;
      } catch (e) {
        if (e instanceof VersionError || e instanceof NotAuthenticatedError) {
          this.closed = true;
          throw e;
        }
        errors.push(`${P.addressText(this.opts.brokers[i])}: ${e.message}`);
      }
    }
    this.closed = true;
    throw new ConnectError(`no broker answered: ${errors.join('; ') || 'the client was closed'}`);
  }

  async openSession(i, resume) {
    const o = this.opts;
    const conn = await openConnection(o.brokers[i], {
      tlsOptions: o.tlsOptions,
      connectTimeout: o.connectTimeout,
      keepAliveMs: Math.max(1000, Math.floor((o.pingInterval + o.pingTimeout) / 3)),
    });
    conn.hsEvents = (line) => this.feed(conn, line);
    try {
      const gen = this.core.handshake(resume);
      let step = gen.next();
      while (!step.done) {
        const lines = /** @type {string[]} */ (step.value);
        conn.write(`${lines.join('\n')}\n`);
        step = gen.next(await conn.replies(lines.length, o.handshakeTimeout));
      }
      return { conn, resumed: step.value };
    } catch (e) {
      conn.destroy();
      throw e;
    }
  }

  install(conn, i, resumed) {
    conn.hsEvents = null;
    conn.handler = (line) => {
      this.feed(conn, line);
      this.updateRef();
    };
    conn.onclose = (reason) => this.connectionLost(conn, reason);
    this.core.reconcile(resumed);
    this.conn = conn;
    this.current = i;
    this.connected = true;
    this.pingSent = null;
    this.reffed = true; // a new socket is
    // lines that came with the handshake's last reply
    const early = conn.hsLines;
    conn.hsLines = [];
    for (const line of early) this.feed(conn, line);
    if (conn.closed) {
      this.connectionLost(conn, conn.closeReason);
      return;
    }
    this.flush();
    this.schedulePing();
  }

  feed(conn, line) {
    try {
      this.core.feed(line);
    } catch (e) {
      debug('%s: dropping the connection', e.message);
      conn.destroy(e.message);
    }
  }

  connectionLost(conn, reason) {
    if (conn !== this.conn) return;
    this.conn = null;
    this.connected = false;
    this.stopPing();
    this.core.connectionLost();
    if (this.closed || this.closing) return;
    this.reconnect(reason).catch((e) => debug('reconnect: %s', e.stack));
  }

  // The reconnect policy: the next broker first (the one in use may be
  // dead or stopped; any broker of the same Redis can resume), every
  // broker in turn, backoff from 50 ms doubling to 1 s; RESUME until the
  // retry budget runs out, then every request fails, every hold is
  // reported lost, and a new session is tried for as long as the client
  // lives.
  async reconnect(reason) {
    this.connectionEvent('disconnected', this.current, reason);
    const giveUpAt = now() + this.opts.resumeTimeout;
    const n = this.opts.brokers.length;
    let resume = true;
    let delay = 50;
    let last = '';
    while (!this.closed) {
      for (let k = 1; k <= n; k++) {
        const i = (this.current + k) % n;
        if (this.closed) return;
        try {
          const { conn, resumed } = await this.openSession(i, resume);
          if (this.closed) {
            conn.destroy();
            return;
          }
          this.core.count('reconnects');
          if (resumed) this.core.count('resumes');
          this.install(conn, i, resumed);
          this.connectionEvent(resumed ? 'resumed' : 'new_session', i);
          return;
        } catch (e) {
          last = `${P.addressText(this.opts.brokers[i])}: ${e.message}`;
          debug('reconnect: %s', last);
        }
      }
      if (resume && now() >= giveUpAt) {
        resume = false;
        this.core.failAll(new ConnectError(`no broker answered within ${this.opts.resumeTimeout} ms: ${last}`));
        this.connectionEvent('reconnect_failed', null, last);
      }
      await this.sleep(delay);
      delay = Math.min(delay * 2, 1000);
    }
  }

  sleep(ms) {
    return new Promise(/** @param {(v?: unknown) => void} resolve */ (resolve) => {
      const wake = () => {
        this.sleeping = null;
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.reffed = this.busy();
      if (!this.reffed) timer.unref();
      this.sleeping = { wake, timer };
    });
  }

  // Tells the onEvent hook and 'connection' listeners: kind is connected,
  // disconnected, resumed, new_session or reconnect_failed; i the broker.
  connectionEvent(kind, i, detail = '') {
    const event = {
      kind,
      broker: i === null ? '' : P.addressText(this.opts.brokers[i]),
      detail: detail || (i !== null ? `session ${this.core.clientId}` : ''),
    };
    debug('%s %s %s', kind, event.broker, event.detail);
    this.defer(() => {
      if (this.opts.onEvent) this.opts.onEvent(event);
      this.emit('connection', event);
    });
  }

  // The idle PING: after pingInterval without a byte from the broker,
  // PING; without any byte pingTimeout after it, the connection is dead
  // (unless a 1.1 blocking wait holds the replies back). A reply still
  // arriving is no silence: every chunk read counts (lastRx).
  schedulePing(afterIo = false) {
    this.stopPing();
    if (!this.connected || this.closed) return;
    const o = this.opts;
    const t = now();
    const lastRx = this.conn.lastRx;
    let due = lastRx + o.pingInterval;
    if (this.pingSent !== null) {
      if (lastRx >= this.pingSent) {
        this.pingSent = null;
      } else if (t - this.pingSent >= o.pingTimeout && !this.core.blocking) {
        if (!afterIo) {
          // an event loop kept busy (by the app) runs timers before it
          // reads what came meanwhile: read first, then judge
          this.pingRecheck = setImmediate(() => this.schedulePing(true));
          this.pingRecheck.unref();
          return;
        }
        this.pingSent = null;
        this.conn.destroy(`no reply to PING within ${o.pingTimeout} ms`);
        return;
      } else {
        due = this.pingSent + o.pingTimeout;
      }
    }
    if (this.pingSent === null && t >= due) {
      this.pingSent = t;
      this.core.submit(new Request('PING', null, null, false));
      due = t + o.pingTimeout;
    }
    this.pingTimer = setTimeout(() => this.schedulePing(), Math.max(10, due - t));
    this.pingTimer.unref();
  }

  stopPing() {
    clearTimeout(this.pingTimer);
    clearImmediate(this.pingRecheck);
    this.pingTimer = null;
    this.pingRecheck = null;
  }

  // -------------------------------------------------------- requests

  checkOpen() {
    if (this.closed) throw new ClosedError('the client is closed');
    if (!this.started) throw new UsageError('connect() the client first');
  }

  // Sends req, resolves with its parsed reply.
  async call(req) {
    this.checkOpen();
    req.out = new Outcome();
    this.core.submit(req);
    const timer = setTimeout(() => {
      req.abandoned = true;
      req.out.reject(noAnswer(req.text, this.opts.requestTimeout));
    }, this.opts.requestTimeout);
    try {
      return await req.out.promise;
    } finally {
      clearTimeout(timer);
    }
  }

  // Takes key: resolves with a Hold; see index.d.ts for the options.
  async lock(key, options = {}) {
    this.checkOpen();
    const o = options || {};
    P.checkKey(key);
    P.checkKind(o.shared, o.limit, o.value, key);
    if (inScope(this, key)) {
      throw new UsageError(`${key} is held or being taken through this client by this withLock() callback`);
    }
    const wait = o.wait == null ? Infinity : o.wait;
    if (typeof wait !== 'number' || Number.isNaN(wait) || wait < 0) {
      throw new TypeError(`wait must be a number of milliseconds >= 0, not ${wait}`);
    }
    const { signal } = o;
    if (signal && signal.aborted) throw cancelledBy(signal, key);
    const t = now();
    const core = this.core;
    const acq = new Acquire(key, new Outcome(), {
      shared: !!o.shared,
      limit: o.limit == null ? null : o.limit,
      deadline: wait === Infinity ? null : t + wait,
      ttlMs: o.ttl == null ? null : P.toMs(o.ttl, 'ttl', 1),
      value: o.value == null ? null : o.value,
      listeners: o.onLost ? [o.onLost] : [],
      now: t,
    });
    core.start(acq);
    if (acq.out.done) return acq.out.promise;
    const onAbort = () => acq.cancel(core, cancelledBy(signal, key, acq.text));
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
    let timer = null;
    if (acq.deadline !== null) {
      const timeout = () => acq.cancel(core, acq.timedOut());
      timer = setTimeout(() => {
        // the broker's answer is on its way: give it a margin
        if (acq.state === 'sent' || acq.state === 'queued' || (acq.state === 'new' && this.connected)) {
          timer = setTimeout(timeout, this.opts.margin);
        } else {
          timeout();
        }
      }, Math.max(0, acq.deadline - now()));
    }
    try {
      return await acq.out.promise;
    } finally {
      clearTimeout(timer);
      if (signal) signal.removeEventListener('abort', onAbort);
    }
  }

  // Runs fn(hold) under key, then releases it; see index.d.ts.
  async withLock(key, options, fn) {
    if (typeof options === 'function') {
      fn = options;
      options = {};
    }
    if (typeof fn !== 'function') throw new TypeError('withLock(key, [options], fn): fn is a function');
    const hold = await this.lock(key, options);
    let result;
    try {
      result = await scopes.run({ client: this, key, parent: scopes.getStore() }, () => fn(hold));
    } catch (e) {
      await hold.release().catch(() => {});
      throw e;
    }
    await hold.release();
    return result;
  }

  // Runs for leader of key with value (the leader's address, say): resolves
  // with the Hold once leading. Everyone's watch(key).leader names it.
  elect(key, value, options = {}) {
    return this.lock(key, { ...options, value, shared: false, limit: null });
  }

  async owner(key) {
    this.checkOpen();
    P.checkKey(key);
    return this.call(new Request(this.core.asyncWaits ? `OWNER ${key} VALUE` : `OWNER ${key}`, null, P.parseOwner));
  }

  async check(key, token) {
    this.checkOpen();
    P.checkKey(key);
    if (!Number.isSafeInteger(token) || token < 1) throw new TypeError(`a token is an integer 1..2^53-1, not ${token}`);
    return this.call(new Request(`CHECK ${key} ${token}`, null, (line) => P.parseCheck(line, token)));
  }

  // Watches key: resolves with a Watch once the broker said OK.
  async watch(key) {
    this.checkOpen();
    P.checkKey(key);
    const w = new Watch(this, key);
    let st = this.core.watches.get(key);
    const fresh = !st;
    if (!st) {
      st = new WatchState(key);
      this.core.watches.set(key, st);
    }
    st.listeners.add(w.listener);
    this.watchFaces.add(w);
    if (st.state) w.listener(st.state);
    if (fresh) {
      try {
        await this.call(new WatchRequest(key));
      } catch (e) {
        await w.close();
        throw e;
      }
    }
    return w;
  }

  async unwatch(w) {
    this.watchFaces.delete(w);
    this.updateRef();
    const st = this.core.watches.get(w.key);
    if (!st || !st.listeners.delete(w.listener) || st.listeners.size) return;
    st.active = false;
    this.core.watches.delete(w.key);
    if (this.closed) return;
    try {
      await this.call(new Request(`UNWATCH ${w.key}`, null, null, false));
    } catch (e) {
      if (!(e instanceof LockBrokerError)) throw e;
    }
  }

  async held() { return this.call(new Request('HELD', null, P.parseList)); }

  async ping() { await this.call(new Request('PING')); }

  async stats() { return this.call(new Request('STATS', null, P.parseStats)); }

  // Ends the session (QUIT): the broker releases everything it held. The
  // client's holds are reported lost (SessionLostError) if still held.
  close() {
    if (!this.closePromise) {
      this.closing = true;
      this.closePromise = this.end();
    }
    return this.closePromise;
  }

  async end() {
    if (this.closed) return;
    if (!this.started) {
      this.closed = true;
      return;
    }
    live.delete(this);
    if (this.connected) {
      const quit = new Request('QUIT', null, null, false);
      const bound = setTimeout(() => quit.out && quit.out.reject(new ConnectError('QUIT')),
        Math.min(2000, this.opts.requestTimeout));
      try {
        await this.call(quit);
      } catch (e) {
        // the connection ends anyway
      } finally {
        clearTimeout(bound);
      }
    }
    this.closed = true;
    this.shut();
    if (this.conn) {
      this.conn.onclose = null;
      this.conn.destroy();
      this.conn = null;
    }
  }

  // What close() and endNow() leave behind: no timers, every call and
  // hold ended.
  shut() {
    this.connected = false;
    this.stopPing();
    if (this.sleeping) this.sleeping.wake();
    this.core.shutdown(new ClosedError('the client was closed'));
  }

  // The end of the process ('exit': nothing asynchronous runs any more):
  // QUIT goes to the socket now (Node writes to an idle socket before
  // write() returns), and the client is closed. The broker answers and
  // closes the connection; the process does not wait for it.
  endNow() {
    if (this.closed || this.closing) return;
    this.closing = true;
    this.closePromise = Promise.resolve();
    live.delete(this);
    if (this.connected && this.conn) {
      this.conn.handler = () => {};
      this.conn.onclose = null;
      this.conn.writeNow('QUIT\n');
    }
    this.closed = true;
    this.shut();
  }

  [asyncDispose]() { return this.close(); }
}

// A hold of a key: its fencing token, and an AbortSignal that aborts when
// the hold is lost.
class Hold {
  constructor(client, state) {
    this.client = client;
    this.state = state;
    this.releasing = false;
  }

  get key() { return this.state.key; }

  get token() { return this.state.token; }

  get kind() { return this.state.kind; }

  get limit() { return this.state.limit; }

  get value() { return this.state.value; }

  get lost() { return this.state.lostError !== null; }

  get lostError() { return this.state.lostError; }

  get released() { return this.releasing; }

  // Aborted (reason: the LockLostError) when the hold is lost.
  get signal() {
    const st = this.state;
    if (!st.controller) {
      st.controller = new AbortController();
      if (st.lostError) st.controller.abort(st.lostError);
    }
    return st.controller.signal;
  }

  // fn(err) when the hold is lost (soon, if it is already).
  onLost(fn) {
    const st = this.state;
    if (st.lostError) this.client.defer(() => fn(st.lostError));
    else st.listeners.push(fn);
    return this;
  }

  usable() {
    if (this.releasing) throw new UsageError(describe(this.key, 'released already'), { key: this.key });
    if (this.state.lostError) throw this.state.lostError;
  }

  async release(options = {}) {
    if (this.releasing) throw new UsageError(describe(this.key, 'released already'), { key: this.key });
    this.releasing = true;
    const linger = options && options.linger;
    const lingerMs = linger ? P.toMs(linger, 'linger', 1) : null;
    const c = this.client;
    const out = new Outcome();
    c.core.release(this.state, lingerMs, out);
    const timer = setTimeout(() => out.reject(noAnswer(`RELEASE ${this.key}`, c.opts.requestTimeout)),
      c.opts.requestTimeout);
    try {
      await out.promise;
    } finally {
      clearTimeout(timer);
    }
  }

  // Sets the key's TTL in Redis (ttl: ms, or the current one); resolves
  // with the TTL set, in ms.
  async renew(options = {}) {
    this.usable();
    const ttl = options && options.ttl;
    const text = ttl == null ? `RENEW ${this.key}` : `RENEW ${this.key} TTL ${P.toMs(ttl, 'ttl', 1)}`;
    return this.client.call(new HoldRequest(text, this.state, null, (line) => Number(line.split(' ')[1])));
  }

  // Replaces the hold's value (1.2 PROCLAIM).
  async proclaim(value) {
    this.usable();
    P.checkValue(value);
    if (this.kind !== 'exclusive') throw new TypeError('a value goes on an exclusive hold only');
    await this.client.call(new HoldRequest(`PROCLAIM ${this.key} ${value}`, this.state, null));
    this.state.value = value;
  }

  // Releases the hold unless it was; rejects with its LockLostError if it
  // was lost (the work under it was not protected to its end).
  async [asyncDispose]() {
    if (this.releasing) return;
    await this.release();
  }

  [util.inspect.custom]() {
    return `Hold { key: ${this.key}, token: ${this.token}, kind: ${this.kind}${this.lost ? ', LOST' : ''} }`;
  }
}

// A watched key: state (the latest), 'change' events, wait(predicate),
// and async iteration over its states. If the broker refuses the watch (a
// failover to a broker without WATCH), `error` says why, 'error' listeners
// are told, and wait() and the iteration reject with it.
class Watch extends EventEmitter {
  constructor(client, key) {
    super();
    this.client = client;
    this.key = key;
    this.state = null;
    this.error = null;
    this.closed = false;
    this.listener = (x) => {
      if (x instanceof Error) {
        this.error = x;
        this.closed = true;
        this.client.watchFaces.delete(this);
        this.emit('failed', x);
        if (this.listenerCount('error')) this.emit('error', x);
        return;
      }
      this.state = x;
      this.emit('change', x);
    };
    // who listens for changes decides whether the process may end
    const recount = () => queueMicrotask(() => client.updateRef());
    this.on('newListener', recount);
    this.on('removeListener', recount);
  }

  // The value of the key's exclusive holder: the elected leader's (null:
  // nobody, or a holder without a value).
  get leader() {
    const s = this.state;
    return s && s.kind === 'exclusive' ? s.value : null;
  }

  // Resolves with the first state (the current one included) for which
  // predicate(state) is true; options.timeout (ms) rejects with
  // LockTimeoutError, options.signal aborts.
  /** @param {(state: object) => boolean} [predicate] */
  wait(predicate = () => true, { timeout = null, signal = null } = {}) {
    if (this.state && predicate(this.state)) return Promise.resolve(this.state);
    return new Promise((resolve, reject) => {
      let timer = null;
      const done = (err, state) => {
        clearTimeout(timer);
        this.off('change', onChange);
        this.off('close', onClose);
        this.off('failed', onClose);
        if (signal) signal.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve(state);
      };
      const onChange = (s) => { if (predicate(s)) done(null, s); };
      const onClose = () => done(this.error
        || new UsageError(describe(this.key, 'the watch is closed'), { key: this.key }));
      const onAbort = () => done(cancelledBy(signal, this.key));
      if (this.closed) return onClose();
      if (signal && signal.aborted) return onAbort();
      this.on('change', onChange);
      this.on('close', onClose);
      this.on('failed', onClose);
      if (signal) signal.addEventListener('abort', onAbort, { once: true });
      if (timeout !== null) {
        timer = setTimeout(() => done(new LockTimeoutError(describe(this.key, `the watch saw no such state within ${timeout} ms`),
          { key: this.key })), timeout);
      }
      return undefined;
    });
  }

  // The current state (if known), then each change, until close().
  async* [Symbol.asyncIterator]() {
    const queue = this.state ? [this.state] : [];
    let wake = null;
    const onChange = (s) => {
      queue.push(s);
      if (queue.length > 1000) queue.shift(); // a consumer that lags sees the latest
      if (wake) wake();
    };
    const onClose = () => { if (wake) wake(); };
    this.on('change', onChange);
    this.on('close', onClose);
    this.on('failed', onClose);
    try {
      for (;;) {
        while (queue.length) yield queue.shift();
        if (this.error) throw this.error;
        if (this.closed) return;
        await new Promise((resolve) => { wake = resolve; });
        wake = null;
      }
    } finally {
      this.off('change', onChange);
      this.off('close', onClose);
      this.off('failed', onClose);
    }
  }

  async close() {
    if (this.closed) return;
    this.closed = true;
    this.emit('close');
    await this.client.unwatch(this);
  }

  [asyncDispose]() { return this.close(); }
}

module.exports = { Client, Hold, Watch, makeOptions };
