'use strict';
// The wire words without I/O: request lines, reply and event parsing, the
// address syntax and the bounded line splitter.

const test = require('node:test');
const assert = require('node:assert/strict');
const P = require('../../lib/protocol');
const E = require('../../lib/errors');

test('ACQUIRE lines carry every option, ASYNC last', () => {
  assert.equal(P.acquireLine('k'), 'ACQUIRE k ASYNC');
  assert.equal(P.acquireLine('k', { async: false }), 'ACQUIRE k');
  assert.equal(P.acquireLine('k', { shared: true, waitMs: 500, ttlMs: 0 }), 'ACQUIRE k SHARED WAIT 500 TTL 1 ASYNC');
  assert.equal(P.acquireLine('k', { limit: 3, ttlMs: 2000, async: false }), 'ACQUIRE k LIMIT 3 TTL 2000');
  assert.equal(P.acquireLine('svc', { value: '10.0.0.7:8080', waitMs: 60000 }), 'ACQUIRE svc VALUE 10.0.0.7:8080 WAIT 60000 ASYNC');
});

test('keys, values and kinds are checked before anything is sent', () => {
  for (const bad of ['', 'a b', 'tab\there', 'é', 'x'.repeat(257), 42, null]) {
    assert.throws(() => P.checkKey(bad), TypeError, String(bad));
  }
  assert.equal(P.checkKey('x'.repeat(256)), 'x'.repeat(256));
  assert.throws(() => P.checkKind(true, 2, null), /exclude/);
  assert.throws(() => P.checkKind(true, null, 'v'), /exclusive/);
  assert.throws(() => P.checkKind(false, 0, null), /limit/);
  assert.throws(() => P.checkKind(false, 1.5, null), /limit/);
  assert.throws(() => P.checkKind(false, null, 'two words'), TypeError);
  P.checkKind(false, 1000000, null);
});

test('milliseconds round up and clamp to the protocol range', () => {
  assert.equal(P.toMs(0.2, 'wait'), 1);
  assert.equal(P.toMs(1e12, 'wait'), P.MAX_MS);
  assert.equal(P.toMs(0, 'ttl', 1), 1);
  assert.throws(() => P.toMs(-1, 'wait'), TypeError);
  assert.throws(() => P.toMs(NaN, 'wait'), TypeError);
});

test('OWNER answers: exclusive with and without a value, shared, semaphore, free', () => {
  assert.deepEqual({ ...P.parseOwner('OK 3f2b 58214 1042 10.0.0.7:8080') }, {
    kind: 'exclusive', holders: 1, limit: null, clientId: '3f2b', token: 1042, value: '10.0.0.7:8080', ttlMs: 58214,
  });
  assert.equal(P.parseOwner('OK ? 1 7 -').value, null);
  assert.equal(P.parseOwner('OK ? 1 7').value, null); // plain OWNER
  const shared = P.parseOwner('OK SHARED 2 a 29998 11 b 29999 12');
  assert.equal(shared.kind, 'shared');
  assert.equal(shared.holders, 2);
  const sem = P.parseOwner('OK SEMAPHORE 2 3 a 1 5 b 1 6');
  assert.deepEqual([sem.kind, sem.holders, sem.limit], ['semaphore', 2, 3]);
  assert.equal(P.parseOwner('OK -'), P.FREE);
  for (const bad of ['OK', 'OK x y', 'BUSY', 'OK a 1 notatoken', 'OK SHARED x']) {
    assert.throws(() => P.parseOwner(bad), E.ProtocolError, bad);
  }
});

test('CHECK answers', () => {
  assert.deepEqual({ ...P.parseCheck('OK CURRENT', 5) }, { current: true, token: 5 });
  assert.deepEqual({ ...P.parseCheck('OK STALE 9', 5) }, { current: false, token: 9 });
  assert.deepEqual({ ...P.parseCheck('OK STALE -', 5) }, { current: false, token: null });
  assert.throws(() => P.parseCheck('OK STALE', 5), E.ProtocolError);
});

test('events and the watch states they tell', () => {
  const ev = P.parseEvent('EVENT HOLDER jobs:k 3f2b 1795 host-a');
  assert.deepEqual(ev, { kind: 'HOLDER', key: 'jobs:k', args: ['3f2b', '1795', 'host-a'] });
  const s = P.watchState(ev);
  assert.deepEqual([s.kind, s.clientId, s.token, s.value], ['exclusive', '3f2b', 1795, 'host-a']);
  assert.equal(P.watchState(P.parseEvent('EVENT HOLDER k ? 7 -')).value, null);
  assert.equal(P.watchState(P.parseEvent('EVENT HOLDER k SHARED 2')).holders, 2);
  assert.equal(P.watchState(P.parseEvent('EVENT HOLDER k SEMAPHORE 1 3')).limit, 3);
  assert.equal(P.watchState(P.parseEvent('EVENT FREE k')), P.FREE);
  assert.throws(() => P.watchState(P.parseEvent('EVENT HOLDER k a x -')), E.ProtocolError);
  assert.throws(() => P.parseEvent('EVENT LOST'), E.ProtocolError);
});

test('tokens are decimal integers below 2^53', () => {
  assert.equal(P.parseToken('9007199254740991'), 2 ** 53 - 1);
  for (const bad of ['9007199254740992', '0', '-1', '1e5', '12345678901234567', '']) {
    assert.throws(() => P.parseToken(bad), E.ProtocolError, bad);
  }
});

test('HELLO versions, lists, stats and errors', () => {
  assert.deepEqual(P.parseVersion('OK cid lockbroker/1.2.0 secret'), [1, 2, 0]);
  assert.deepEqual(P.parseVersion('OK cid lockbroker/2.0'), [2, 0, 0]);
  assert.ok(P.versionAtLeast([1, 10, 0], [1, 2]));
  assert.ok(P.versionAtLeast([2, 0, 0], [1, 2]));
  assert.ok(!P.versionAtLeast([1, 1, 9], [1, 2]));
  assert.throws(() => P.parseVersion('OK cid'), E.ProtocolError);
  assert.deepEqual(P.parseList('OK 2 a b'), ['a', 'b']);
  assert.deepEqual(P.parseList('OK 0'), []);
  assert.throws(() => P.parseList('OK 3 a b'), E.ProtocolError);
  assert.deepEqual(P.parseStats('OK version=1.2.0 sessions=3 junk'), { version: '1.2.0', sessions: '3' });
  const err = E.errorFromReply('ERR DENIED app billing may not use this key', 'ACQUIRE x');
  assert.ok(err instanceof E.DeniedError && err instanceof E.BrokerError);
  assert.equal(err.code, 'DENIED');
  assert.equal(err.text, 'app billing may not use this key');
  assert.equal(err.name, 'DeniedError');
  const odd = E.errorFromReply('ERR NEWCODE something');
  assert.equal(odd.code, 'NEWCODE');
  assert.ok(odd instanceof E.BrokerError);
  assert.equal(new E.WaitCancelledError().name, 'AbortError');
  assert.ok(new E.SessionLostError('x') instanceof E.LockLostError);
});

test('addresses', () => {
  assert.deepEqual(P.parseAddress('10.0.0.1'), { host: '10.0.0.1', port: 7711 });
  assert.deepEqual(P.parseAddress(' broker.local:7712 '), { host: 'broker.local', port: 7712 });
  assert.deepEqual(P.parseAddress('[::1]:7713'), { host: '::1', port: 7713 });
  assert.equal(P.addressText({ host: '::1', port: 7713 }), '[::1]:7713');
  for (const bad of ['', 'a:b', 'a:0', 'a:70000', '::1']) assert.throws(() => P.parseAddress(bad), TypeError, bad);
});

test('the line splitter joins chunks, drops CRs and bounds an endless line', () => {
  const s = new P.LineSplitter(16);
  assert.deepEqual(s.push('OK 1\r\nOK'), ['OK 1']);
  assert.deepEqual(s.push(' 2\r'), []);
  assert.deepEqual(s.push('\nEVENT LOST a 1\n\r\n'), ['OK 2', 'EVENT LOST a 1', '']);
  assert.throws(() => s.push('x'.repeat(17)), E.ProtocolError);
  assert.deepEqual(s.push('OK\n'), ['OK']); // and goes on afresh
});
