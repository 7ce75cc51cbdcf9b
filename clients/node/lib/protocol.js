'use strict';
// The wire words of protocol 1.2, without any I/O: checking what goes into
// a request line, reading reply and event lines, the small value types a
// caller sees (a key's state, a CHECK answer), and a bounded splitter of
// the byte stream into lines. See proto/PROTOCOL.md and the 1.2 part 1
// words (ASYNC, CANCEL, VALUE, PROCLAIM, WATCH, CHECK).

const { BadArgumentError, ProtocolError } = require('./errors');

const MAX_KEY = 256; // the broker's default max_key_len
const MAX_VALUE = 256;
const MAX_MS = 2147483647; // the largest <ms> the protocol takes
const MAX_TOKEN = 2 ** 53 - 1;
const MIN_VERSION = [1, 2];
// A reply line is short (OWNER lists at most 16 holders); a broker that
// sends this much without an LF is not one.
const MAX_LINE = 64 * 1024;

const WORD = /^[\x21-\x7e]+$/;

// A word of the protocol: 1..longest printable ASCII characters without
// blanks (0x21..0x7e).
function checkWord(word, what, longest = 64) {
  if (typeof word !== 'string' || !WORD.test(word) || word.length > longest) {
    throw new TypeError(`${what}: 1..${longest} printable ASCII characters without blanks, not ${JSON.stringify(word)}`);
  }
  return word;
}

const checkKey = (key) => checkWord(key, 'a key', MAX_KEY);
const checkValue = (value) => checkWord(value, 'a value', MAX_VALUE);

// Milliseconds (the API's unit) as the protocol's whole milliseconds:
// rounded up and clamped to its range.
function toMs(ms, what, minimum = 0) {
  if (typeof ms !== 'number' || Number.isNaN(ms) || ms < 0) {
    throw new TypeError(`${what} must be a number of milliseconds >= 0, not ${ms}`);
  }
  return Math.max(minimum, Math.min(MAX_MS, Math.ceil(ms)));
}

// The kind of hold asked for: what the broker would refuse with ERR BADARG
// throws BadArgumentError before it is sent.
function checkKind(shared, limit, value, key = null) {
  const bad = (text) => new BadArgumentError(text, null, { key });
  if (shared && limit != null) throw bad('shared and limit exclude each other');
  if (limit != null && (!Number.isInteger(limit) || limit < 1 || limit > 1000000)) {
    throw bad(`limit is an integer 1..1000000, not ${limit}`);
  }
  if (value != null) {
    if (shared || limit != null) throw bad('a value goes on an exclusive hold only');
    checkValue(value);
  }
}

// `ACQUIRE <key> [SHARED | LIMIT n] [WAIT ms] [TTL ms] [VALUE v] [ASYNC]`.
function acquireLine(key, { shared = false, limit = null, waitMs = 0, ttlMs = null, value = null, async = true } = {}) {
  let line = `ACQUIRE ${key}`;
  if (shared) line += ' SHARED';
  if (limit != null) line += ` LIMIT ${limit}`;
  if (value != null) line += ` VALUE ${value}`;
  if (waitMs) line += ` WAIT ${waitMs}`;
  if (ttlMs != null) line += ` TTL ${Math.max(1, ttlMs)}`;
  if (async) line += ' ASYNC';
  return line;
}

// ---------------------------------------------------------------- replies

// OK, BUSY or ERR: the first word of a reply line.
function replyKind(line) {
  const first = line.split(' ', 1)[0];
  if (first !== 'OK' && first !== 'BUSY' && first !== 'ERR') {
    throw new ProtocolError(`not a reply: ${JSON.stringify(line)}`);
  }
  return first;
}

function parseToken(word) {
  if (!/^\d{1,16}$/.test(word) || Number(word) > MAX_TOKEN || Number(word) < 1) {
    throw new ProtocolError(`not a fencing token: ${JSON.stringify(word)}`);
  }
  return Number(word);
}

// `OK <client-id> lockbroker/<version> [<secret>]` -> [major, minor, patch].
function parseVersion(helloReply) {
  const m = /\blockbroker\/(\d+)\.(\d+)(?:\.(\d+))?/.exec(helloReply);
  if (!m) throw new ProtocolError(`HELLO reply without a version: ${JSON.stringify(helloReply)}`);
  return [Number(m[1]), Number(m[2]), Number(m[3] || 0)];
}

function versionAtLeast(v, want) {
  return v[0] > want[0] || (v[0] === want[0] && v[1] >= want[1]);
}

// Who holds a key: the answer of owner() and each state a watch sees.
// kind: free, exclusive, shared, semaphore; holders: sessions holding it
// (1 exclusive); clientId ("?" when the broker may not show it), token and
// value (null: none) of an exclusive holder; limit of a semaphore; ttlMs
// what an OWNER saw left.
function keyState(kind, fields = {}) {
  return Object.freeze({
    kind, holders: 0, limit: null, clientId: null, token: null, value: null, ttlMs: null, ...fields,
  });
}

const FREE = keyState('free');

const valueWord = (word) => (word === '-' ? null : word);

function int(word) {
  if (!/^\d+$/.test(word || '')) throw new RangeError(word);
  return Number(word);
}

// Holder words shared by OWNER answers and HOLDER events: SHARED n,
// SEMAPHORE n limit, or an exclusive holder.
function holderState(w, exclusive) {
  if (w[0] === 'SHARED') return keyState('shared', { holders: int(w[1]) });
  if (w[0] === 'SEMAPHORE') return keyState('semaphore', { holders: int(w[1]), limit: int(w[2]) });
  return exclusive(w);
}

// The reply to `OWNER <key> VALUE` (or plain `OWNER <key>`).
function parseOwner(line) {
  const w = line.split(' ').filter(Boolean);
  try {
    if (w[0] !== 'OK' || w.length < 2) throw new RangeError();
    if (w.length === 2 && w[1] === '-') return FREE;
    return holderState(w.slice(1), (x) => keyState('exclusive', {
      holders: 1, clientId: x[0], ttlMs: int(x[1]), token: parseToken(x[2]),
      value: x.length > 3 ? valueWord(x[3]) : null,
    }));
  } catch (e) {
    throw new ProtocolError(`not an OWNER answer: ${JSON.stringify(line)}`);
  }
}

// CHECK's answer: current when the token's hold is alive in Redis;
// otherwise token is the current holder's (null: the key is free).
function parseCheck(line, token) {
  const w = line.split(' ');
  if (w.length === 2 && w[0] === 'OK' && w[1] === 'CURRENT') return Object.freeze({ current: true, token });
  if (w.length === 3 && w[0] === 'OK' && w[1] === 'STALE') {
    return Object.freeze({ current: false, token: w[2] === '-' ? null : parseToken(w[2]) });
  }
  throw new ProtocolError(`not a CHECK answer: ${JSON.stringify(line)}`);
}

// `OK <n> [key ...]` (HELD, RESUME) -> the keys.
function parseList(line) {
  const w = line.split(' ').filter(Boolean);
  if (w.length < 2 || w[0] !== 'OK' || !/^\d+$/.test(w[1]) || Number(w[1]) !== w.length - 2) {
    throw new ProtocolError(`not an OK <n> <keys> answer: ${JSON.stringify(line)}`);
  }
  return w.slice(2);
}

// `OK name=value ...` -> an object.
function parseStats(line) {
  const out = {};
  for (const w of line.split(' ').slice(1)) {
    const i = w.indexOf('=');
    if (i > 0) out[w.slice(0, i)] = w.slice(i + 1);
  }
  return out;
}

// ----------------------------------------------------------------- events

// One `EVENT <kind> <key> ...` line: kind is LOST, GRANTED, TIMEOUT,
// FAILED, QUEUED, HOLDER or FREE; args are the words after the key.
function parseEvent(line) {
  const w = line.split(' ').filter(Boolean);
  if (w.length < 3 || w[0] !== 'EVENT') throw new ProtocolError(`not an event: ${JSON.stringify(line)}`);
  return { kind: w[1], key: w[2], args: w.slice(3) };
}

// The key state an `EVENT HOLDER` or `EVENT FREE` tells.
function watchState(ev) {
  if (ev.kind === 'FREE') return FREE;
  try {
    return holderState(ev.args, (a) => keyState('exclusive', {
      holders: 1, clientId: a[0], token: parseToken(a[1]), value: valueWord(a[2]),
    }));
  } catch (e) {
    throw new ProtocolError(`not a watch event: ${ev.kind} ${ev.key} ${ev.args.join(' ')}`);
  }
}

// `host`, `host:port`, `[v6]:port` -> { host, port }.
function parseAddress(addr, defaultPort = 7711) {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+))(?::(\d{1,5}))?$/.exec(String(addr).trim());
  const port = m && m[3] ? Number(m[3]) : defaultPort;
  if (!m || port < 1 || port > 65535) throw new TypeError(`a broker address is host[:port], not ${JSON.stringify(addr)}`);
  return { host: m[1] || m[2], port };
}

function addressText({ host, port }) {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

// Splits what a connection reads into lines (CR LF or LF ended), keeping
// at most MAX_LINE characters of a line not ended yet.
class LineSplitter {
  constructor(maxLine = MAX_LINE) {
    this.buf = '';
    this.maxLine = maxLine;
  }

  // The complete lines in buf + chunk, without their ends; throws
  // ProtocolError when a line outgrows the bound.
  push(chunk) {
    const data = this.buf + chunk;
    const lines = data.split('\n');
    this.buf = lines.pop();
    if (this.buf.length > this.maxLine) {
      this.buf = '';
      throw new ProtocolError(`a line longer than ${this.maxLine} characters`);
    }
    for (let i = 0; i < lines.length; i++) {
      const l = lines[i];
      if (l.endsWith('\r')) lines[i] = l.slice(0, -1);
    }
    return lines;
  }
}

module.exports = {
  MAX_KEY, MAX_VALUE, MAX_MS, MAX_TOKEN, MIN_VERSION, MAX_LINE, FREE,
  checkWord, checkKey, checkValue, checkKind, toMs, acquireLine, replyKind, parseToken,
  parseVersion, versionAtLeast, keyState, parseOwner, parseCheck, parseList, parseStats,
  parseEvent, watchState, parseAddress, addressText, LineSplitter,
};
