'use strict';
// The end of an app that never called close(), in real child processes
// against a real broker (default grace): a script that runs out of work
// exits (an idle client's socket does not keep it alive) and its session
// ends with QUIT ('beforeExit'); process.exit() and an uncaught exception
// write QUIT from the 'exit' event; the keys are free within a second. A
// script that waits for a lock is kept alive until it has it. A process
// killed with SIGKILL sends nothing: its keys are free once the default
// grace has run out, not before.

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('child_process');
const path = require('path');
const lb = require('../..');
const { Env, sleep } = require('./env');

const env = new Env();
const LIB = path.resolve(__dirname, '..', '..');
const GRACE = 5000; // the library's default (README)

// A node running body (ADDR: the broker's address) with the library as
// lb; it prints "held" once it holds the key "k". Resolves with the child
// once it has said so.
async function child(t, body, { esm = false } = {}) {
  const [addr] = await env.addrs();
  const head = esm ? `import * as lb from ${JSON.stringify(path.join(LIB, 'index.mjs'))};\n`
    : `const lb = require(${JSON.stringify(LIB)});\n`;
  const args = esm ? ['--input-type=module', '-e'] : ['-e'];
  const p = spawn(process.execPath, [...args, `${head}const ADDR = ${JSON.stringify(addr)};\n${body}`],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  p.exited = new Promise((resolve) => { p.on('exit', (code, signal) => resolve({ code, signal, at: Date.now() })); });
  t.after(() => { if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL'); });
  let out = '';
  let err = '';
  p.stderr.on('data', (d) => { err += d; });
  await new Promise((resolve, reject) => {
    p.stdout.on('data', (d) => {
      out += d;
      if (out.includes('held\n')) resolve();
    });
    p.exited.then(() => reject(new Error(`the child ended before it held the key: ${out}${err}`)));
  });
  return p;
}

const TAKE_K = `
const c = await lb.Client.connect(ADDR);
const hold = await c.lock('k');
console.log('held');
`;

// The key is free within a second of the child's end, and the child ended
// by itself within 5 s.
async function freeWithinASecondOfItsEnd(t, body, options) {
  const other = await env.client(['b1'], { grace: 0 });
  const p = await child(t, body, options);
  const waiting = other.lock('k', { wait: 10000 });
  const end = await Promise.race([p.exited, sleep(5000).then(() => null)]);
  assert.ok(end, 'the child did not end by itself');
  await waiting;
  assert.ok(Date.now() - end.at < 1000, `the key was free ${Date.now() - end.at} ms after the child ended`);
  return end;
}

test('a script that runs out of work exits, and its locks are free at once (beforeExit: QUIT)', async (t) => {
  await env.fresh();
  const end = await freeWithinASecondOfItsEnd(t, `(async () => {${TAKE_K}})();`);
  assert.equal(end.code, 0);
});

test('the same from an ES module', async (t) => {
  await env.fresh();
  await freeWithinASecondOfItsEnd(t, TAKE_K, { esm: true });
});

test('process.exit() right after taking a lock: QUIT written from the exit event', async (t) => {
  await env.fresh();
  const end = await freeWithinASecondOfItsEnd(t, `(async () => {${TAKE_K} process.exit(3); })();`);
  assert.equal(end.code, 3);
});

test('an uncaught exception: QUIT written from the exit event', async (t) => {
  await env.fresh();
  const end = await freeWithinASecondOfItsEnd(t, `(async () => {${TAKE_K}
    setTimeout(() => { throw new Error('the app fails'); }, 10);
    setInterval(() => {}, 1000); // work that would go on
  })();`);
  assert.equal(end.code, 1);
});

test('a script waiting for a lock is kept alive until it has it, then ends and frees it', async (t) => {
  await env.fresh();
  const holder = await env.client();
  const blocking = await holder.lock('w');
  const p = await child(t, `(async () => {${TAKE_K}
    await c.lock('w', { wait: 20000 });
    console.log('got w');
  })();`);
  let said = '';
  p.stdout.on('data', (d) => { said += d; });
  await sleep(1500);
  assert.equal(p.exitCode, null, 'the waiting script is still running');
  await blocking.release();
  const end = await p.exited;
  assert.equal(end.code, 0);
  assert.match(said, /got w/);
  const other = await env.client();
  await (await other.lock('w', { wait: 1000 })).release();
  await (await other.lock('k', { wait: 1000 })).release();
});

test('SIGKILL: nothing is sent; the key is free once the default grace ran out, not before', async (t) => {
  await env.fresh();
  const other = await env.client(['b1'], { grace: 0 });
  const p = await child(t, `(async () => {${TAKE_K} setInterval(() => {}, 1000); })();`);
  p.kill('SIGKILL');
  const { at } = await p.exited;
  await assert.rejects(other.lock('k', { wait: GRACE - 1000 }), lb.LockTimeoutError);
  await other.lock('k', { wait: 3000 });
  const took = Date.now() - at;
  assert.ok(took > GRACE - 500 && took < GRACE + 1500, `free after ${took} ms`);
});
