'use strict';
// The errors of the lockbroker client: one class per ERR code of the
// protocol, one per outcome that is not a grant (BUSY, a wait that ran out,
// a lost hold, a cancelled wait), and the library's own (a broker too old,
// none reachable, a session that could not be resumed, a closed client,
// misuse).
//
// Every message says what happened to which key, for a person
// ('orders:42: the lock was lost (token 1795805345549156)'); the wire is in
// properties: key, reply (the broker's line: 'ERR LOST ...', 'EVENT LOST
// ...', 'BUSY', ...) and request (the line it answered), each null when
// there is none. `code` is the protocol's word for the error (the ERR code,
// BUSY, TIMEOUT, ...): the word tests/conformance/README.md names outcomes
// by. Branch on the class or the code, never on the message.

// The verbs whose first argument is a key: an error to one of them is about
// that key.
const KEYED = new Set(['ACQUIRE', 'RELEASE', 'RENEW', 'OWNER', 'CHECK', 'PROCLAIM', 'WATCH', 'UNWATCH', 'CANCEL']);

// The key a request line names (null for HELLO, AUTH, RESUME, ...).
function keyOf(request) {
  const w = String(request || '').split(' ');
  return w.length > 1 && KEYED.has(w[0].toUpperCase()) ? w[1] : null;
}

// `<subject>: <phrase> (<detail>)`, the shape of every message.
function describe(subject, phrase, detail = null) {
  const head = subject ? `${subject}: ${phrase}` : phrase;
  return detail ? `${head} (${detail})` : head;
}

/** @typedef {{ key?: string | null, reply?: string | null, request?: string | null, cause?: unknown }} ErrorOptions */
/** @typedef {ErrorOptions & { message?: string | null, token?: number | null }} BrokerErrorOptions */

class LockBrokerError extends Error {
  // options: key, reply, request (each null when none), cause.
  /** @param {string} [message] @param {ErrorOptions} [options] */
  constructor(message = '', { key = null, reply = null, request = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.key = key;
    this.reply = reply;
    this.request = request;
  }
}
LockBrokerError.prototype.code = 'ERROR';

// An `ERR <CODE> <text>` reply (or an `EVENT FAILED <key> <CODE>`): `text`
// is the broker's words after the code, `request` the line it answered.
class BrokerError extends LockBrokerError {
  /** @param {string} [text] @param {string | null} [request] @param {BrokerErrorOptions} [options] */
  constructor(text = '', request = null, { key = null, reply = null, message = null, cause } = {}) {
    const k = key || keyOf(request);
    const verb = request ? String(request).split(' ', 1)[0] : null;
    const phrase = new.target.prototype.phrase.replace('{verb}', verb || 'the request');
    super(message || describe(k || verb, phrase, text || null), {
      key: k, reply, request, cause,
    });
    this.text = text;
  }
}
BrokerError.prototype.code = 'ERR';
BrokerError.prototype.phrase = 'the broker refused the request';

function errClass(name, code, phrase, base = BrokerError) {
  const cls = { [name]: class extends base {} }[name];
  cls.prototype.code = code;
  cls.prototype.phrase = phrase;
  return cls;
}

const BadCommandError = errClass('BadCommandError', 'BADCMD', 'the broker does not know {verb}');
const BadArgumentError = errClass('BadArgumentError', 'BADARG', 'bad argument');
const LineTooLongError = errClass('LineTooLongError', 'TOOLONG', 'the request line is too long');
// AUTH is needed, or the token (or a RESUME's secret) is wrong.
const NotAuthenticatedError = errClass('NotAuthenticatedError', 'NOAUTH', 'not authenticated');
const NotHeldError = errClass('NotHeldError', 'NOTHELD', 'not held by this session');

// The hold is gone: EVENT LOST, ERR LOST, or a reconnect could not keep
// it. Stop using the resource. `token`: the lost hold's (null: unknown).
class LockLostError extends BrokerError {
  /** @param {string} [text] @param {string | null} [request] @param {BrokerErrorOptions} [options] */
  constructor(text = '', request = null, options = {}) {
    const { token = null } = options;
    const o = { ...options };
    if (!o.message && token !== null) {
      o.message = describe(o.key || keyOf(request), 'the lock was lost', `token ${token}${text ? `; ${text}` : ''}`);
    }
    super(text, request, o);
    this.token = token;
  }
}
LockLostError.prototype.code = 'LOST';
LockLostError.prototype.phrase = 'the lock was lost';

// The broker cannot reach Redis (ERR UNAVAILABLE, or a wait that ended
// EVENT FAILED <key> UNAVAILABLE).
const UnavailableError = errClass('UnavailableError', 'UNAVAILABLE', 'the broker cannot reach Redis');
// A broker limit: keys per session, waiters, sessions, the fencing counter.
const LimitExceededError = errClass('LimitExceededError', 'LIMIT', 'a broker limit was reached');
const NoSessionError = errClass('NoSessionError', 'NOSESSION', 'the session cannot be resumed');
// The key is outside the patterns of the app this session is.
const DeniedError = errClass('DeniedError', 'DENIED', "denied: outside this app's keys");

const ERR_CLASSES = new Map([BadCommandError, BadArgumentError, LineTooLongError,
  NotAuthenticatedError, NotHeldError, LockLostError, UnavailableError, LimitExceededError,
  NoSessionError, DeniedError].map((cls) => [cls.prototype.code, cls]));

// The error for an ERR code (an unknown code still gives a BrokerError
// carrying it).
function errorForCode(code, text = '', request = null, options = {}) {
  const cls = ERR_CLASSES.get(code);
  if (cls) return new cls(text, request, options);
  const err = new BrokerError(text, request, options);
  err.code = code || 'ERR';
  return err;
}

// The error for an `ERR <CODE> <text>` line.
function errorFromReply(line, request = null, options = {}) {
  const m = /^ERR(?: (\S+))?(?: (.*))?$/.exec(line) || [];
  return errorForCode(m[1], m[2] || '', request, { ...options, reply: line });
}

// The key was not granted: base of LockBusyError and LockTimeoutError.
class NotAcquiredError extends LockBrokerError {}
NotAcquiredError.prototype.code = 'NOTACQUIRED';
// Someone else holds the key (a one-try lock: `wait: 0`).
class LockBusyError extends NotAcquiredError {}
LockBusyError.prototype.code = 'BUSY';
// The wait ran out (EVENT TIMEOUT, the caller's deadline, or its signal
// aborted by AbortSignal.timeout()).
class LockTimeoutError extends NotAcquiredError {}
LockTimeoutError.prototype.code = 'TIMEOUT';

// The caller aborted the wait (its AbortSignal): named AbortError, as
// Node's own APIs name an abort, with the signal's reason as `cause`. The
// key is not held.
class WaitCancelledError extends LockBrokerError {
  constructor(message = 'the wait was cancelled', options) {
    super(message, options);
    this.name = 'AbortError';
  }
}
WaitCancelledError.prototype.code = 'ABORT_ERR';

// The API was misused: a second take of a key inside a withLock() of the
// same key and client, a hold released twice, a closed client
// (ClosedError).
class UsageError extends LockBrokerError {}
UsageError.prototype.code = 'USAGE';
// The client was closed (close(), or the end of the process): a call made
// after it, or a wait it ended.
class ClosedError extends UsageError {}
// No broker of the list could be reached (or none answered in time).
class ConnectError extends LockBrokerError {}
ConnectError.prototype.code = 'CONNECT';
// The broker speaks a protocol older than 1.2.
class VersionError extends LockBrokerError {}
VersionError.prototype.code = 'VERSION';
// The session could not be resumed after its connection was lost (or the
// client was closed): its holds are gone.
class SessionLostError extends LockLostError {}
SessionLostError.prototype.code = 'SESSION';
// The broker sent a line this library cannot read.
class ProtocolError extends LockBrokerError {}
ProtocolError.prototype.code = 'PROTOCOL';

// The error of a lost hold: '<key>: the lock was lost (token <n>)', then
// why when there is more to say.
function lost(key, token, why = '', { cls = LockLostError, reply = null, request = null } = {}) {
  const message = describe(key, 'the lock was lost', `token ${token}`) + (why ? `: ${why}` : '');
  return new cls(why, request, {
    key, reply, message, token,
  });
}

// The error of a one-try take of a key someone holds.
function busy(key, reply = 'BUSY', request = null, who = 'another session') {
  return new LockBusyError(describe(key, `held by ${who}`), { key, reply, request });
}

module.exports = {
  LockBrokerError, BrokerError, BadCommandError, BadArgumentError, LineTooLongError,
  NotAuthenticatedError, NotHeldError, LockLostError, UnavailableError, LimitExceededError,
  LimitError: LimitExceededError, NoSessionError, DeniedError, NotAcquiredError, LockBusyError,
  LockTimeoutError, WaitCancelledError, UsageError, ClosedError, ConnectError, VersionError,
  SessionLostError, ProtocolError, ERR_CLASSES, errorForCode, errorFromReply, keyOf, describe,
  lost, busy,
};
