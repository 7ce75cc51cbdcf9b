#!/usr/bin/env node
'use strict';
// bench_pairs.js - acquire+release pairs per second through ONE client
// object, against a broker as `make bench` runs it (default options,
// log_level warn, its own Redis without persistence), started by the
// conformance helper.
//
//     node clients/node/test/bench_pairs.js [--seconds 5] [--rounds 3]
//
// Rows: one caller, and 8 callers on 8 keys (their requests pipelined on
// the one connection), with the client's default grace session (each
// grant is also written to the session's record in Redis) and without
// one (grace 0). Each pair is lock(key, { wait: 0 }) then release(), each
// awaiting its reply. Prints the best of the rounds per row (the machine
// is shared).

const { performance } = require('perf_hooks');
const { Client } = require('..');
const { Servers } = require('./servers');

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}

async function pairs(addr, callers, ms, options) {
  const c = await Client.connect(addr, options);
  try {
    const end = performance.now() + ms;
    const t0 = performance.now();
    const counts = await Promise.all(Array.from({ length: callers }, async (_, i) => {
      let n = 0;
      while (performance.now() < end) {
        await (await c.lock(`bench:${i}`, { wait: 0 })).release();
        n++;
      }
      return n;
    }));
    return counts.reduce((a, b) => a + b, 0) / ((performance.now() - t0) / 1000);
  } finally {
    await c.close();
  }
}

async function main() {
  const seconds = arg('seconds', 5);
  const rounds = arg('rounds', 3);
  const servers = new Servers();
  try {
    await servers.reset();
    await servers.step('broker b1 log_level=warn');
    await servers.allowOld('b1');
    const addr = await servers.address('b1');
    const rows = [
      ['1 caller (grace 30 s, the default)', 1, {}],
      ['8 callers on 8 keys (grace 30 s)', 8, {}],
      ['1 caller (grace 0)', 1, { grace: 0 }],
      ['8 callers on 8 keys (grace 0)', 8, { grace: 0 }],
    ];
    for (const [title, callers, options] of rows) {
      let best = 0;
      for (let r = 0; r < rounds; r++) best = Math.max(best, await pairs(addr, callers, seconds * 1000, options));
      console.log(`${title.padEnd(40)} ${best.toFixed(0).padStart(8)} pairs/s`);
    }
  } finally {
    await servers.close();
  }
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
