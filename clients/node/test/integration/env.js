'use strict';
// What the integration tests share: the conformance helper (one process
// per test file, reset before each test: a fresh Redis, fresh brokers, a
// new key prefix) and clients that are closed after each test.

const { after, afterEach } = require('node:test');
const assert = require('node:assert/strict');
const lb = require('../..');
const { Servers } = require('../servers');

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// Polls pred every 10 ms; fails after timeout ms, saying what it waited for.
async function waitFor(pred, timeout, what) {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) assert.fail(`timed out after ${timeout} ms waiting for ${what}`);
    await sleep(10);
  }
}

class Env {
  constructor() {
    this.servers = new Servers();
    this.clients = [];
    afterEach(() => this.closeClients());
    after(() => this.servers.close());
  }

  async closeClients() {
    const clients = this.clients.splice(0);
    await Promise.all(clients.map((c) => c.close().catch(() => {})));
  }

  // A fresh Redis and the brokers of the given broker step lines.
  async fresh(lines = ['broker b1']) {
    await this.closeClients();
    await this.servers.reset();
    for (const line of lines) {
      await this.servers.step(line);
      await this.servers.allowOld(line.split(' ')[1]);
    }
  }

  step(line) { return this.servers.step(line); }

  async addrs(names = ['b1'], tls = false) {
    const out = [];
    for (const n of names) out.push(await this.servers.address(n, tls));
    return out;
  }

  // A connected client of the named brokers (grace 10 s unless told),
  // closed after the test.
  async client(names = ['b1'], options = {}) {
    const o = { grace: 10000, ...options };
    const c = await lb.Client.connect(await this.addrs(names, !!o.tls), o);
    this.clients.push(c);
    return c;
  }

  // Fails at once, saying why, on a broker without protocol 1.2 (the test
  // is expected to fail until it lands: never faked here).
  async needs12() {
    if (!await this.servers.speaks12('b1')) {
      const { version } = await this.servers.broker('b1');
      assert.fail(`needs protocol 1.2: the broker speaks ${version}`);
    }
  }
}

// Kinds of connection events a client reported.
function recordEvents(client) {
  const kinds = [];
  client.on('connection', (ev) => kinds.push(ev.kind));
  return kinds;
}

module.exports = { Env, sleep, waitFor, recordEvents };
