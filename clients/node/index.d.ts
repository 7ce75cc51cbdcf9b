// Type declarations of the lockbroker client for Node.js (>= 18).
// Times are milliseconds throughout; fencing tokens are numbers (< 2^53).

/// <reference types="node" />

import { EventEmitter } from 'events';
import type { ConnectionOptions } from 'tls';

/** The options of a Client. */
export interface ClientOptions {
  /**
   * HELLO GRACE: ms the broker keeps the session's holds after its connection broke
   * without QUIT (0: none), for a RESUME on any broker. Default 5000: a crashed app's
   * locks are free 5 s after it died. The end of the process sends QUIT (free at once).
   */
  grace?: number;
  /** The broker's auth_token, or an app's token (AUTH). */
  auth?: string | null;
  /** TLS: true (the system's CAs), or options for tls.connect (ca, cert, key, servername, ...). */
  tls?: boolean | ConnectionOptions | null;
  /** A label for the session (HELLO name): 1..64 printable ASCII characters without blanks. */
  name?: string | null;
  /** Per connection attempt. Default 5000. */
  connectTimeout?: number;
  /** The retry budget after a broken connection (default: the grace, or 10000 without one). */
  resumeTimeout?: number | null;
  /** After this long without a byte from the broker the client sends PING. Default 2000. */
  pingInterval?: number;
  /**
   * Without any byte from the broker this long after the PING, the connection is declared dead
   * (a reply still arriving is no silence). Default 2000.
   */
  pingTimeout?: number;
  /** How long a request other than a wait may go unanswered. Default 30000. */
  requestTimeout?: number | null;
  /** Called on every connection event (as the 'connection' event). */
  onEvent?: ((event: ConnectionEvent) => void) | null;
  /** Called each time one of counters() moves (as the 'counter' event). */
  onCounter?: ((event: CounterEvent) => void) | null;
}

/** What the client counted since it was made (the same names in every lockbroker library). */
export interface Counters {
  /** lock() and elect() calls that ended, granted or not. */
  readonly waits: number;
  /** The seconds those calls took, from the call to its outcome, summed. */
  readonly waitSecondsTotal: number;
  /** Holds that ended: released, lost, or ended with the session. */
  readonly holds: number;
  /** The seconds those holds were held, summed (a hold still held is in neither). */
  readonly holdSecondsTotal: number;
  /** Holds reported lost while the client was open. */
  readonly losses: number;
  /** Sessions resumed (RESUME) after a broken connection. */
  readonly resumes: number;
  /** Connections made again after one broke, resumed or not. */
  readonly reconnects: number;
}

/** What onCounter and the 'counter' event are told: one counter moved by one. */
export interface CounterEvent {
  readonly name: 'waits' | 'holds' | 'losses' | 'resumes' | 'reconnects';
  /** The key it was about (null for resumes and reconnects). */
  readonly key: string | null;
  /** What was added to waitSecondsTotal or holdSecondsTotal (else 0). */
  readonly seconds: number;
}

/** What the connection hook is told. */
export interface ConnectionEvent {
  /**
   * connected: the first session is up; disconnected: the connection broke;
   * resumed: a new connection took the session over (RESUME) with its holds,
   * waits and watches; new_session: the session could not be resumed, its holds
   * were reported lost, a fresh session took its place; reconnect_failed: no
   * broker answered within the retry budget (holds lost, requests failed; the
   * client keeps trying).
   */
  kind: 'connected' | 'disconnected' | 'resumed' | 'new_session' | 'reconnect_failed';
  /** host:port of the broker, '' when none. */
  broker: string;
  detail: string;
}

/** The options of a lock. */
export interface LockOptions {
  /** ms to wait for the key: 0 one try, Infinity (the default) until granted. */
  wait?: number;
  /**
   * Aborting it withdraws the wait (CANCEL): the call rejects with WaitCancelledError
   * (name 'AbortError'), or LockTimeoutError when the signal timed out (AbortSignal.timeout()).
   */
  signal?: AbortSignal | null;
  /** A read hold beside other readers. */
  shared?: boolean;
  /** One of limit permits (a semaphore): 1..1000000. */
  limit?: number | null;
  /** The key's TTL in Redis (the broker renews it while the session lives). */
  ttl?: number | null;
  /** A value on an exclusive hold (1..256 printable ASCII characters without blanks), shown by owner() and watches. */
  value?: string | null;
  /** Called with the LockLostError if the hold is lost. */
  onLost?: ((err: LockLostError) => void) | null;
}

export type ElectOptions = Omit<LockOptions, 'shared' | 'limit' | 'value'>;

/** Who holds a key: owner()'s answer and each state a watch sees. */
export interface KeyState {
  readonly kind: 'free' | 'exclusive' | 'shared' | 'semaphore';
  /** Sessions holding it (1 when exclusive). */
  readonly holders: number;
  /** A semaphore's number of permits. */
  readonly limit: number | null;
  /** The exclusive holder's client-id ('?' when the broker may not show it). */
  readonly clientId: string | null;
  /** The exclusive holder's fencing token. */
  readonly token: number | null;
  /** The exclusive holder's value (null: none). */
  readonly value: string | null;
  /** ms its hold had left (owner() only). */
  readonly ttlMs: number | null;
}

/** CHECK's answer. */
export interface CheckResult {
  /** The token's hold is alive in Redis now. */
  readonly current: boolean;
  /** Not current: the current holder's token (null: the key is free). */
  readonly token: number | null;
}

export interface ClientEvents {
  connection: [event: ConnectionEvent];
  lost: [hold: Hold, err: LockLostError];
  counter: [event: CounterEvent];
}

/**
 * One broker session over one connection, shared by every async caller of
 * the process. Requests are pipelined; replies and EVENT lines are routed to
 * the hold, wait or watch they name. A dropped connection is resumed on the
 * next broker of the list.
 */
export declare class Client extends EventEmitter {
  /** brokers: "host:port", a comma-separated list or an array (default 127.0.0.1:7711). */
  constructor(brokers?: string | readonly string[], options?: ClientOptions);
  /** Makes a client and connects it. */
  static connect(brokers?: string | readonly string[], options?: ClientOptions): Promise<Client>;
  /** Connects to the first broker that answers; rejects with VersionError, NotAuthenticatedError or ConnectError. */
  connect(): Promise<this>;

  /** The session's client-id. */
  readonly clientId: string | null;
  /** The broker's version, from HELLO ("1.2.0"). */
  readonly version: string | null;
  /** host:port of the broker in use. */
  readonly broker: string;
  readonly connected: boolean;
  readonly closed: boolean;

  /**
   * Takes key. Rejects with LockBusyError (one try: held by another),
   * LockTimeoutError (the wait ran out), WaitCancelledError (the signal
   * aborted), UsageError (inside withLock() of the same key and client), or
   * the broker's error (DeniedError, UnavailableError, ...). Callers of one
   * client exclude each other per key: a second caller waits for the first
   * to release.
   */
  lock(key: string, options?: LockOptions): Promise<Hold>;
  /** Runs fn under key and releases it after; rejects with LockLostError if the hold was lost meanwhile. */
  withLock<T>(key: string, fn: (hold: Hold) => T | Promise<T>): Promise<T>;
  withLock<T>(key: string, options: LockOptions, fn: (hold: Hold) => T | Promise<T>): Promise<T>;
  /** Runs for leader of key with value (the leader's address): resolves once leading. */
  elect(key: string, value: string, options?: ElectOptions): Promise<Hold>;
  /** Who holds key (OWNER ... VALUE). */
  owner(key: string): Promise<KeyState>;
  /** Whether token's hold of key is alive in Redis now (CHECK). */
  check(key: string, token: number): Promise<CheckResult>;
  /** Watches key: its state at once, then every change (WATCH). */
  watch(key: string): Promise<Watch>;
  /** The keys the session holds (HELD). */
  held(): Promise<string[]>;
  ping(): Promise<void>;
  /** The broker's counters (STATS). */
  stats(): Promise<Record<string, string>>;
  /** A snapshot of this client's own counters. */
  counters(): Counters;
  /** Ends the session (QUIT): the broker releases what it held. The end of the process does the same. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;

  on<K extends keyof ClientEvents>(event: K, listener: (...args: ClientEvents[K]) => void): this;
  once<K extends keyof ClientEvents>(event: K, listener: (...args: ClientEvents[K]) => void): this;
  off<K extends keyof ClientEvents>(event: K, listener: (...args: ClientEvents[K]) => void): this;
}

/** A hold of a key. */
export declare class Hold {
  private constructor();
  readonly key: string;
  /** The fencing token: send it with every write the hold protects. */
  readonly token: number;
  readonly kind: 'exclusive' | 'shared' | 'semaphore';
  readonly limit: number | null;
  readonly value: string | null;
  /** True once the hold is known lost. */
  readonly lost: boolean;
  readonly lostError: LockLostError | null;
  readonly released: boolean;
  /** Aborted, with the LockLostError as its reason, when the hold is lost. */
  readonly signal: AbortSignal;
  /** fn(err) when the hold is lost (soon, if it is already). */
  onLost(fn: (err: LockLostError) => void): this;
  /** RELEASE; linger: ms the key stays taken after. Rejects with LockLostError for a lost hold. */
  release(options?: { linger?: number | null }): Promise<void>;
  /** Sets the key's TTL in Redis (ttl, or the current one): resolves with the TTL set. */
  renew(options?: { ttl?: number | null }): Promise<number>;
  /** Replaces the hold's value (PROCLAIM). */
  proclaim(value: string): Promise<void>;
  /** Releases the hold unless it was; rejects with its LockLostError if it was lost. */
  [Symbol.asyncDispose](): Promise<void>;
}

export interface WatchEvents {
  change: [state: KeyState];
  close: [];
  /** The broker refused the watch (a failover to a broker without WATCH): it ended. */
  error: [err: LockBrokerError];
}

/** A watched key. */
export declare class Watch extends EventEmitter implements AsyncIterable<KeyState> {
  private constructor();
  readonly key: string;
  /** The latest state (null before the first). */
  readonly state: KeyState | null;
  /** The exclusive holder's value: the elected leader's (null: nobody). */
  readonly leader: string | null;
  /** What ended the watch (the broker refused WATCH); null while it runs. */
  readonly error: LockBrokerError | null;
  readonly closed: boolean;
  /** The first state, the current one included, for which predicate is true. */
  wait(predicate?: (state: KeyState) => boolean, options?: { timeout?: number | null; signal?: AbortSignal | null }): Promise<KeyState>;
  /** The current state (if known), then each change, until close(). */
  [Symbol.asyncIterator](): AsyncIterator<KeyState>;
  /** Stops watching (UNWATCH once no Watch of the key is left). */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;

  on<K extends keyof WatchEvents>(event: K, listener: (...args: WatchEvents[K]) => void): this;
  once<K extends keyof WatchEvents>(event: K, listener: (...args: WatchEvents[K]) => void): this;
  off<K extends keyof WatchEvents>(event: K, listener: (...args: WatchEvents[K]) => void): this;
}

/** The state of a free key. */
export declare const FREE: KeyState;

/**
 * Base of every error this library rejects with. The message says what happened to which
 * key ('orders:42: the lock was lost (token 1795805345549156)'); code: the protocol's word.
 */
export declare class LockBrokerError extends Error {
  constructor(message?: string, options?: { key?: string | null; reply?: string | null; request?: string | null; cause?: unknown });
  readonly code: string;
  /** The key it is about (null: none). */
  readonly key: string | null;
  /** The broker's line ('ERR ...', 'EVENT LOST ...', 'BUSY'; null: none). */
  readonly reply: string | null;
  /** The request line it answered (null: none). */
  readonly request: string | null;
}
/** An `ERR <CODE> <text>` reply. */
export declare class BrokerError extends LockBrokerError {
  constructor(text?: string, request?: string | null, options?: { key?: string | null; reply?: string | null; message?: string | null; cause?: unknown });
  /** The broker's words after the code (for people). */
  readonly text: string;
}
export declare class BadCommandError extends BrokerError { readonly code: 'BADCMD'; }
export declare class BadArgumentError extends BrokerError { readonly code: 'BADARG'; }
export declare class LineTooLongError extends BrokerError { readonly code: 'TOOLONG'; }
export declare class NotAuthenticatedError extends BrokerError { readonly code: 'NOAUTH'; }
export declare class NotHeldError extends BrokerError { readonly code: 'NOTHELD'; }
/** The hold is gone (EVENT LOST, ERR LOST, or not kept across a reconnect): stop using the resource. */
export declare class LockLostError extends BrokerError {
  readonly code: 'LOST' | 'SESSION';
  /** The lost hold's fencing token (null: unknown). */
  readonly token: number | null;
}
export declare class UnavailableError extends BrokerError { readonly code: 'UNAVAILABLE'; }
export declare class LimitExceededError extends BrokerError { readonly code: 'LIMIT'; }
/** LimitExceededError's name before 0.2: the same class. */
export declare const LimitError: typeof LimitExceededError;
export type LimitError = LimitExceededError;
export declare class NoSessionError extends BrokerError { readonly code: 'NOSESSION'; }
export declare class DeniedError extends BrokerError { readonly code: 'DENIED'; }
/** The key was not granted. */
export declare class NotAcquiredError extends LockBrokerError {}
/** One try, and someone else holds the key (BUSY). */
export declare class LockBusyError extends NotAcquiredError { readonly code: 'BUSY'; }
/** The wait ran out (its wait, or its signal timed out: cause is the signal's reason). */
export declare class LockTimeoutError extends NotAcquiredError { readonly code: 'TIMEOUT'; }
/** The caller's signal aborted the wait (name 'AbortError', cause: the signal's reason). */
export declare class WaitCancelledError extends LockBrokerError { readonly code: 'ABORT_ERR'; }
/** Misuse: a second take inside withLock() of the key, a hold released twice, a closed client. */
export declare class UsageError extends LockBrokerError { readonly code: 'USAGE'; }
/** The client was closed (close(), or the end of the process): a call after it, or a wait it ended. */
export declare class ClosedError extends UsageError {}
/** No broker answered. */
export declare class ConnectError extends LockBrokerError { readonly code: 'CONNECT'; }
/** The broker speaks a protocol older than 1.2. */
export declare class VersionError extends LockBrokerError { readonly code: 'VERSION'; }
/** The session could not be resumed: its holds are gone. */
export declare class SessionLostError extends LockLostError { readonly code: 'SESSION'; }
/** The broker sent a line this library cannot read. */
export declare class ProtocolError extends LockBrokerError { readonly code: 'PROTOCOL'; }
