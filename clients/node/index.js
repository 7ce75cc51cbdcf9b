'use strict';
// lockbroker: named locks from a lockbroker broker (protocol 1.2), for
// Node.js 18 and later. See README.md; the types are in index.d.ts; ES
// modules get these same objects through index.mjs.

const { Client, Hold, Watch } = require('./lib/client');
const errors = require('./lib/errors');
const { FREE } = require('./lib/protocol');

exports.Client = Client;
exports.Hold = Hold;
exports.Watch = Watch;
exports.FREE = FREE;
exports.LockBrokerError = errors.LockBrokerError;
exports.BrokerError = errors.BrokerError;
exports.BadCommandError = errors.BadCommandError;
exports.BadArgumentError = errors.BadArgumentError;
exports.LineTooLongError = errors.LineTooLongError;
exports.NotAuthenticatedError = errors.NotAuthenticatedError;
exports.NotHeldError = errors.NotHeldError;
exports.LockLostError = errors.LockLostError;
exports.UnavailableError = errors.UnavailableError;
exports.LimitExceededError = errors.LimitExceededError;
exports.LimitError = errors.LimitError; // the name before 0.2: the same class
exports.NoSessionError = errors.NoSessionError;
exports.DeniedError = errors.DeniedError;
exports.NotAcquiredError = errors.NotAcquiredError;
exports.LockBusyError = errors.LockBusyError;
exports.LockTimeoutError = errors.LockTimeoutError;
exports.WaitCancelledError = errors.WaitCancelledError;
exports.UsageError = errors.UsageError;
exports.ClosedError = errors.ClosedError;
exports.ConnectError = errors.ConnectError;
exports.VersionError = errors.VersionError;
exports.SessionLostError = errors.SessionLostError;
exports.ProtocolError = errors.ProtocolError;
