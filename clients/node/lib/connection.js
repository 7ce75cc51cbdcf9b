'use strict';
// One connection to one broker address, plain or TLS, with the liveness
// options Node's standard library has (TCP keepalive with its first probe
// after a few idle seconds; TCP_NODELAY: requests are small and
// pipelined). Node cannot set TCP_USER_TIMEOUT or the keepalive interval
// and count, so the client's idle PING is what finds a dead peer in
// seconds. The connection splits what it reads into lines (bounded) and
// hands each to its handler; replies(): the next reply lines of a
// handshake, read with a deadline.

const fs = require('fs');
const net = require('net');
const tls = require('tls');
const { performance } = require('perf_hooks');
const { ConnectError } = require('./errors');
const { LineSplitter } = require('./protocol');

class Connection {
  constructor(socket) {
    this.socket = socket;
    this.splitter = new LineSplitter();
    this.lastRx = performance.now();
    this.closed = false;
    this.closeReason = '';
    this.handler = null; // (line) => void, after the handshake
    this.onclose = null; // (reason) => void
    this.hsLines = []; // handshake replies not taken yet
    this.hsWaiter = null;
    this.hsEvents = null; // (line) => void: EVENT lines during the handshake
    socket.setEncoding('latin1');
    socket.on('data', (chunk) => this.received(chunk));
    socket.on('error', (err) => {
      if (!this.closeReason) this.closeReason = err.message;
    });
    socket.on('close', () => this.ended());
  }

  received(chunk) {
    this.lastRx = performance.now();
    let lines;
    try {
      lines = this.splitter.push(chunk);
    } catch (e) {
      this.destroy(e.message);
      return;
    }
    for (const line of lines) {
      if (this.closed) return;
      if (this.handler) this.handler(line);
      else this.handshakeLine(line);
    }
  }

  handshakeLine(line) {
    if (line.startsWith('EVENT ')) {
      if (this.hsEvents) this.hsEvents(line);
      return;
    }
    if (!line) return;
    this.hsLines.push(line);
    this.wakeHandshake();
  }

  wakeHandshake() {
    const w = this.hsWaiter;
    if (w) {
      this.hsWaiter = null;
      w();
    }
  }

  // The next n reply lines (EVENT lines go to hsEvents), each within
  // timeoutMs; rejects when the connection ends or a reply is late.
  async replies(n, timeoutMs) {
    const out = [];
    while (out.length < n) {
      if (this.hsLines.length) {
        out.push(this.hsLines.shift());
        continue;
      }
      if (this.closed) throw new ConnectError(`the broker closed the connection${this.closeReason ? `: ${this.closeReason}` : ''}`);
      let timer;
      const late = await new Promise((resolve) => {
        this.hsWaiter = () => resolve(false);
        timer = setTimeout(() => resolve(true), timeoutMs);
      });
      clearTimeout(timer);
      if (late) {
        this.hsWaiter = null;
        throw new ConnectError(`no answer within ${timeoutMs} ms`);
      }
    }
    return out;
  }

  write(text) {
    if (!this.closed) this.socket.write(text, 'latin1');
  }

  // Writes text before returning, when the socket takes it (the end of the
  // process: nothing queued would ever be sent). With writes still queued
  // on a plain socket, straight to its descriptor after an LF that ends a
  // line cut short.
  writeNow(text) {
    if (this.closed) return;
    const s = this.socket;
    const fd = s._handle && s._handle.fd;
    try {
      if (s.writableLength === 0 || s.encrypted || !(fd >= 0)) s.write(text, 'latin1');
      else fs.writeSync(fd, `\n${text}`);
    } catch (e) {
      // the connection is gone: the broker ends the session itself
    }
  }

  destroy(reason = 'closed by the client') {
    if (!this.closeReason) this.closeReason = reason;
    this.socket.destroy();
  }

  ended() {
    if (this.closed) return;
    this.closed = true;
    if (!this.closeReason) this.closeReason = 'the broker closed the connection';
    this.wakeHandshake();
    if (this.onclose) this.onclose(this.closeReason);
  }
}

// Connects to { host, port }; tlsOptions (an object, or null for plain
// TCP) go to tls.connect. keepAliveMs: idle time before the first
// keepalive probe.
function openConnection({ host, port }, { tlsOptions = null, connectTimeout = 5000, keepAliveMs = 5000 } = {}) {
  return new Promise((resolve, reject) => {
    let socket;
    const ready = tlsOptions ? 'secureConnect' : 'connect';
    const fail = (err) => {
      clearTimeout(timer);
      socket.destroy();
      reject(err instanceof ConnectError ? err : new ConnectError(`${host}:${port}: ${err.message}`, { cause: err }));
    };
    const timer = setTimeout(() => fail(new ConnectError(`${host}:${port}: no connection within ${connectTimeout} ms`)), connectTimeout);
    if (tlsOptions) {
      const sni = net.isIP(host) ? {} : { servername: host };
      socket = tls.connect({ host, port, ...sni, ...tlsOptions });
    } else {
      socket = net.connect({ host, port });
    }
    socket.once('error', fail);
    socket.once(ready, () => {
      clearTimeout(timer);
      socket.removeListener('error', fail);
      socket.setNoDelay(true);
      socket.setKeepAlive(true, keepAliveMs);
      resolve(new Connection(socket));
    });
  });
}

module.exports = { Connection, openConnection };
