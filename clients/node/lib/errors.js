'use strict';
// The errors of the lockbroker client: one class per ERR code of the
// protocol, one per outcome that is not a grant (BUSY, a wait that ran out,
// a lost hold, a cancelled wait), and the library's own (a broker too old,
// none reachable, a session that could not be resumed, misuse).
//
// `code` is the protocol's word for the error (the ERR code, BUSY,
// TIMEOUT, ...): the word tests/conformance/README.md names outcomes by.

class LockBrokerError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}
LockBrokerError.prototype.code = 'ERROR';

// An `ERR <CODE> <text>` reply: `text` is the broker's words after the
// code (for people: branch on the class or the code), `request` the line
// it answered.
class BrokerError extends LockBrokerError {
  constructor(text = '', request = null, options) {
    super(`${new.target.prototype.code} ${text}${request ? ` (to ${request})` : ''}`, options);
    this.text = text;
    this.request = request;
  }
}
BrokerError.prototype.code = 'ERR';

function errClass(name, code) {
  const cls = { [name]: class extends BrokerError {} }[name];
  cls.prototype.code = code;
  return cls;
}

const BadCommandError = errClass('BadCommandError', 'BADCMD');
const BadArgumentError = errClass('BadArgumentError', 'BADARG');
const LineTooLongError = errClass('LineTooLongError', 'TOOLONG');
// AUTH is needed, or the token (or a RESUME's secret) is wrong.
const NotAuthenticatedError = errClass('NotAuthenticatedError', 'NOAUTH');
const NotHeldError = errClass('NotHeldError', 'NOTHELD');
// The hold is gone: EVENT LOST, ERR LOST, or a reconnect could not keep
// it. Stop using the resource.
const LockLostError = errClass('LockLostError', 'LOST');
// The broker cannot reach Redis (ERR UNAVAILABLE, or a wait that ended
// EVENT FAILED <key> UNAVAILABLE).
const UnavailableError = errClass('UnavailableError', 'UNAVAILABLE');
const LimitError = errClass('LimitError', 'LIMIT');
const NoSessionError = errClass('NoSessionError', 'NOSESSION');
// The key is outside the patterns of the app this session is.
const DeniedError = errClass('DeniedError', 'DENIED');

const ERR_CLASSES = new Map([BadCommandError, BadArgumentError, LineTooLongError,
  NotAuthenticatedError, NotHeldError, LockLostError, UnavailableError, LimitError,
  NoSessionError, DeniedError].map((cls) => [cls.prototype.code, cls]));

// The error for an `ERR <CODE> <text>` line (an unknown code still gives a
// BrokerError carrying it).
function errorFromReply(line, request = null) {
  const m = /^ERR(?: (\S+))?(?: (.*))?$/.exec(line) || [];
  const cls = ERR_CLASSES.get(m[1]);
  if (cls) return new cls(m[2] || '', request);
  const err = new BrokerError(m[2] || line, request);
  err.code = m[1] || 'ERR';
  return err;
}

// The key was not granted: base of LockBusyError and LockTimeoutError.
class NotAcquiredError extends LockBrokerError {}
NotAcquiredError.prototype.code = 'NOTACQUIRED';
// Someone else holds the key (a one-try lock: `wait: 0`).
class LockBusyError extends NotAcquiredError {}
LockBusyError.prototype.code = 'BUSY';
// The wait ran out (EVENT TIMEOUT, or the caller's deadline).
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
// same key and client, a closed client, a hold released twice.
class UsageError extends LockBrokerError {}
UsageError.prototype.code = 'USAGE';
// No broker of the list could be reached (or none answered in time).
class ConnectError extends LockBrokerError {}
ConnectError.prototype.code = 'CONNECT';
// The broker speaks a protocol older than 1.2.
class VersionError extends LockBrokerError {}
VersionError.prototype.code = 'VERSION';
// The session could not be resumed after its connection was lost: its
// holds are gone (a fresh session took its place).
class SessionLostError extends LockLostError {
  constructor(text = '', request = null, options) {
    super(text, request, options);
    this.message = `SESSION ${text}`;
  }
}
SessionLostError.prototype.code = 'SESSION';
// The broker sent a line this library cannot read.
class ProtocolError extends LockBrokerError {}
ProtocolError.prototype.code = 'PROTOCOL';

module.exports = {
  LockBrokerError, BrokerError, BadCommandError, BadArgumentError, LineTooLongError,
  NotAuthenticatedError, NotHeldError, LockLostError, UnavailableError, LimitError,
  NoSessionError, DeniedError, NotAcquiredError, LockBusyError, LockTimeoutError,
  WaitCancelledError, UsageError, ConnectError, VersionError, SessionLostError,
  ProtocolError, ERR_CLASSES, errorFromReply,
};
