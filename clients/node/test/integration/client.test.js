'use strict';
// The Client against real brokers and a real Redis (started by the
// conformance helper): take/renew/release, callers of one process on one
// key, waits and deadlines, shared and limit, lost holds with requests in
// flight, kill -9 and RESUME on a second broker, TLS, AUTH and access
// lists, the version check.

const test = require('node:test');
const assert = require('node:assert/strict');
const { setTimeout: delay } = require('timers/promises');
const lb = require('../..');
const { Env, sleep, waitFor, recordEvents } = require('./env');

const env = new Env();

test('held past its TTL (the broker renews it), renewed by hand, released', async () => {
  await env.fresh();
  const c = await env.client();
  const other = await env.client();
  const hold = await c.lock('orders:42', { ttl: 500 });
  await sleep(1200); // more than twice the TTL
  assert.equal(hold.lost, false);
  await assert.rejects(other.lock('orders:42', { wait: 0 }), lb.LockBusyError);
  assert.equal(await hold.renew({ ttl: 2000 }), 2000);
  assert.equal((await c.owner('orders:42')).token, hold.token);
  await hold.release();
  const later = await other.lock('orders:42', { wait: 0 });
  assert.ok(later.token > hold.token);
});

test('withLock runs the callback under the hold and releases it; a linger keeps the key', async () => {
  await env.fresh();
  const c = await env.client();
  const other = await env.client();
  const token = await c.withLock('jobs:1', async (hold) => {
    assert.deepEqual(await c.held(), ['jobs:1']);
    return hold.token;
  });
  assert.ok(Number.isSafeInteger(token));
  assert.deepEqual(await c.held(), []);
  await (await c.lock('nightly')).release({ linger: 800 });
  await assert.rejects(other.lock('nightly', { wait: 0 }), lb.LockBusyError);
  const t0 = Date.now();
  await other.lock('nightly', { wait: 5000 });
  assert.ok(Date.now() - t0 > 400);
});

// n callers take one key rounds times each through one client: the most
// that were inside at once, and the tokens in grant order.
async function runHolders(client, n, rounds, holdMs) {
  let inside = 0;
  let most = 0;
  const tokens = [];
  await Promise.all(Array.from({ length: n }, async () => {
    for (let r = 0; r < rounds; r++) {
      await client.withLock('stock:7', { wait: 30000 }, async (hold) => {
        inside++;
        most = Math.max(most, inside);
        tokens.push(hold.token);
        await sleep(holdMs);
        inside--;
      });
    }
  }));
  return { most, tokens };
}

const increasing = (xs) => xs.every((x, i) => i === 0 || xs[i - 1] < x);

test('two callers of one client on one key never overlap', async () => {
  await env.fresh();
  const { most, tokens } = await runHolders(await env.client(), 2, 15, 2);
  assert.equal(most, 1);
  assert.equal(tokens.length, 30);
  assert.ok(increasing(tokens), 'a new grant, a greater token, each time');
});

test('50 concurrent holders in one process on one key never overlap', async () => {
  await env.fresh();
  const { most, tokens } = await runHolders(await env.client(), 50, 1, 2);
  assert.equal(most, 1);
  assert.equal(tokens.length, 50);
  assert.ok(increasing(tokens));
});

test('a second take inside withLock of the same key is a UsageError', async () => {
  await env.fresh();
  const c = await env.client();
  await c.withLock('k', async () => {
    await assert.rejects(c.lock('k', { wait: 1000 }), lb.UsageError);
  });
  await (await c.lock('k', { wait: 0 })).release(); // free again after
});

test('the wait ends at the deadline; a wait is granted on release', async () => {
  await env.fresh();
  const c = await env.client();
  const other = await env.client();
  const hold = await c.lock('k');
  let t0 = Date.now();
  await assert.rejects(other.lock('k', { wait: 400 }), lb.LockTimeoutError);
  const took = Date.now() - t0;
  assert.ok(took > 350 && took < 3000, `took ${took} ms`);
  const waiting = other.lock('k', { wait: 10000 });
  await sleep(200);
  t0 = Date.now();
  await hold.release();
  const got = await waiting;
  assert.ok(Date.now() - t0 < 2000);
  assert.ok(got.token > hold.token);
});

test('an aborted wait never holds the key', async () => {
  await env.fresh();
  const c = await env.client();
  const other = await env.client();
  const third = await env.client();
  const hold = await c.lock('k');
  const ac = new AbortController();
  const waiting = other.lock('k', { wait: 10000, signal: ac.signal });
  await sleep(200);
  ac.abort();
  await assert.rejects(waiting, { name: 'AbortError' });
  await hold.release();
  await (await third.lock('k', { wait: 3000 })).release(); // the key did come free
  await waitFor(async () => (await other.held()).length === 0, 3000, 'the waiter to hold nothing');
});

test('shared holds beside each other, then a writer; a semaphore of two', async () => {
  await env.fresh(['broker b1', 'broker b2']);
  const r1 = await env.client(['b1']);
  const r2 = await env.client(['b2']);
  const w = await env.client(['b1']);
  const h1 = await r1.lock('catalog', { shared: true });
  const h2 = await r2.lock('catalog', { shared: true });
  const s = await r1.owner('catalog');
  assert.deepEqual([s.kind, s.holders], ['shared', 2]);
  await assert.rejects(w.lock('catalog', { wait: 0 }), lb.LockBusyError);
  const writer = w.lock('catalog', { wait: 10000 });
  await h1.release();
  await h2.release();
  assert.ok((await writer).token > Math.max(h1.token, h2.token));

  const ha = await r1.lock('api:quota', { limit: 2 });
  await r2.lock('api:quota', { limit: 2 });
  await assert.rejects(w.lock('api:quota', { limit: 2, wait: 0 }), lb.LockBusyError);
  await assert.rejects(w.lock('api:quota', { limit: 3, wait: 0 }), lb.BadArgumentError);
  const third = w.lock('api:quota', { limit: 2, wait: 10000 });
  await sleep(100);
  await ha.release();
  assert.equal((await third).kind, 'semaphore');
});

test('EVENT LOST goes to the right hold while other requests are in flight', async () => {
  await env.fresh();
  const c = await env.client();
  const told = [];
  const b = await c.lock('b', { ttl: 900 }); // taken first: not the first hold by chance
  const a = await c.lock('a', { ttl: 900, onLost: (e) => told.push(e) });
  let stop = false;
  let answered = 0;
  const busy = Array.from({ length: 3 }, async () => { // requests in flight the whole time
    while (!stop) {
      await Promise.all([c.stats(), c.held()]);
      answered += 2;
    }
  });
  try {
    await env.step('redis del a');
    await waitFor(() => a.signal.aborted, 3000, 'hold a reported lost');
  } finally {
    stop = true;
    await Promise.all(busy);
  }
  assert.ok(answered > 10, `${answered} answers meanwhile`);
  await waitFor(() => told.length, 2000, 'the onLost callback');
  assert.ok(told[0] instanceof lb.LockLostError);
  assert.equal(told[0].message, `a: the lock was lost (token ${a.token})`);
  assert.ok(a.signal.reason instanceof lb.LockLostError);
  assert.equal(b.lost, false);
  await assert.rejects(a.release(), lb.LockLostError);
  await b.release();
});

test('work under a hold lost midway is aborted through the hold\'s signal', async () => {
  await env.fresh();
  const c = await env.client();
  const t0 = Date.now();
  const err = await c.withLock('x', { ttl: 600 }, async (hold) => {
    await env.step('redis overwrite x');
    await delay(10000, null, { signal: hold.signal }); // cut short
  }).catch((e) => e);
  assert.equal(err.name, 'AbortError');
  assert.ok(err.cause instanceof lb.LockLostError);
  assert.ok(Date.now() - t0 < 5000);
  // a callback that ignores the signal: withLock rejects with the loss
  await assert.rejects(c.withLock('y', { ttl: 600 }, async (hold) => {
    await env.step('redis del y');
    await waitFor(() => hold.lost, 3000, 'the loss');
  }), lb.LockLostError);
  await (await c.lock('z', { wait: 0 })).release(); // the client goes on
});

test('kill -9: the session is resumed on the second broker with its holds and tokens', async () => {
  await env.fresh(['broker b1', 'broker b2']);
  const c = await env.client(['b1', 'b2']);
  const events = recordEvents(c);
  const x = await c.lock('orders:42', { ttl: 5000 });
  const y = await c.lock('catalog', { shared: true, ttl: 5000 });
  const other = await env.client(['b2']);
  await env.step('kill b1');
  await waitFor(() => events.includes('resumed'), 8000, 'the resume');
  assert.ok(!x.lost && !y.lost);
  assert.deepEqual((await c.held()).sort(), ['catalog', 'orders:42']);
  assert.equal((await c.owner('orders:42')).token, x.token);
  assert.equal(c.broker, (await env.addrs(['b2']))[0]);
  await assert.rejects(other.lock('orders:42', { wait: 0 }), lb.LockBusyError);
  await x.release();
  assert.ok((await other.lock('orders:42', { wait: 0 })).token > x.token);
});

test('the connection hook may call the client', async () => {
  await env.fresh(['broker b1', 'broker b2']);
  const seen = [];
  const c = await env.client(['b1', 'b2'], {
    onEvent: (ev) => { if (ev.kind === 'resumed') c.held().then((keys) => seen.push(keys)); },
  });
  await c.lock('k', { ttl: 5000 });
  await env.step('kill b1');
  await waitFor(() => seen.length, 8000, 'the hook\'s HELD answer');
  assert.deepEqual(seen[0], ['k']);
});

test('without grace a restarted broker loses the holds; a new session goes on', async () => {
  await env.fresh();
  const c = await env.client(['b1'], { grace: 0 });
  const events = recordEvents(c);
  const hold = await c.lock('deploy');
  await env.step('restart b1');
  await waitFor(() => events.includes('new_session'), 8000, 'a new session');
  assert.ok(hold.lostError instanceof lb.SessionLostError);
  assert.ok((await c.lock('deploy', { wait: 0 })).token > hold.token);
});

test('the retry budget runs out: holds lost, requests fail; the client recovers', async () => {
  await env.fresh();
  const c = await env.client(['b1'], { resumeTimeout: 500 });
  const events = recordEvents(c);
  const hold = await c.lock('k', { ttl: 1000 });
  await env.step('kill b1');
  await waitFor(() => events.includes('reconnect_failed'), 5000, 'the failure');
  assert.ok(hold.lostError instanceof lb.SessionLostError);
  await assert.rejects(hold.release(), lb.SessionLostError);
  await env.step('restart b1');
  await waitFor(() => events.includes('new_session'), 8000, 'a new session');
  await (await c.lock('k', { wait: 3000 })).release();
});

test('TLS with the test CA; an unknown CA is refused', async () => {
  await env.fresh(['broker b1 tls']);
  const c = await env.client(['b1'], { tls: await env.servers.tlsOptions('b1') });
  const plain = await env.client(['b1']);
  const hold = await c.lock('secure:k');
  await assert.rejects(plain.lock('secure:k', { wait: 0 }), lb.LockBusyError);
  await hold.release();
  await assert.rejects(lb.Client.connect(await env.addrs(['b1'], true), { tls: true }),
    (e) => e instanceof lb.ConnectError && /certificate/i.test(e.message));
});

test('AUTH: a wrong or missing token at connect; ERR DENIED at once, even with a wait', async () => {
  await env.fresh(['broker b1 auth=s3cret', 'broker b2 app=billing:billing-token:billing:*,invoices:*']);
  const [a1] = await env.addrs(['b1']);
  await assert.rejects(lb.Client.connect(a1, { auth: 'wrong' }), lb.NotAuthenticatedError);
  await assert.rejects(lb.Client.connect(a1), lb.NotAuthenticatedError);
  await (await (await env.client(['b1'], { auth: 's3cret' })).lock('any')).release();
  const c = await env.client(['b2'], { auth: 'billing-token' });
  await (await c.lock('invoices:2024-06')).release();
  await assert.rejects(c.lock('reports:daily', { wait: 0 }), {
    name: 'DeniedError',
    message: "reports:daily: denied: outside this app's keys (app billing may not use this key)",
  });
  const t0 = Date.now();
  await assert.rejects(c.lock('reports:daily', { wait: 5000 }), lb.DeniedError);
  assert.ok(Date.now() - t0 < 1000);
});

test('the counters after a scripted run, and a hook call per count', async () => {
  await env.fresh(['broker b1', 'broker b2']);
  const told = [];
  const c = await env.client(['b1', 'b2'], { onCounter: (ev) => told.push(ev) });
  const events = recordEvents(c);
  const emitted = [];
  c.on('counter', (ev) => emitted.push(ev.name));
  const other = await env.client(['b2']);
  const hold = await c.lock('a'); // waits 1
  await sleep(200);
  await hold.release(); // holds 1, >= 0.2 s
  await other.lock('b');
  await assert.rejects(c.lock('b', { wait: 0 }), lb.LockBusyError); // waits 2
  await assert.rejects(c.lock('b', { wait: 300 }), lb.LockTimeoutError); // waits 3, >= 0.3 s
  const doomed = await c.lock('l', { ttl: 600 }); // waits 4
  await env.step('redis del l');
  await waitFor(() => doomed.lost, 3000, 'the loss'); // losses 1, holds 2
  const kept = await c.lock('k', { ttl: 5000 }); // waits 5
  await env.step('kill b1');
  await waitFor(() => events.includes('resumed'), 8000, 'the resume');
  await kept.release(); // holds 3
  const n = c.counters();
  assert.deepEqual([n.waits, n.holds, n.losses, n.resumes, n.reconnects], [5, 3, 1, 1, 1]);
  assert.ok(n.waitSecondsTotal >= 0.3 && n.waitSecondsTotal < 3, `${n.waitSecondsTotal}`);
  assert.ok(n.holdSecondsTotal >= 0.2, `${n.holdSecondsTotal}`);
  assert.ok(Object.isFrozen(n));
  await waitFor(() => told.length === 11, 2000, 'a hook call per count');
  assert.deepEqual(told.map((e) => e.name).sort(),
    ['holds', 'holds', 'holds', 'losses', 'reconnects', 'resumes', 'waits', 'waits', 'waits', 'waits', 'waits']);
  assert.deepEqual(told.filter((e) => e.name === 'waits').map((e) => e.key), ['a', 'b', 'b', 'l', 'k']);
  const held = told.filter((e) => e.name === 'holds').reduce((sum, e) => sum + e.seconds, 0);
  assert.ok(Math.abs(held - n.holdSecondsTotal) < 1e-9);
  assert.equal(emitted.length, 11);
});

test('errors say what happened to which key; the broker\'s reply and the request are properties', async () => {
  await env.fresh();
  const c = await env.client();
  const other = await env.client();
  const hold = await c.lock('lost:js', { ttl: 600 });
  await env.step('redis del lost:js');
  await waitFor(() => hold.lost, 3000, 'the loss');
  const e = hold.lostError;
  assert.equal(e.message, `lost:js: the lock was lost (token ${hold.token})`);
  assert.deepEqual([e.key, e.reply, e.request, e.token, e.code],
    ['lost:js', `EVENT LOST lost:js ${hold.token}`, null, hold.token, 'LOST']);
  await other.lock('busy');
  await assert.rejects(c.lock('busy', { wait: 0 }), {
    name: 'LockBusyError', message: 'busy: held by another session', reply: 'BUSY', request: 'ACQUIRE busy ASYNC',
  });
  await assert.rejects(c.lock('busy', { wait: 250 }), { name: 'LockTimeoutError', message: 'busy: not granted within 250 ms' });
  await other.lock('sem', { limit: 2 });
  await assert.rejects(c.lock('sem', { limit: 3, wait: 0 }), {
    name: 'BadArgumentError',
    message: 'sem: bad argument (the key is a semaphore with LIMIT 2)',
    key: 'sem',
    reply: 'ERR BADARG the key is a semaphore with LIMIT 2',
    request: 'ACQUIRE sem LIMIT 3 ASYNC',
  });
  assert.equal(lb.LimitError, lb.LimitExceededError);
  await c.close();
  await assert.rejects(c.lock('any'), (err) => err instanceof lb.ClosedError && err instanceof lb.UsageError
    && err.message === 'the client is closed');
});

test('a broker older than protocol 1.2 is refused unless LOCKBROKER_ALLOW_OLD=1', async () => {
  await env.fresh();
  const [addr] = await env.addrs();
  const { version } = await env.servers.broker('b1');
  const saved = process.env.LOCKBROKER_ALLOW_OLD;
  delete process.env.LOCKBROKER_ALLOW_OLD;
  try {
    if (await env.servers.speaks12('b1')) {
      await (await lb.Client.connect(addr)).close();
    } else {
      await assert.rejects(lb.Client.connect(addr), (e) => e instanceof lb.VersionError && e.message.includes(version));
    }
  } finally {
    if (saved !== undefined) process.env.LOCKBROKER_ALLOW_OLD = saved;
  }
});
