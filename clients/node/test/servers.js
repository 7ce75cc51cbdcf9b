'use strict';
// The shared conformance helper (tests/conformance/servers.py), driven over
// its JSON lines: the Redis and brokers of the integration tests and of the
// conformance runner. The helper stops everything itself when this process
// ends, however it ends (its standard input closes).

const { spawn } = require('child_process');
const fs = require('fs');
const path = require('path');

const REPO = path.resolve(__dirname, '..', '..', '..');
const HELPER = path.join(REPO, 'tests', 'conformance', 'servers.py');
const TRANSCRIPTS = path.join(REPO, 'tests', 'conformance');
if (!process.env.LOCKBROKERD) process.env.LOCKBROKERD = path.join(REPO, 'build', 'lockbrokerd');

class HelperError extends Error {}

class Servers {
  constructor() {
    this.proc = spawn('python3', [HELPER], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.proc.stdout.setEncoding('utf8');
    this.buf = '';
    this.lines = [];
    this.waiters = [];
    this.exited = false;
    this.proc.stdout.on('data', (chunk) => {
      this.buf += chunk;
      const parts = this.buf.split('\n');
      this.buf = parts.pop();
      for (const line of parts) {
        const w = this.waiters.shift();
        if (w) w.resolve(line);
        else this.lines.push(line);
      }
    });
    this.proc.on('exit', (code) => {
      this.exited = true;
      for (const w of this.waiters.splice(0)) w.reject(new HelperError(`the helper exited (${code})`));
    });
    this.ready = this.readLine().then((line) => {
      if (!JSON.parse(line).ready) throw new HelperError(`the helper did not start: ${line}`);
    });
  }

  readLine() {
    if (this.lines.length) return Promise.resolve(this.lines.shift());
    if (this.exited) return Promise.reject(new HelperError('the helper exited'));
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  // One request: resolves with the reply, rejects with HelperError when
  // the helper answered ok false.
  async request(req) {
    await this.ready;
    this.proc.stdin.write(`${JSON.stringify(req)}\n`);
    const reply = JSON.parse(await this.readLine());
    if (!reply.ok) throw new HelperError(reply.error || JSON.stringify(reply));
    return reply;
  }

  async step(line) {
    const reply = await this.request({ op: 'step', line });
    if (reply.skip) throw new HelperError(reply.skip); // an older helper's needs: no skips
    return reply;
  }

  reset() { return this.request({ op: 'reset' }); }

  broker(name) { return this.request({ op: 'broker', name }); }

  redis() { return this.request({ op: 'redis' }); }

  async address(name, tls = false) {
    const info = await this.broker(name);
    return `127.0.0.1:${tls ? info.tls_port : info.port}`;
  }

  // TLS options trusting the helper's CA.
  async tlsOptions(name) {
    return { ca: fs.readFileSync((await this.broker(name)).ca) };
  }

  // A broker of this branch may speak 1.1 until protocol 1.2 lands: then
  // (and only then) the library is told to accept it, so the 1.1 parts are
  // tested now and the version check stays real on a 1.2 broker.
  async allowOld(name) {
    const [major, minor] = (await this.broker(name)).version.split('.').map(Number);
    if (major < 1 || (major === 1 && minor < 2)) process.env.LOCKBROKER_ALLOW_OLD = '1';
  }

  async speaks12(name = 'b1') {
    const [major, minor] = (await this.broker(name)).version.split('.').map(Number);
    return major > 1 || (major === 1 && minor >= 2);
  }

  async close() {
    if (this.exited) return;
    try {
      await this.request({ op: 'quit' });
    } catch (e) {
      // it exits all the same once its input ends
    }
    this.proc.stdin.end();
    await new Promise((resolve) => {
      if (this.exited) resolve();
      else this.proc.once('exit', resolve);
    });
  }
}

module.exports = { Servers, HelperError, REPO, TRANSCRIPTS };
