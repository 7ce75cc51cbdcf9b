'use strict';
// The session core with a recording driver (no sockets, a clock the test
// moves): the lines written, replies and events routed, the local key
// lock, ASYNC waits and their cancellation races, the handshake, and what
// a reconnect settles or sends again.

const test = require('node:test');
const assert = require('node:assert/strict');
const {
  Core, Outcome, Acquire, Request, Release, HoldRequest, Watch, WatchState,
} = require('../../lib/core');
const E = require('../../lib/errors');
const P = require('../../lib/protocol');

class Driver {
  constructor() {
    this.t = 1000;
    this.deferred = [];
    this.lost = [];
  }

  now() { return this.t; }

  defer(fn) { this.deferred.push(fn); }

  runDeferred() { for (const fn of this.deferred.splice(0)) fn(); }

  wakeWriter() {}

  wrapHold(state) { return state; }

  holdLost(state, err) { this.lost.push([state.key, err]); }

  debug() {}
}

function setup(opts = {}) {
  const driver = new Driver();
  const core = new Core(driver, { graceMs: 30000, ...opts });
  core.clientId = 'cid';
  core.secret = 'sec';
  core.version = [1, 2, 0];
  return { driver, core };
}

// The lines the core would write now.
const written = (core) => core.takeOutgoing().split('\n').filter(Boolean);

// Settled state of an Outcome: ['ok', value] / ['err', error] / ['pending'].
async function state(out) {
  if (!out.done) return ['pending'];
  try {
    return ['ok', await out.promise];
  } catch (e) {
    return ['err', e];
  }
}

function acquire(core, key, opts = {}) {
  const acq = new Acquire(key, new Outcome(), { now: core.driver.now(), ...opts });
  core.start(acq);
  return acq;
}

// Takes key at once (OK <token>) and returns its HoldState.
async function grant(core, key, token, opts = {}) {
  const acq = acquire(core, key, opts);
  written(core);
  core.feed(`OK ${token}`);
  const [kind, hold] = await state(acq.out);
  assert.equal(kind, 'ok');
  return hold;
}

test('pipelined requests are written in order and each reply goes to its request', async () => {
  const { core } = setup();
  const held = new Request('HELD', new Outcome(), P.parseList);
  const ping = new Request('PING', new Outcome());
  const owner = new Request('OWNER k VALUE', new Outcome(), P.parseOwner);
  core.submit(held);
  core.submit(ping);
  core.submit(owner);
  assert.deepEqual(written(core), ['HELD', 'PING', 'OWNER k VALUE']);
  core.feed('OK 1 k');
  core.feed('EVENT LOST other 5'); // an event between two replies
  core.feed('OK PONG');
  core.feed('OK -');
  assert.deepEqual(await held.out.promise, ['k']);
  assert.equal(await ping.out.promise, 'OK PONG');
  assert.equal((await owner.out.promise).kind, 'free');
  assert.throws(() => core.feed('OK'), E.ProtocolError); // nobody asked
  assert.throws(() => core.feed('HELLO'), E.ProtocolError);
});

test('EVENT LOST goes to the hold it names, with its token, while requests are in flight', async () => {
  const { core, driver } = setup();
  const told = [];
  const b = await grant(core, 'b', 11, { listeners: [(e) => told.push(['b', e])] });
  const a = await grant(core, 'a', 12, { listeners: [(e) => told.push(['a', e])] });
  const stats = new Request('STATS', new Outcome());
  core.submit(stats);
  written(core);
  core.feed('EVENT LOST a 99'); // an older hold's token: not this one
  assert.equal(a.lost, false);
  core.feed('EVENT LOST a 12');
  core.feed('OK version=1.2.0');
  assert.equal(await stats.out.promise, 'OK version=1.2.0');
  assert.ok(a.lostError instanceof E.LockLostError);
  assert.equal(b.lost, false);
  driver.runDeferred();
  assert.deepEqual(told.map(([k]) => k), ['a']);
  assert.deepEqual(driver.lost.map(([k]) => k), ['a']);
  // releasing a lost hold sends nothing and says LOST
  const out = new Outcome();
  core.release(a, null, out);
  assert.deepEqual(written(core), []);
  await assert.rejects(out.promise, E.LockLostError);
});

test('the local key lock: the second caller waits, a one-try is busy at once, a lost hold lets the next in', async () => {
  const { core, driver } = setup();
  const first = await grant(core, 'k', 1);
  const oneTry = acquire(core, 'k', { deadline: driver.now() });
  await assert.rejects(oneTry.out.promise, E.LockBusyError);
  const second = acquire(core, 'k', { deadline: driver.now() + 5000 });
  const third = acquire(core, 'k');
  assert.deepEqual(written(core), []); // nothing reaches the broker yet
  const rel = new Outcome();
  core.release(first, null, rel);
  assert.deepEqual(written(core), ['RELEASE k']);
  core.feed('OK 0');
  await rel.promise;
  driver.t += 1000; // the second's wait has 4 s left
  assert.deepEqual(written(core), ['ACQUIRE k WAIT 4000 ASYNC']);
  core.feed('OK 2');
  const h2 = await second.out.promise;
  core.feed('EVENT LOST k 2');
  assert.ok(h2.lost);
  assert.deepEqual(written(core), [`ACQUIRE k WAIT ${P.MAX_MS} ASYNC`]); // the third: no end
  assert.equal(third.state, 'sent');
});

test('a caller leaving the local queue (cancelled) is skipped', async () => {
  const { core } = setup();
  const first = await grant(core, 'k', 1);
  const second = acquire(core, 'k');
  const third = acquire(core, 'k');
  second.cancel(core, new E.WaitCancelledError());
  await assert.rejects(second.out.promise, { name: 'AbortError' });
  core.release(first, null, new Outcome());
  written(core);
  core.feed('OK 0');
  assert.deepEqual(written(core), [`ACQUIRE k WAIT ${P.MAX_MS} ASYNC`]);
  assert.equal(third.state, 'sent');
});

test('ASYNC waits: queued, then granted, timed out or failed by event', async () => {
  const { core, driver } = setup();
  const g = acquire(core, 'g', { deadline: driver.now() + 3000 });
  const t = acquire(core, 't', { deadline: driver.now() + 3000 });
  const f = acquire(core, 'f', { deadline: driver.now() + 3000 });
  assert.deepEqual(written(core), ['ACQUIRE g WAIT 3000 ASYNC', 'ACQUIRE t WAIT 3000 ASYNC', 'ACQUIRE f WAIT 3000 ASYNC']);
  core.feed('OK QUEUED');
  core.feed('OK QUEUED');
  core.feed('OK QUEUED');
  assert.deepEqual([...core.waits.keys()], ['g', 't', 'f']);
  core.feed('EVENT GRANTED g 77');
  assert.equal((await g.out.promise).token, 77);
  driver.t += 3000;
  core.feed('EVENT TIMEOUT t');
  await assert.rejects(t.out.promise, E.LockTimeoutError);
  core.feed('EVENT FAILED f LIMIT');
  await assert.rejects(f.out.promise, E.LimitError);
  assert.equal(core.waits.size, 0);
  assert.equal(core.local.size, 1); // only g's hold keeps its key
});

test('a wait without end is issued again when the broker clamps it', async () => {
  const { core } = setup();
  const acq = acquire(core, 'k');
  written(core);
  core.feed('OK QUEUED');
  core.feed('EVENT TIMEOUT k');
  assert.deepEqual(written(core), [`ACQUIRE k WAIT ${P.MAX_MS} ASYNC`]);
  core.feed('BUSY'); // a broker that answers BUSY to a wait: again too
  assert.deepEqual(written(core), [`ACQUIRE k WAIT ${P.MAX_MS} ASYNC`]);
  assert.equal(acq.out.done, false);
});

test('BUSY to a one-try is LockBusyError; to a wait whose deadline passed unsent, LockTimeoutError', async () => {
  const { core, driver } = setup();
  const once = acquire(core, 'a', { deadline: driver.now() });
  const patient = acquire(core, 'b', { deadline: driver.now() + 10 });
  driver.t += 20; // b's deadline passes before it is written
  assert.deepEqual(written(core), ['ACQUIRE a ASYNC', 'ACQUIRE b ASYNC']);
  core.feed('BUSY');
  core.feed('BUSY');
  await assert.rejects(once.out.promise, E.LockBusyError);
  await assert.rejects(patient.out.promise, E.LockTimeoutError);
});

test('cancelling a queued wait sends CANCEL; OK 1 ends it and frees the local key', async () => {
  const { core } = setup();
  const acq = acquire(core, 'k');
  const next = acquire(core, 'k');
  written(core);
  core.feed('OK QUEUED');
  acq.cancel(core, new E.WaitCancelledError());
  await assert.rejects(acq.out.promise, { name: 'AbortError' }); // at once
  assert.deepEqual(written(core), ['CANCEL k']);
  assert.equal(next.state, 'local'); // not before the broker confirms
  core.feed('OK 1');
  assert.deepEqual(written(core), [`ACQUIRE k WAIT ${P.MAX_MS} ASYNC`]);
});

test('a grant racing the cancel is given back: GRANTED then OK 0', async () => {
  const { core } = setup();
  const acq = acquire(core, 'k');
  written(core);
  core.feed('OK QUEUED');
  acq.cancel(core, new E.WaitCancelledError());
  assert.deepEqual(written(core), ['CANCEL k']);
  core.feed('EVENT GRANTED k 9');
  core.feed('OK 0');
  assert.deepEqual(written(core), ['RELEASE k']);
  assert.equal(core.holds.size, 0);
  core.feed('OK 0');
  assert.equal(core.local.size, 0);
});

test('cancelled before the reply: OK <token> is released, OK QUEUED cancelled, BUSY ends it', async () => {
  const { core } = setup();
  const a = acquire(core, 'a');
  const b = acquire(core, 'b');
  const c = acquire(core, 'c', { deadline: core.driver.now() + 1000 });
  written(core);
  for (const x of [a, b, c]) x.cancel(core, new E.WaitCancelledError());
  core.feed('OK 5');
  core.feed('OK QUEUED');
  core.feed('BUSY');
  assert.deepEqual(written(core), ['RELEASE a', 'CANCEL b']);
  for (const x of [a, b, c]) await assert.rejects(x.out.promise, { name: 'AbortError' });
  assert.equal(c.state, 'done');
});

test('RELEASE answers: LOST marks the hold, UNAVAILABLE counts as released (the broker finishes it)', async () => {
  const { core } = setup();
  const a = await grant(core, 'a', 1);
  const b = await grant(core, 'b', 2);
  const ra = new Outcome();
  const rb = new Outcome();
  core.release(a, 500, ra);
  core.release(b, null, rb);
  assert.deepEqual(written(core), ['RELEASE a LINGER 500', 'RELEASE b']);
  core.feed('ERR LOST the lock was lost');
  core.feed('ERR UNAVAILABLE redis is down');
  await assert.rejects(ra.promise, E.LockLostError);
  await rb.promise;
  assert.equal(core.holds.size, 0);
  assert.equal(core.local.size, 0);
});

test('RENEW answered ERR LOST marks the hold lost', async () => {
  const { core } = setup();
  const h = await grant(core, 'a', 1);
  const renew = new HoldRequest('RENEW a', h, new Outcome());
  core.submit(renew);
  written(core);
  core.feed('ERR LOST gone');
  await assert.rejects(renew.out.promise, E.LockLostError);
  assert.ok(h.lost);
});

test('the handshake: AUTH, HELLO GRACE, EVENTS ON; the version is checked', () => {
  const { core } = setup({ auth: 'tok', name: 'w1' });
  core.secret = null;
  const gen = core.handshake(false);
  assert.deepEqual(gen.next().value, ['AUTH tok', 'HELLO w1 GRACE 30000', 'EVENTS ON']);
  const done = gen.next(['OK', 'OK newcid lockbroker/1.2.0 s3cr3t', 'OK']);
  assert.deepEqual([done.done, done.value], [true, false]);
  assert.deepEqual([core.clientId, core.secret, core.asyncWaits], ['newcid', 's3cr3t', true]);

  const old = setup().core.handshake(false);
  old.next();
  assert.throws(() => old.next(['OK c lockbroker/1.1.0 s', 'OK']), E.VersionError);

  const noauth = setup({ auth: 'bad' }).core.handshake(false);
  noauth.next();
  assert.throws(() => noauth.next(['ERR NOAUTH wrong token', 'ERR NOAUTH', 'ERR NOAUTH']), E.NotAuthenticatedError);
  const missing = setup().core.handshake(false);
  missing.next();
  assert.throws(() => missing.next(['ERR NOAUTH send AUTH first', 'ERR NOAUTH']), E.NotAuthenticatedError);
});

test('an old broker, allowed (tests only): blocking waits without ASYNC, counted', () => {
  const { core } = setup({ allowOld: true });
  const gen = core.handshake(false);
  gen.next();
  gen.next(['OK c lockbroker/1.0.0 s', 'OK']);
  assert.equal(core.asyncWaits, false);
  acquire(core, 'k', { deadline: core.driver.now() + 2000 });
  acquire(core, 'j', { deadline: core.driver.now() });
  assert.deepEqual(written(core), ['ACQUIRE k WAIT 2000', 'ACQUIRE j']);
  assert.equal(core.blocking, 1);
  core.feed('BUSY');
  assert.equal(core.blocking, 0);
});

test('RESUME: the resume lines, a PING behind them, NOSESSION falls back to a new grace session', () => {
  const { core } = setup({ name: 'w1' });
  const gen = core.handshake(true);
  assert.deepEqual(gen.next().value, ['HELLO w1', 'EVENTS ON', 'RESUME cid sec']);
  assert.deepEqual(gen.next(['OK other lockbroker/1.2.0', 'OK', 'OK 2 a b']).value, ['PING']);
  assert.deepEqual(gen.next(['OK PONG']), { done: true, value: true });
  assert.deepEqual([...core.listed].sort(), ['a', 'b']);
  assert.equal(core.clientId, 'cid'); // the resumed session's, not the new connection's

  const { core: c2 } = setup();
  const g2 = c2.handshake(true);
  g2.next();
  assert.deepEqual(g2.next(['OK n lockbroker/1.2.0', 'OK', 'ERR NOSESSION expired']).value, ['HELLO GRACE 30000']);
  assert.deepEqual(g2.next(['OK n lockbroker/1.2.0 s2']), { done: true, value: false });
  assert.deepEqual([c2.clientId, c2.secret], ['n', 's2']);
  assert.ok(c2.resumeError instanceof E.NoSessionError);

  const { core: c3 } = setup();
  const g3 = c3.handshake(true);
  g3.next();
  assert.throws(() => g3.next(['OK n lockbroker/1.2.0', 'OK', 'ERR UNAVAILABLE try again']), E.UnavailableError);

  const { core: c4 } = setup({ graceMs: 0 });
  assert.deepEqual(c4.handshake(true).next().value, ['HELLO', 'EVENTS ON']); // no grace: nothing to resume
});

// Runs a RESUME handshake that lists keys, the given events coming after
// its OK, and reconciles.
function resume(core, listed, events = []) {
  const gen = core.handshake(true);
  gen.next();
  gen.next(['OK x lockbroker/1.2.0', 'OK', `OK ${listed.length} ${listed.join(' ')}`.trim()]);
  for (const ev of events) core.feed(ev);
  assert.equal(gen.next(['OK PONG']).value, true);
  core.reconcile(true);
}

test('after a RESUME: an unlisted hold is lost, a listed key nobody knew is released, in-flight requests replayed', async () => {
  const { core } = setup();
  const kept = await grant(core, 'kept', 1);
  const gone = await grant(core, 'gone', 2);
  const inflight = acquire(core, 'new'); // its OK was lost with the connection
  const renew = new HoldRequest('RENEW kept', kept, new Outcome());
  core.submit(renew);
  const held = new Request('HELD', new Outcome(), P.parseList);
  core.submit(held);
  written(core);
  core.connectionLost();
  const meanwhile = new Request('PING', new Outcome());
  core.submit(meanwhile); // a caller asked while the connection was down
  resume(core, ['kept', 'new']);
  assert.deepEqual(written(core), ['RELEASE new', `ACQUIRE new WAIT ${P.MAX_MS} ASYNC`, 'RENEW kept', 'HELD', 'PING']);
  assert.ok(gone.lostError instanceof E.LockLostError);
  assert.equal(kept.lost, false);
  assert.equal(inflight.state, 'sent');
});

test('after a RESUME: queued waits stay queued (EVENT QUEUED), one whose OK QUEUED was lost too, others are issued again', async () => {
  const { core, driver } = setup();
  const q = acquire(core, 'q', { deadline: driver.now() + 9000 });
  const lostReply = acquire(core, 'r', { deadline: driver.now() + 9000 });
  const gone = acquire(core, 'g', { deadline: driver.now() + 9000 });
  written(core);
  core.feed('OK QUEUED');
  core.feed('OK QUEUED');
  core.connectionLost(); // r's OK QUEUED never came
  driver.t += 2000;
  resume(core, [], ['EVENT QUEUED q', 'EVENT QUEUED r']);
  assert.deepEqual(written(core), ['ACQUIRE g WAIT 7000 ASYNC']); // g: what is left
  assert.deepEqual([q.state, lostReply.state], ['queued', 'queued']);
  core.feed('EVENT GRANTED r 5');
  assert.equal((await lostReply.out.promise).token, 5);
  assert.equal(gone.state, 'sent');
});

test('after a RESUME: a grant that comes with it is kept; a queued wait nobody wants is cancelled', async () => {
  const { core } = setup();
  const w = acquire(core, 'w');
  const c = acquire(core, 'c');
  written(core);
  core.feed('OK QUEUED');
  core.feed('OK QUEUED');
  core.connectionLost();
  c.cancel(core, new E.WaitCancelledError()); // aborted while disconnected
  resume(core, [], ['EVENT GRANTED w 8', 'EVENT QUEUED c']);
  assert.equal((await w.out.promise).token, 8);
  assert.ok(core.holds.has('w'));
  assert.equal(core.holds.get('w').lost, false);
  assert.deepEqual(written(core), ['CANCEL c']);
});

test('a new session: every hold lost (SessionLostError), waits issued again, watches set again', async () => {
  const { core, driver } = setup();
  const h = await grant(core, 'h', 1);
  const w = acquire(core, 'w');
  const watch = new WatchState('k');
  core.watches.set('k', watch);
  written(core);
  core.feed('OK QUEUED');
  const rel = new Outcome();
  core.release(h, null, rel);
  written(core);
  core.connectionLost();
  const gen = core.handshake(true);
  gen.next();
  gen.next(['OK n lockbroker/1.2.0', 'OK', 'ERR NOSESSION expired']);
  gen.next(['OK n lockbroker/1.2.0 s2']);
  core.reconcile(false);
  await rel.promise; // the old session's end freed it
  assert.equal(h.lost, false); // it was being released: not lost
  assert.deepEqual(written(core), [`ACQUIRE w WAIT ${P.MAX_MS} ASYNC`, 'WATCH k']);
  assert.equal(w.state, 'sent');
  core.feed('OK QUEUED');
  core.feed('OK');
  driver.runDeferred();
  const h2 = await grant(core, 'x', 3);
  assert.equal(h2.session, 1);
});

test('a hold lost by a new session reports SessionLostError with why', async () => {
  const { core } = setup();
  const h = await grant(core, 'h', 1);
  core.connectionLost();
  const gen = core.handshake(true);
  gen.next();
  gen.next(['OK n lockbroker/1.2.0', 'OK', 'ERR NOSESSION expired']);
  gen.next(['OK n lockbroker/1.2.0 s2']);
  core.reconcile(false);
  assert.ok(h.lostError instanceof E.SessionLostError);
  assert.equal(h.lostError.message, 'h: the lock was lost (token 1): the session could not be resumed (expired)');
  assert.deepEqual([h.lostError.key, h.lostError.token], ['h', 1]);
});

test('the retry budget runs out: requests fail, holds are lost, waits end; closing ends the local queue too', async () => {
  const { core } = setup();
  const h = await grant(core, 'h', 1);
  const behind = acquire(core, 'h');
  const w = acquire(core, 'w');
  const ping = new Request('PING', new Outcome());
  core.submit(ping);
  written(core);
  core.connectionLost();
  core.failAll(new E.ConnectError('nobody answers'));
  await assert.rejects(ping.out.promise, E.ConnectError);
  await assert.rejects(w.out.promise, E.ConnectError);
  assert.ok(h.lostError instanceof E.SessionLostError);
  // the lost hold let the local waiter in: it is queued for the next connection
  assert.equal(behind.state, 'new');
  core.shutdown(new E.UsageError('closed'));
  await assert.rejects(behind.out.promise, E.UsageError);
  assert.equal(core.local.size, 0);
});

test('watch events go to the watch of their key', () => {
  const { core, driver } = setup();
  const w = new WatchState('k');
  const seen = [];
  w.listeners.add((s) => seen.push(s.kind));
  core.watches.set('k', w);
  core.submit(new Watch('k', new Outcome()));
  written(core);
  core.feed('OK');
  core.feed('EVENT HOLDER k SHARED 2');
  core.feed('EVENT HOLDER other SHARED 2');
  core.feed('EVENT FREE k');
  driver.runDeferred();
  assert.deepEqual(seen, ['shared', 'free']);
  assert.equal(w.state.kind, 'free');
});

test('a release whose reply was lost: released again if the RESUME lists the key, else done', async () => {
  const { core } = setup();
  const a = await grant(core, 'a', 1);
  const b = await grant(core, 'b', 2);
  const ra = new Outcome();
  const rb = new Outcome();
  core.release(a, null, ra);
  core.release(b, null, rb);
  written(core);
  core.connectionLost();
  resume(core, ['a']);
  assert.deepEqual(written(core), ['RELEASE a']);
  await rb.promise;
  assert.equal(b.lost, false); // released, not lost
  core.feed('OK 0');
  await ra.promise;
});

test('Release always goes out, even when its caller gave up', () => {
  const { core } = setup();
  const out = new Outcome();
  out.reject(new Error('gave up'));
  core.submit(new Release({ key: 'k' }, null, out));
  assert.deepEqual(written(core), ['RELEASE k']);
});
