#!/usr/bin/env node
'use strict';
// conformance.js - replays the transcripts of tests/conformance/ (grammar:
// tests/conformance/README.md) through this library, against servers
// started by the shared helper (tests/conformance/servers.py).
//
//     node clients/node/test/conformance.js [name ...]
//
// Each transcript (all, or those named, with or without .txt) gets a fresh
// Redis and brokers (helper reset). Each action is an async call of its
// own (never awaited by another), so two actions are two callers to the
// library's local per-key lock; `cancel` aborts the call's AbortSignal.
// Prints PASS/FAIL/SKIP per transcript (a failure with its line and what
// happened) and "N passed, N failed, 0 skipped" (nothing is skipped: a
// broker without a word a transcript needs fails it); exits 1 if any
// failed.

const fs = require('fs');
const path = require('path');
const { performance } = require('perf_hooks');
const lb = require('..');
const { Servers, HelperError, TRANSCRIPTS } = require('./servers');

const STEP_BOUND = 10000; // ms any step may take (README)
const now = () => performance.now();
const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

class Failure extends Error {}

// Comments and blanks out, repeat expanded: [[lineNo, text], ...].
function expand(text) {
  const out = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    const m = /^repeat (\d+)\.\.(\d+) (.+)$/.exec(line);
    if (!m) {
      out.push([i + 1, line]);
      return;
    }
    for (let k = Number(m[1]); k <= Number(m[2]); k++) out.push([i + 1, m[3].replaceAll('{i}', String(k))]);
  });
  return out;
}

function splitStep(line) {
  const words = line.split(/\s+/);
  const i = words.indexOf('->');
  return i < 0 ? [words, null] : [words.slice(0, i), words.slice(i + 1)];
}

// Positional words, name=value options, flags (shared, tls).
function options(words) {
  const pos = [];
  const opts = {};
  const flags = new Set();
  for (const w of words) {
    const i = w.indexOf('=');
    if (i > 0) opts[w.slice(0, i)] = w.slice(i + 1);
    else if (w === 'shared' || w === 'tls') flags.add(w);
    else pos.push(w);
  }
  return { pos, opts, flags };
}

// The conformance word for an error the library gave.
function outcomeOf(err) {
  if (err instanceof lb.LockTimeoutError) return 'timeout';
  if (err instanceof lb.LockBusyError) return 'busy';
  if (err instanceof lb.WaitCancelledError) return 'cancelled';
  if (err instanceof lb.LockBrokerError) return `error ${err.code}`;
  return `error ${err && err.name}: ${err && err.message}`;
}

function show(s) {
  if (!s) return 'nothing';
  if (s.kind === 'exclusive') return `exclusive ${s.token} value=${s.value === null ? '-' : s.value}`;
  if (s.kind === 'shared') return `shared ${s.holders}`;
  if (s.kind === 'semaphore') return `semaphore ${s.holders} ${s.limit}`;
  return 'free';
}

// One action, started at once, on an async call of its own.
class Call {
  constructor(fn) {
    this.started = now();
    this.ended = null;
    this.value = undefined;
    this.error = null;
    this.controller = new AbortController();
    this.done = Promise.resolve().then(() => fn(this)).then(
      (v) => { this.value = v; },
      (e) => { this.error = e; },
    ).finally(() => { this.ended = now(); });
  }

  async wait(bound = STEP_BOUND) {
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(() => resolve(true), bound); });
    const over = await Promise.race([this.done.then(() => false), late]);
    clearTimeout(timer);
    if (over) throw new Failure(`the call did not end within ${bound} ms`);
  }
}

class Transcript {
  constructor(servers) {
    this.servers = servers;
    this.vars = new Map();
    this.clients = new Map();
    this.events = new Map(); // client -> kinds reported, not yet expected
    this.holds = new Map(); // "c key" -> Hold
    this.watches = new Map(); // "c key" -> Watch
    this.calls = new Map(); // name -> { call, c, key }
  }

  // Binds or compares a $variable ('-': no token).
  token(word, value, what) {
    if (word === '-') {
      if (value !== null) throw new Failure(`${what}: expected no token, got ${value}`);
      return;
    }
    if (!word.startsWith('$')) throw new Failure(`bad token word ${word}`);
    if (!this.vars.has(word)) {
      if (value === null) throw new Failure(`${what}: expected a token, got none`);
      this.vars.set(word, value);
    } else if (this.vars.get(word) !== value) {
      throw new Failure(`${what}: token ${value}, expected ${word} = ${this.vars.get(word)}`);
    }
  }

  tokval(word) {
    if (!this.vars.has(word)) throw new Failure(`${word} is not bound yet`);
    return this.vars.get(word);
  }

  // null if state matches the state words, else why not.
  stateMismatch(state, words, bind) {
    if (!state) return 'no state yet';
    const [kind, ...rest] = words;
    if (kind !== state.kind) return `is ${show(state)}`;
    if (kind === 'exclusive') {
      for (const w of rest) {
        if (w.startsWith('value=')) {
          const have = state.value === null ? '-' : state.value;
          if (have !== w.slice(6)) return `value ${have}, not ${w.slice(6)}`;
        } else if (w.startsWith('$')) {
          if (this.vars.has(w)) {
            if (this.vars.get(w) !== state.token) return `token ${state.token}, not ${w}`;
          } else if (bind) {
            this.vars.set(w, state.token);
          }
        }
      }
    } else if (kind === 'shared' || kind === 'semaphore') {
      if (rest.length && Number(rest[0]) !== state.holders) return `${state.holders} holders`;
      if (kind === 'semaphore' && rest.length > 1 && Number(rest[1]) !== state.limit) return `limit ${state.limit}`;
    }
    return null;
  }

  async run(lines) {
    await this.servers.reset();
    try {
      for (const [n, line] of lines) {
        try {
          await this.step(line);
        } catch (e) {
          if (e instanceof Failure) throw new Failure(`line ${n}: ${line}\n    ${e.message}`);
          if (e instanceof HelperError) throw new Failure(`line ${n}: ${line}\n    helper: ${e.message}`);
          throw e;
        }
      }
    } finally {
      await Promise.all([...this.clients.values()].map((c) => c.close().catch(() => {})));
    }
  }

  async step(line) {
    const [words, out] = splitStep(line);
    const first = words[0];
    if (first === 'client') return this.makeClient(words.slice(1), out);
    if (first === 'await' || first === 'cancel') {
      const entry = this.calls.get(words[1]);
      if (!entry) throw new Failure(`no call named ${words[1]}`);
      this.calls.delete(words[1]);
      if (first === 'cancel') entry.call.controller.abort();
      await entry.call.wait();
      return this.checkOutcome(entry.call, out, entry.c, entry.key);
    }
    if (first === 'assert') {
      const [, a, op, b] = words;
      const x = this.tokval(a);
      const y = this.tokval(b);
      const ok = { '<': x < y, '=': x === y, '!=': x !== y }[op];
      if (!ok) throw new Failure(`${a}=${x} ${op} ${b}=${y} is false`);
      return undefined;
    }
    if (this.clients.has(first)) return this.action(first, words.slice(1), out);
    await this.servers.step(line);
    // the library refuses a broker older than 1.2 unless told (see
    // Servers.allowOld): only ever for a broker of that age
    if (first === 'broker') await this.servers.allowOld(words[1]);
    return undefined;
  }

  async makeClient(words, out) {
    const { pos, opts, flags } = options(words);
    const [name, brokerList] = pos;
    const brokers = brokerList.split(',');
    const tls = flags.has('tls');
    const o = {};
    if (opts.grace !== undefined) o.grace = Number(opts.grace);
    if (opts.ping !== undefined) o.pingInterval = o.pingTimeout = Number(opts.ping);
    if (opts.auth !== undefined) o.auth = opts.auth;
    if (opts.name !== undefined) o.name = opts.name;
    if (tls) o.tls = await this.servers.tlsOptions(brokers[0]);
    const kinds = [];
    this.events.set(name, kinds);
    o.onEvent = (ev) => kinds.push(ev.kind);
    const addrs = [];
    for (const b of brokers) addrs.push(await this.servers.address(b, tls));
    const want = (out || ['ok']).join(' ');
    let client;
    try {
      client = await lb.Client.connect(addrs, o);
    } catch (e) {
      if (want !== outcomeOf(e)) throw new Failure(`expected ${want}, got ${outcomeOf(e)} (${e.message})`);
      return;
    }
    this.clients.set(name, client);
    if (want !== 'ok') throw new Failure(`expected ${want}, the client connected`);
  }

  async action(c, words, out) {
    const client = this.clients.get(c);
    const [verb, ...args] = words;
    if (verb === 'expect') return this.expect(c, args);
    const { pos, opts, flags } = options(args);
    const key = pos[0] || '';
    const call = new Call(this.callableFor(client, c, verb, pos, opts, flags));
    if (opts.async !== undefined) {
      this.calls.set(opts.async, { call, c, key });
      return undefined;
    }
    if (!out) throw new Failure('an action without async= needs -> outcome');
    await call.wait();
    return this.checkOutcome(call, out, c, key);
  }

  hold(c, key) {
    const h = this.holds.get(`${c} ${key}`);
    if (!h) throw new Failure(`${c} holds no ${key}`);
    return h;
  }

  callableFor(client, c, verb, pos, opts, flags) {
    const key = pos[0] || '';
    const ms = (name) => (opts[name] === undefined ? undefined : Number(opts[name]));
    switch (verb) {
      case 'lock': case 'elect': {
        const o = { ttl: ms('ttl') };
        if (verb === 'lock') {
          o.wait = opts.wait === undefined ? 0 : ms('wait');
          o.value = opts.value;
          o.shared = flags.has('shared');
          if (opts.limit !== undefined) o.limit = Number(opts.limit);
          return (call) => client.lock(key, { ...o, signal: call.controller.signal });
        }
        o.wait = ms('wait');
        return (call) => client.elect(key, pos[1], { ...o, signal: call.controller.signal });
      }
      case 'unlock': case 'resign':
        return async () => {
          const h = this.hold(c, key);
          this.holds.delete(`${c} ${key}`);
          await h.release({ linger: ms('linger') });
        };
      case 'renew':
        return () => this.hold(c, key).renew({ ttl: ms('ttl') });
      case 'proclaim':
        return () => this.hold(c, key).proclaim(pos[1]);
      case 'owner':
        return () => client.owner(key);
      case 'check':
        return () => client.check(key, this.tokval(pos[1]));
      case 'watch':
        return async () => { this.watches.set(`${c} ${key}`, await client.watch(key)); };
      case 'unwatch':
        return async () => {
          const w = this.watches.get(`${c} ${key}`);
          this.watches.delete(`${c} ${key}`);
          if (w) await w.close();
        };
      case 'close': case 'exit':
        return async () => {
          if (verb === 'exit') client.endNow(); // what the process's 'exit' event does
          else await client.close();
          for (const k of [...this.holds.keys()]) if (k.startsWith(`${c} `)) this.holds.delete(k);
        };
      default:
        throw new Failure(`unknown action ${verb}`);
    }
  }

  checkOutcome(call, out, c, key) {
    const want = [...out];
    let after = null;
    if (want.length && want[want.length - 1].startsWith('after=')) {
      after = want.pop().slice(6).split('..').map(Number);
    }
    if (call.error instanceof Failure) throw call.error;
    let got;
    const v = call.value;
    if (call.error) {
      got = outcomeOf(call.error).split(' ');
    } else if (v instanceof lb.Hold) {
      this.holds.set(`${c} ${key}`, v);
      got = ['held'];
      if (want[0] === 'held' && want.length > 1) {
        this.token(want[1], v.token, 'held');
        got.push(want[1]);
      }
    } else if (v && typeof v === 'object' && 'kind' in v) {
      const why = this.stateMismatch(v, want, true);
      got = why === null ? want : [show(v)];
    } else if (v && typeof v === 'object' && 'current' in v) {
      got = [v.current ? 'current' : 'stale'];
      if (!v.current && want[0] === 'stale' && want.length > 1) {
        this.token(want[1], v.token, 'stale');
        got.push(want[1]);
      }
    } else {
      got = ['ok'];
    }
    if (got.join(' ') !== want.join(' ')) {
      throw new Failure(`expected ${want.join(' ')}, got ${got.join(' ')}${call.error ? ` (${call.error.message})` : ''}`);
    }
    if (after) {
      const took = call.ended - call.started;
      if (took < after[0] || took > after[1]) throw new Failure(`took ${took.toFixed(0)} ms, not ${after[0]}..${after[1]}`);
    }
  }

  // Polls pred every 10 ms until it is true or within ms passed.
  static async until(pred, within) {
    const end = now() + within;
    for (;;) {
      if (pred()) return true;
      if (now() >= end) return false;
      await sleep(10);
    }
  }

  async expect(c, args) {
    const { pos, opts } = options(args);
    const within = opts.within === undefined ? 5000 : Number(opts.within);
    const [what, key] = pos;
    if (what === 'lost') {
      const h = this.hold(c, key);
      const signal = h.signal;
      if (!await Transcript.until(() => signal.aborted && h.lost, within)) {
        throw new Failure(`${key} was not reported lost within ${within} ms`);
      }
    } else if (what === 'held') {
      const h = this.hold(c, key);
      if (pos.length > 2) this.token(pos[2], h.token, 'held');
      const end = now() + Number(opts.for || 0);
      do {
        if (h.lost || h.signal.aborted) throw new Failure(`${key} was reported lost: ${h.lostError && h.lostError.message}`);
        await sleep(10);
      } while (now() < end);
    } else if (what === 'watch') {
      const w = this.watches.get(`${c} ${key}`);
      if (!w) throw new Failure(`${c} does not watch ${key}`);
      // the state's own words (shared, value=...) are not options
      const words = args.slice(2).filter((x) => !x.startsWith('within='));
      try {
        await w.wait((s) => this.stateMismatch(s, words, false) === null, { timeout: within });
      } catch (e) {
        throw new Failure(`the watch shows ${show(w.state)}`);
      }
      this.stateMismatch(w.state, words, true);
    } else if (what === 'leader') {
      const id = `${c} leader:${key}`;
      let w = this.watches.get(id);
      if (!w) {
        w = await this.clients.get(c).watch(key);
        this.watches.set(id, w);
      }
      const want = pos[2];
      try {
        await w.wait(() => (w.leader === null ? '-' : w.leader) === want, { timeout: within });
      } catch (e) {
        throw new Failure(`the leader is ${w.leader === null ? '-' : w.leader}, not ${want}`);
      }
    } else if (what === 'event') {
      const kinds = this.events.get(c);
      if (!await Transcript.until(() => kinds.includes(key), within)) {
        throw new Failure(`no ${key} event within ${within} ms (saw ${kinds.join(', ') || 'none'})`);
      }
      kinds.splice(kinds.indexOf(key), 1);
    } else {
      throw new Failure(`unknown expectation ${what}`);
    }
  }
}

async function main(argv) {
  const names = argv.map((a) => a.replace(/\.txt$/, ''));
  let files = fs.readdirSync(TRANSCRIPTS).filter((f) => f.endsWith('.txt')).map((f) => f.slice(0, -4)).sort();
  if (names.length) {
    const missing = names.filter((n) => !files.includes(n));
    if (missing.length) {
      console.log(`no such transcript: ${missing.join(', ')}`);
      return 2;
    }
    files = files.filter((f) => names.includes(f));
  }
  const servers = new Servers();
  let passed = 0;
  let failed = 0;
  try {
    for (const name of files) {
      const lines = expand(fs.readFileSync(path.join(TRANSCRIPTS, `${name}.txt`), 'utf8'));
      const t0 = now();
      try {
        await new Transcript(servers).run(lines);
        passed++;
        console.log(`PASS ${name} (${((now() - t0) / 1000).toFixed(1)} s)`);
      } catch (e) {
        failed++;
        console.log(`FAIL ${name} (${((now() - t0) / 1000).toFixed(1)} s)\n  ${e instanceof Failure ? e.message : e.stack}`);
      }
    }
  } finally {
    await servers.close();
  }
  console.log(`${passed} passed, ${failed} failed, 0 skipped`);
  return failed || !passed ? 1 : 0;
}

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => { process.exitCode = code; }, (e) => {
    console.error(e);
    process.exitCode = 1;
  });
}

module.exports = { expand, splitStep, options };
