'use strict';
// The protocol 1.2 part 1 words through the library against real brokers:
// VALUE, OWNER ... VALUE, PROCLAIM, CHECK, WATCH, leader election, 100
// ASYNC waits over one client with one aborted, a queued wait and a watch
// across a RESUME. Each test fails at once, saying so, against a broker
// without protocol 1.2 (never faked here).

const test = require('node:test');
const assert = require('node:assert/strict');
const lb = require('../..');
const { Env, sleep, waitFor, recordEvents } = require('./env');

const env = new Env();

async function fresh12(lines = ['broker b1', 'broker b2']) {
  await env.fresh(lines);
  await env.needs12();
}

test('VALUE, OWNER ... VALUE from another broker, CHECK, PROCLAIM', async () => {
  await fresh12();
  const c = await env.client(['b1']);
  const other = await env.client(['b2']);
  const hold = await c.lock('svc:primary', { value: '10.0.0.7:8080' });
  const s = await other.owner('svc:primary');
  assert.deepEqual([s.kind, s.token, s.value, s.clientId], ['exclusive', hold.token, '10.0.0.7:8080', c.clientId]);
  assert.deepEqual({ ...await other.check('svc:primary', hold.token) }, { current: true, token: hold.token });
  await hold.proclaim('10.0.0.7:9090');
  assert.equal(hold.value, '10.0.0.7:9090');
  assert.equal((await other.owner('svc:primary')).value, '10.0.0.7:9090');
  await hold.release();
  assert.equal((await other.owner('svc:primary')).kind, 'free');
  assert.deepEqual({ ...await other.check('svc:primary', hold.token) }, { current: false, token: null });
  const h2 = await other.lock('svc:primary');
  assert.deepEqual({ ...await c.check('svc:primary', hold.token) }, { current: false, token: h2.token });
  assert.equal((await c.owner('svc:primary')).value, null);
});

test('WATCH: the state at once, then each change whichever broker made it', async () => {
  await fresh12();
  const c = await env.client(['b1']);
  const other = await env.client(['b2']);
  const w = await other.watch('jobs:k');
  assert.equal((await w.wait(undefined, { timeout: 3000 })).kind, 'free');
  const hold = await c.lock('jobs:k', { value: 'host-a' });
  const s = await w.wait((x) => x.kind === 'exclusive', { timeout: 3000 });
  assert.deepEqual([s.token, s.value], [hold.token, 'host-a']);
  await hold.release();
  await w.wait((x) => x.kind === 'free', { timeout: 3000 });
  await c.lock('jobs:k', { shared: true });
  await other.lock('jobs:k', { shared: true });
  assert.equal((await w.wait((x) => x.holders === 2, { timeout: 3000 })).kind, 'shared');
  await w.close();
});

test('leader election as the README shows it: campaign with a value, observe with for await, resign', async () => {
  await fresh12();
  const a = await env.client(['b1']);
  const b = await env.client(['b2']);
  const follower = await env.client(['b1']);
  const w = await follower.watch('svc:leader');
  const leaders = [];
  const observed = (async () => {
    for await (const state of w) {
      leaders.push(w.leader);
      if (w.leader === '10.0.0.8:80') return;
    }
  })();
  await waitFor(() => leaders.length, 3000, 'the first state');
  const leadership = await a.elect('svc:leader', '10.0.0.7:80');
  let bLeads = false;
  const next = b.elect('svc:leader', '10.0.0.8:80').then((h) => { bLeads = true; return h; });
  await sleep(300);
  assert.equal(bLeads, false); // one leader at a time
  assert.equal(leadership.signal.aborted, false);
  await leadership.release(); // resign: b leads
  const second = await next;
  assert.ok(second.token > leadership.token);
  await observed;
  assert.equal(leaders[0], null);
  assert.deepEqual(leaders.filter(Boolean), ['10.0.0.7:80', '10.0.0.8:80']);
  // a leadership lost aborts its signal
  await second.release();
  const third = await a.elect('svc:leader', '10.0.0.7:80', { ttl: 600 });
  await env.step('redis del svc:leader');
  await waitFor(() => third.signal.aborted, 3000, 'the leadership signal');
  assert.ok(third.signal.reason instanceof lb.LockLostError);
  await w.close();
});

test('100 concurrent waits on different keys over one client, one aborted midway', async () => {
  await fresh12(['broker b1']);
  const holder = await env.client();
  const c = await env.client();
  const holds = await Promise.all(Array.from({ length: 100 }, (_, i) => holder.lock(`q${i}`)));
  const acs = Array.from({ length: 100 }, () => new AbortController());
  const waits = acs.map((ac, i) => c.lock(`q${i}`, { wait: 30000, signal: ac.signal }));
  waits.forEach((p) => p.catch(() => {}));
  await sleep(300);
  const t0 = Date.now();
  acs[50].abort();
  await assert.rejects(waits[50], { name: 'AbortError' });
  await c.ping(); // the session was never held up by the waits
  assert.ok(Date.now() - t0 < 2000);
  await Promise.all(holds.map((h) => h.release()));
  const got = await Promise.all(waits.filter((_, i) => i !== 50));
  assert.equal(got.length, 99);
  assert.ok(!(await c.held()).includes('q50'));
  await (await (await env.client()).lock('q50', { wait: 0 })).release();
});

test('a queued wait and a watch survive a kill -9 of their broker (RESUME on the second)', async () => {
  await fresh12();
  const c = await env.client(['b1', 'b2']);
  const events = recordEvents(c);
  const other = await env.client(['b2']);
  const hold = await other.lock('k');
  const w = await c.watch('k');
  const waiting = c.lock('k', { wait: 9000 });
  await sleep(300);
  await env.step('kill b1');
  await waitFor(() => events.includes('resumed'), 8000, 'the resume');
  await hold.release();
  const got = await waiting;
  const s = await w.wait((x) => x.token === got.token, { timeout: 3000 });
  assert.equal(s.kind, 'exclusive');
  await got.release();
  await w.wait((x) => x.kind === 'free', { timeout: 3000 });
});

test('an aborted wait on a 1.2 broker is withdrawn at once (CANCEL), not at its deadline', async () => {
  await fresh12(['broker b1']);
  const holder = await env.client();
  const c = await env.client();
  const hold = await holder.lock('k');
  const ac = new AbortController();
  setTimeout(() => ac.abort(), 300);
  const waiting = c.lock('k', { wait: 20000, signal: ac.signal });
  await assert.rejects(waiting, { name: 'AbortError' });
  const stats = await c.stats();
  assert.equal(stats.waiters, '0'); // the broker keeps no wait for it
  await hold.release();
  await sleep(200);
  assert.deepEqual(await c.held(), []);
});

test('a wait whose signal times out (AbortSignal.timeout) rejects with LockTimeoutError, withdrawn at once', async () => {
  await fresh12(['broker b1']);
  const holder = await env.client();
  const c = await env.client();
  const hold = await holder.lock('k');
  const t0 = Date.now();
  const err = await c.lock('k', { wait: 20000, signal: AbortSignal.timeout(300) }).catch((e) => e);
  assert.ok(Date.now() - t0 < 2000);
  assert.ok(err instanceof lb.LockTimeoutError, `${err && err.name}: ${err && err.message}`);
  assert.equal(err.code, 'TIMEOUT');
  assert.equal(err.message, 'k: not granted before the signal timed out');
  assert.equal(err.cause.name, 'TimeoutError');
  assert.match(err.request, /^ACQUIRE k WAIT \d+ ASYNC$/);
  assert.equal((await c.stats()).waiters, '0'); // withdrawn (CANCEL)
  // already timed out when called: the same, nothing sent
  const late = AbortSignal.timeout(1);
  await sleep(20);
  await assert.rejects(c.lock('k', { signal: late }), lb.LockTimeoutError);
  await hold.release();
  await (await c.lock('k', { wait: 2000 })).release();
});
