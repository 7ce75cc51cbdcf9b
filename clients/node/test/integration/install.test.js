'use strict';
// The README's promise: packed (npm pack) and installed the documented way
// (npm install --offline of the tarball into an empty folder), the
// README's first code block runs as written against a broker on
// 127.0.0.1:7711. The broker is a real one on a free port; a relay on
// 127.0.0.1:7711 forwards to it (when 7711 is taken on this machine, the
// example runs with the broker's address put in its place instead).

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('child_process');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const { promisify } = require('util');
const { Env } = require('./env');

const run = promisify(execFile);
const PKG = path.resolve(__dirname, '..', '..');
const DEFAULT = '127.0.0.1:7711';
const env = new Env();

// 127.0.0.1:7711 -> target; rejects when the port is taken.
function relay(targetPort) {
  const server = net.createServer((a) => {
    const b = net.connect(targetPort, '127.0.0.1');
    a.pipe(b);
    b.pipe(a);
    a.on('error', () => b.destroy());
    b.on('error', () => a.destroy());
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(7711, '127.0.0.1', () => resolve(server));
  });
}

test('the README example runs as written, installed from the packed tarball', async (t) => {
  await env.fresh();
  const readme = fs.readFileSync(path.join(PKG, 'README.md'), 'utf8');
  let example = /```js\n([\s\S]*?)```/.exec(readme)[1];
  assert.ok(example.includes(DEFAULT));
  assert.ok(example.trim().split('\n').length <= 10, 'a ten-line example');

  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lbc-npm-'));
  t.after(() => fs.rmSync(tmp, { recursive: true, force: true }));
  const npmOpts = { timeout: 120000, env: { ...process.env, npm_config_cache: path.join(tmp, 'cache') } };
  const { stdout: packed } = await run('npm', ['pack', '--silent', '--pack-destination', tmp], { ...npmOpts, cwd: PKG });
  const tarball = path.join(tmp, packed.trim().split('\n').pop());
  const app = path.join(tmp, 'myapp');
  fs.mkdirSync(app);
  await run('npm', ['install', '--offline', '--no-audit', '--no-fund', tarball], { ...npmOpts, cwd: app });
  const installed = path.join(app, 'node_modules', 'lockbroker');
  for (const f of ['index.js', 'index.mjs', 'index.d.ts', 'lib/client.js', 'README.md']) {
    assert.ok(fs.existsSync(path.join(installed, f)), `${f} is in the package`);
  }
  assert.ok(!fs.existsSync(path.join(installed, 'test')), 'the tests are not');

  const addr = (await env.addrs())[0];
  let server = null;
  try {
    server = await relay(Number(addr.split(':')[1]));
  } catch (e) { // 7711 is taken here: use the address
    example = example.replace(DEFAULT, addr);
  }
  try {
    fs.writeFileSync(path.join(app, 'example.js'), example);
    const { stdout } = await run(process.execPath, ['example.js'], { cwd: app, timeout: 60000 });
    assert.match(stdout, /^holding orders:42, fencing token \d+\nreleased orders:42\n$/);
    // installed, not picked up from the source tree; ES modules get the ES
    // entry (exports: import), require the CommonJS one: the same objects
    const { stdout: where } = await run(process.execPath, ['--input-type=module', '-e',
      "import * as lb from 'lockbroker'; import { createRequire } from 'module';"
      + " const req = createRequire(process.cwd() + '/');"
      + " const cjs = req('lockbroker');"
      + " console.log(import.meta.resolve('lockbroker'), req.resolve('lockbroker'),"
      + " lb.Client === cjs.Client && lb.LockLostError === cjs.LockLostError && lb.default === cjs,"
      + " Object.keys(cjs).every((k) => lb[k] === cjs[k]))"], { cwd: app });
    assert.equal(where.trim(),
      `file://${path.join(installed, 'index.mjs')} ${path.join(installed, 'index.js')} true true`);
  } finally {
    if (server) server.close();
  }
});

test("the README's package.json dependency installs the packed tarball offline", async (t) => {
  const readme = fs.readFileSync(path.join(PKG, 'README.md'), 'utf8');
  const install = readme.split('## Install')[1].split('\n## ')[0];
  const manifest = JSON.parse(/```json\n([\s\S]*?)```/.exec(install)[1]);
  const spec = manifest.dependencies.lockbroker;
  assert.match(spec, /^file:.*\/clients\/node\/build\/lockbroker-[\d.]+\.tgz$/);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lbc-dep-'));
  t.after(() => fs.rmSync(tmp, { recursive: true, force: true }));
  const npmOpts = { timeout: 120000, env: { ...process.env, npm_config_cache: path.join(tmp, 'cache') } };
  const { stdout: packed } = await run('npm', ['pack', '--silent', '--pack-destination', tmp], { ...npmOpts, cwd: PKG });
  const tarball = packed.trim().split('\n').pop();
  assert.equal(tarball, path.basename(spec), 'the README names the tarball make builds');
  const app = path.join(tmp, 'app');
  fs.mkdirSync(app);
  // the README's line, its path pointing at this tarball
  manifest.name = 'app';
  manifest.dependencies.lockbroker = `file:../${tarball}`;
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify(manifest));
  await run('npm', ['install', '--offline', '--no-audit', '--no-fund'], { ...npmOpts, cwd: app });
  const { stdout } = await run(process.execPath, ['-e', "console.log(typeof require('lockbroker').Client)"], { cwd: app });
  assert.equal(stdout.trim(), 'function');
});
