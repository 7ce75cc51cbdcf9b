'use strict';
// The Client (its sockets, timers, AbortSignals, holds and watches)
// against a scripted in-process server: each connection plays a script
// (expect this line, send these). It speaks only the lines a test scripts,
// so it plays what a real broker does only in a corner (an EVENT QUEUED
// after RESUME, a broker too old, one that refuses VALUE or WATCH after a
// failover); the integration tests cover the flows against real brokers.

const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('net');
const lb = require('../..');

delete process.env.LOCKBROKER_ALLOW_OLD;

const CID = '3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10';
const SECRET = '9f0c3e1a7b2d4c5e8f6a1b3c5d7e9f01';

// One connection seen from the server's side.
class Peer {
  constructor(socket) {
    this.socket = socket;
    this.lines = [];
    this.waiter = null;
    this.closed = false;
    let buf = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk) => {
      buf += chunk;
      const parts = buf.split('\n');
      buf = parts.pop();
      this.lines.push(...parts);
      this.wake();
    });
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    socket.on('error', () => {});
  }

  wake() {
    const w = this.waiter;
    this.waiter = null;
    if (w) w();
  }

  async line(timeout = 5000) {
    const end = Date.now() + timeout;
    while (!this.lines.length) {
      if (this.closed) throw new Error('the client closed the connection');
      if (Date.now() > end) throw new Error('no line from the client');
      await new Promise((resolve) => {
        this.waiter = resolve;
        setTimeout(resolve, 50);
      });
    }
    return this.lines.shift();
  }

  async expect(pattern, timeout) {
    const line = await this.line(timeout);
    const m = new RegExp(`^(?:${pattern})$`).exec(line);
    if (!m) throw new Error(`expected /${pattern}/, got ${JSON.stringify(line)}`);
    return m;
  }

  send(...lines) {
    this.socket.write(lines.map((l) => `${l}\r\n`).join(''));
  }

  // The library's handshake: HELLO [GRACE], EVENTS ON (and RESUME).
  async hello(version = '1.2.0', resume = null) {
    const m = await this.expect('HELLO( GRACE \\d+)?');
    this.send(`OK ${CID} lockbroker/${version}${m[1] ? ` ${SECRET}` : ''}`);
    await this.expect('EVENTS ON');
    this.send('OK');
    if (resume !== null) {
      await this.expect(`RESUME ${CID} ${SECRET}`);
      this.send(resume);
    }
  }

  // Answers PINGs until the client quits.
  async quit() {
    for (;;) {
      const line = await this.line();
      if (line === 'QUIT') break;
      if (line !== 'PING') throw new Error(`expected QUIT, got ${line}`);
      this.send('OK PONG');
    }
    this.send('OK');
  }

  async closedByClient(timeout = 5000) {
    const end = Date.now() + timeout;
    while (!this.closed && Date.now() < end) await new Promise((r) => { setTimeout(r, 20); });
    if (!this.closed) throw new Error('the client kept the connection');
  }
}

// A server on 127.0.0.1 playing one script per accepted connection, in
// order; check() waits for them and throws the first failure.
function scripted(...scripts) {
  const server = net.createServer();
  const runs = [];
  let n = 0;
  server.on('connection', (socket) => {
    const script = scripts[n++];
    const peer = new Peer(socket);
    runs.push((async () => {
      try {
        if (!script) throw new Error('a connection no script was written for');
        await script(peer);
      } finally {
        socket.end();
      }
    })());
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve({
        addr: `127.0.0.1:${server.address().port}`,
        async check() {
          server.close();
          await Promise.all(runs);
          assert.equal(n, scripts.length, 'connections made');
        },
      });
    });
  });
}

test('a broker older than 1.2 is refused at connect', async () => {
  const s = await scripted(async (p) => {
    await p.hello('1.1.0');
    await p.closedByClient();
  });
  await assert.rejects(lb.Client.connect(s.addr), (e) => e instanceof lb.VersionError && /1\.1\.0/.test(e.message));
  await s.check();
});

test('an ASYNC wait leaves the session free, and its AbortSignal sends CANCEL', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    await p.expect('ACQUIRE k WAIT 10000 ASYNC');
    p.send('OK QUEUED');
    await p.expect('PING');
    p.send('OK PONG');
    await p.expect('CANCEL k');
    p.send('OK 1');
    await p.quit();
  });
  const c = await lb.Client.connect(s.addr);
  const ac = new AbortController();
  const waiting = c.lock('k', { wait: 10000, signal: ac.signal });
  await c.ping(); // answered while the wait is queued
  ac.abort(new Error('shutting down'));
  await assert.rejects(waiting, (e) => e.name === 'AbortError' && e instanceof lb.WaitCancelledError
    && e.cause.message === 'shutting down');
  await c.close();
  await s.check();
});

test('100 queued waits over one client, each settled by the event naming its key', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    for (let i = 0; i < 100; i++) await p.expect(`ACQUIRE q${i} WAIT \\d+ ASYNC`);
    p.send(...Array.from({ length: 100 }, () => 'OK QUEUED'));
    await p.expect('CANCEL q50');
    p.send('OK 1');
    const events = [];
    for (let i = 99; i >= 0; i--) if (i !== 50) events.push(`EVENT GRANTED q${i} ${1000 + i}`);
    p.send(...events);
    await p.quit();
  });
  const c = await lb.Client.connect(s.addr);
  const acs = Array.from({ length: 100 }, () => new AbortController());
  const waits = acs.map((ac, i) => c.lock(`q${i}`, { wait: 30000, signal: ac.signal }));
  await new Promise((r) => { setTimeout(r, 100); });
  acs[50].abort();
  const results = await Promise.allSettled(waits);
  results.forEach((r, i) => {
    if (i === 50) assert.equal(r.reason.name, 'AbortError');
    else assert.equal(r.value.token, 1000 + i);
  });
  await c.close();
  await s.check();
});

test('EVENT LOST aborts its hold\'s signal only; the lost hold\'s release sends nothing', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    await p.expect('ACQUIRE b ASYNC');
    p.send('OK 7');
    await p.expect('ACQUIRE a ASYNC');
    p.send('OK 8');
    await p.expect('HELD');
    p.send('EVENT LOST a 8', 'OK 1 b');
    await p.expect('RELEASE b');
    p.send('OK 0');
    await p.quit();
  });
  const c = await lb.Client.connect(s.addr);
  const b = await c.lock('b', { wait: 0 });
  const told = [];
  const a = await c.lock('a', { wait: 0, onLost: (e) => told.push(e) });
  const lostEvents = [];
  c.on('lost', (hold, err) => lostEvents.push([hold.key, err]));
  const signalA = a.signal;
  assert.deepEqual(await c.held(), ['b']);
  await new Promise((r) => { setImmediate(r); });
  assert.ok(signalA.aborted);
  assert.ok(signalA.reason instanceof lb.LockLostError);
  assert.equal(b.signal.aborted, false);
  assert.equal(told.length, 1);
  assert.deepEqual(lostEvents.map(([k]) => k), ['a']);
  await assert.rejects(a.release(), lb.LockLostError);
  await b.release();
  await c.close();
  await s.check();
});

test('withLock: runs the callback under the hold, releases after; a second take inside it is a UsageError', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    await p.expect('ACQUIRE k ASYNC');
    p.send('OK 3');
    await p.expect('ACQUIRE other ASYNC');
    p.send('OK 4');
    await p.expect('RELEASE other');
    p.send('OK 0');
    await p.expect('RELEASE k');
    p.send('OK 0');
    await p.quit();
  });
  const c = await lb.Client.connect(s.addr);
  const result = await c.withLock('k', { wait: 0 }, async (hold) => {
    assert.equal(hold.token, 3);
    await assert.rejects(c.lock('k', { wait: 1000 }), lb.UsageError);
    await assert.rejects(c.withLock('k', () => {}), lb.UsageError);
    await c.withLock('other', { wait: 0 }, async () => {
      await assert.rejects(c.lock('k'), lb.UsageError); // inherited
    });
    return 'done';
  });
  assert.equal(result, 'done');
  await c.close();
  await s.check();
});

test('a silent broker: the idle PING misses its deadline, the session is resumed on the next broker, its wait goes on', async () => {
  const second = await scripted(async (p) => {
    await p.hello('1.2.0', 'OK 0');
    p.send('EVENT QUEUED k');
    await p.expect('PING');
    p.send('OK PONG');
    await new Promise((r) => { setTimeout(r, 100); });
    p.send('EVENT GRANTED k 42');
    await p.expect('RELEASE k');
    p.send('OK 0');
    await p.quit();
  });
  const first = await scripted(async (p) => {
    await p.hello();
    await p.expect('ACQUIRE k WAIT \\d+ ASYNC');
    p.send('OK QUEUED');
    await p.expect('PING', 3000); // then nothing: a paused broker
    await p.closedByClient();
  });
  const events = [];
  const c = await lb.Client.connect([first.addr, second.addr], { pingInterval: 200, pingTimeout: 200 });
  c.on('connection', (ev) => events.push(ev.kind));
  const t0 = Date.now();
  const hold = await c.lock('k', { wait: 8000 });
  assert.equal(hold.token, 42);
  assert.ok(Date.now() - t0 < 3000);
  assert.deepEqual(events, ['disconnected', 'resumed']);
  assert.equal(c.broker, second.addr);
  assert.equal(c.clientId, CID);
  await hold.release();
  await c.close();
  await first.check();
  await second.check();
});

test('a reply still arriving is no silence: the PING waits behind it, each chunk counts', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    await p.expect('HELD');
    await p.expect('PING', 1000); // 100 ms without a byte
    const reply = 'OK 3 orders:1 orders:2 orders:3\r\n';
    for (let i = 0; i < reply.length; i += 2) { // a piece every 50 ms: over twice pingTimeout
      p.socket.write(reply.slice(i, i + 2));
      await new Promise((r) => { setTimeout(r, 50); });
    }
    p.send('OK PONG');
    await p.quit();
  });
  const events = [];
  const c = await lb.Client.connect(s.addr, { pingInterval: 100, pingTimeout: 400 });
  c.on('connection', (ev) => events.push(ev.kind));
  const held = await c.held();
  await c.close();
  await s.check();
  assert.deepEqual(held, ['orders:1', 'orders:2', 'orders:3']);
  assert.deepEqual(events, []);
});

test("an old broker's blocking wait (tests only) is no silence: the PING's deadline waits for it", async () => {
  const s = await scripted(async (p) => {
    await p.hello('1.1.0');
    while ((await p.expect('PING|ACQUIRE k WAIT \\d+'))[0] === 'PING') p.send('OK PONG'); // an idle PING may come first
    await new Promise((r) => { setTimeout(r, 800); }); // every reply held back meanwhile
    p.send('OK 5');
    await p.quit();
  });
  const events = [];
  process.env.LOCKBROKER_ALLOW_OLD = '1';
  let c;
  try {
    c = await lb.Client.connect(s.addr, { pingInterval: 100, pingTimeout: 200 });
  } finally {
    delete process.env.LOCKBROKER_ALLOW_OLD;
  }
  c.on('connection', (ev) => events.push(ev.kind));
  const hold = await c.lock('k', { wait: 3000 });
  await c.close();
  await s.check();
  assert.equal(hold.token, 5);
  assert.deepEqual(events, []);
});

test('an event loop kept busy past pingTimeout is not a silent broker: what came meanwhile is read first', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    await p.expect('PING', 1000);
    p.send('OK PONG');
    const end = Date.now() + 600; // the app hogs the loop: the PONG waits in the socket
    while (Date.now() < end);
    await p.quit();
  });
  const events = [];
  const c = await lb.Client.connect(s.addr, { pingInterval: 100, pingTimeout: 200 });
  c.on('connection', (ev) => events.push(ev.kind));
  await new Promise((r) => { setTimeout(r, 400); });
  await c.close();
  await s.check();
  assert.deepEqual(events, []);
});

test('a hold the RESUME does not list is lost; a new session when the grace ran out', async () => {
  const third = await scripted(async (p) => {
    await p.hello('1.2.0', 'ERR NOSESSION expired');
    await p.expect('HELLO GRACE 5000');
    p.send(`OK ${CID} lockbroker/1.2.0 ${SECRET}`);
    await p.quit();
  });
  const second = await scripted(async (p) => {
    await p.hello('1.2.0', 'OK 1 a');
    await p.expect('PING');
    p.send('OK PONG');
    p.socket.destroy(); // and this one breaks too
  });
  const first = await scripted(async (p) => {
    await p.hello();
    await p.expect('ACQUIRE a ASYNC');
    p.send('OK 1');
    await p.expect('ACQUIRE b ASYNC');
    p.send('OK 2');
    p.socket.destroy();
  });
  const events = [];
  const c = await lb.Client.connect([first.addr, second.addr, third.addr], {
    onEvent: (ev) => events.push(ev.kind),
  });
  const a = await c.lock('a', { wait: 0 });
  const b = await c.lock('b', { wait: 0 });
  await new Promise((resolve) => { b.signal.addEventListener('abort', resolve); });
  assert.match(b.lostError.message, /not kept by the RESUME/);
  await new Promise((resolve) => { a.signal.addEventListener('abort', resolve); });
  assert.ok(a.lostError instanceof lb.SessionLostError);
  while (events.length < 5) await new Promise((r) => { setTimeout(r, 10); });
  assert.deepEqual(events, ['connected', 'disconnected', 'resumed', 'disconnected', 'new_session']);
  await c.close();
  await first.check();
  await second.check();
  await third.check();
});

test('a wait whose broker never answers ends at the deadline plus a margin, and is cancelled', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    await p.expect('ACQUIRE k WAIT 300 ASYNC');
    p.send('OK QUEUED'); // and no TIMEOUT ever
    await p.expect('CANCEL k', 5000);
    p.send('OK 1');
    await p.quit();
  });
  const c = await lb.Client.connect(s.addr, { pingTimeout: 200 });
  const t0 = Date.now();
  await assert.rejects(c.lock('k', { wait: 300 }), lb.LockTimeoutError);
  const took = Date.now() - t0;
  assert.ok(took >= 1250 && took < 3000, `took ${took} ms`);
  await c.close();
  await s.check();
});

test('a watch: its state at once, each change by event, async iteration, UNWATCH when closed', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    await p.expect('WATCH svc');
    p.send('OK', 'EVENT FREE svc');
    await new Promise((r) => { setTimeout(r, 50); });
    p.send(`EVENT HOLDER svc ${CID} 5 10.0.0.1:80`, 'EVENT HOLDER svc SHARED 2', 'EVENT FREE svc');
    await p.expect('UNWATCH svc');
    p.send('OK 1');
    await p.quit();
  });
  const c = await lb.Client.connect(s.addr);
  const w = await c.watch('svc');
  const first = await w.wait();
  assert.equal(first.kind, 'free');
  const seen = [];
  for await (const state of w) {
    seen.push(state.kind);
    if (state.kind === 'exclusive') assert.equal(state.value, '10.0.0.1:80');
    if (seen.length === 4) break;
  }
  assert.deepEqual(seen, ['free', 'exclusive', 'shared', 'free']);
  assert.equal(w.leader, null);
  await w.close();
  await c.close();
  await s.check();
});

test('Hold and Client dispose with Symbol.asyncDispose', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    await p.expect('ACQUIRE k ASYNC');
    p.send('OK 3');
    await p.expect('RELEASE k');
    p.send('OK 0');
    await p.quit();
  });
  const dispose = Symbol.asyncDispose || Symbol.for('nodejs.asyncDispose');
  const c = await lb.Client.connect(s.addr);
  const hold = await c.lock('k', { wait: 0 });
  await hold[dispose]();
  assert.ok(hold.released);
  await hold[dispose](); // once
  await c[dispose]();
  await assert.rejects(c.lock('k'), lb.UsageError);
  await s.check();
});

// A broker without ACQUIRE ... VALUE and WATCH (protocol 1.2 part 1's first
// half): each refusal is answered once; a library that asked again would
// meet the QUIT expectation instead.
test('a broker that refuses VALUE and WATCH: elect() and watch() reject with its refusal, once', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    await p.expect('ACQUIRE svc:leader VALUE 10\\.0\\.0\\.7:80 WAIT \\d+ ASYNC');
    p.send('ERR BADARG VALUE is not supported by this broker yet');
    await p.expect('WATCH svc:leader');
    p.send('ERR BADCMD unknown command');
    await p.quit();
  });
  const c = await lb.Client.connect(s.addr);
  const t0 = Date.now();
  await assert.rejects(c.elect('svc:leader', '10.0.0.7:80'), {
    name: 'BadArgumentError', message: 'svc:leader: bad argument (VALUE is not supported by this broker yet)',
  });
  assert.ok(Date.now() - t0 < 2000, 'not asked again');
  await assert.rejects(c.watch('svc:leader'), {
    name: 'BadCommandError',
    message: 'svc:leader: the broker does not know WATCH (unknown command)',
    request: 'WATCH svc:leader',
    reply: 'ERR BADCMD unknown command',
  });
  await c.close();
  await s.check();
});

test('a watch refused after a new session (a broker without WATCH) ends loudly: error event, wait and iteration reject', async () => {
  const s = await scripted(async (p) => {
    await p.hello();
    await p.expect('WATCH k');
    p.send('OK', 'EVENT FREE k'); // then the connection breaks
  }, async (p) => {
    await p.hello('1.2.0', 'ERR NOSESSION expired');
    await p.expect('HELLO GRACE \\d+');
    p.send(`OK ${CID} lockbroker/1.2.0 ${SECRET}`);
    await p.expect('WATCH k');
    p.send('ERR BADCMD unknown command');
    await p.quit(); // never WATCH again
  });
  const c = await lb.Client.connect(s.addr, { pingInterval: 200, pingTimeout: 200 });
  const w = await c.watch('k');
  const told = [];
  w.on('error', (err) => told.push(err));
  const seen = [];
  const iterated = (async () => { for await (const st of w) seen.push(st.kind); })();
  await assert.rejects(w.wait((st) => st.kind !== 'free', { timeout: 5000 }), lb.BadCommandError);
  await assert.rejects(iterated, lb.BadCommandError);
  assert.deepEqual(seen, ['free']);
  assert.ok(w.error instanceof lb.BadCommandError);
  assert.deepEqual(told, [w.error]);
  await w.close();
  await c.close();
  await s.check();
});
