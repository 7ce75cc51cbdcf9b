#!/usr/bin/env node
// lock.js - take a lockbroker lock, use its fencing token, release it.
//
// usage: lock.js [--tls [--cacert FILE] [--cert FILE --key FILE]]
//                [--shared | --limit N] [KEY [WAIT_MS]]   (defaults: example 5000)
// --shared takes a read hold that other --shared runs share; --limit N takes
// one of N permits of a semaphore (protocol 1.1).
// --tls connects with TLS (to the broker's tls_port), verifying the broker's
// certificate against --cacert (default: node's CAs) and the host name or IP;
// --cert and --key send a client certificate (tls_auth_clients).
// The broker is $LOCKBROKER_HOST:$LOCKBROKER_PORT (127.0.0.1:7711).
// Exits 0 when done, 75 if the lock stayed busy, 1 on an error.
'use strict';
const fs = require('fs');
const net = require('net');
const tls = require('tls');

const args = process.argv.slice(2);
let tlsOptions = null;             // null: plain TCP
while (['--tls', '--cacert', '--cert', '--key'].includes(args[0])) {
  const opt = args.shift();
  tlsOptions = tlsOptions || { minVersion: 'TLSv1.2' };
  if (opt !== '--tls') {
    const field = { '--cacert': 'ca', '--cert': 'cert', '--key': 'key' }[opt];
    tlsOptions[field] = fs.readFileSync(args.shift());
  }
}
let kind = '';                     // '', ' SHARED' or ' LIMIT <n>'
if (args[0] === '--shared') {
  kind = ' SHARED';
  args.shift();
} else if (args[0] === '--limit') {
  kind = ` LIMIT ${args[1]}`;
  args.splice(0, 2);
}
const key = args[0] || 'example';
const waitMs = Number(args[1] || 5000);
const host = process.env.LOCKBROKER_HOST || '127.0.0.1';
const port = Number(process.env.LOCKBROKER_PORT || 7711);

// One connection; every reply is one CRLF-terminated line, in request order.
function connect() {
  return new Promise((resolve, reject) => {
    // With TLS, tls.connect checks the broker's certificate against host
    // (a name, or an IP address in its subjectAltName).
    const sock = tlsOptions
      ? tls.connect({ host, port, servername: net.isIP(host) ? undefined : host,
        ...tlsOptions })
      : net.createConnection({ host, port });
    const lines = [];
    const waiting = [];
    let buf = '';
    let failed = null;
    const fail = (err) => {
      failed = err;
      while (waiting.length) waiting.shift().reject(err);
      reject(err);
    };
    sock.setEncoding('ascii');
    sock.setTimeout(waitMs + 10000, () => sock.destroy(new Error('broker timed out')));
    sock.on('error', fail);
    sock.on('end', () => fail(new Error('broker closed the connection')));
    sock.on('data', (chunk) => {
      buf += chunk;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i).replace(/\r$/, '');
        buf = buf.slice(i + 1);
        if (waiting.length) waiting.shift().resolve(line);
        else lines.push(line);
      }
    });
    const next = () => {
      if (lines.length) return Promise.resolve(lines.shift());
      if (failed) return Promise.reject(failed);
      return new Promise((res, rej) => waiting.push({ resolve: res, reject: rej }));
    };
    const call = (line) => { sock.write(line + '\n'); return next(); };
    sock.on(tlsOptions ? 'secureConnect' : 'connect', () => resolve({ sock, call }));
  });
}

async function main() {
  // The lock lives as long as this connection: keep it open while working.
  const { sock, call } = await connect();
  let reply = await call(`ACQUIRE ${key}${kind} WAIT ${waitMs}`);
  if (reply === 'BUSY') {
    console.error(`lock.js: ${key} is busy`);
    sock.destroy();
    return 75;
  }
  if (!reply.startsWith('OK ')) {
    console.error(`lock.js: ACQUIRE: ${reply}`);
    sock.destroy();
    return 1;
  }
  const token = BigInt(reply.split(' ')[1]);
  console.log(`acquired ${key} with fencing token ${token}`);
  // Do the work here.  Send the token with every write, so that the
  // resource can refuse a holder whose token is older than one seen.

  reply = await call(`RELEASE ${key}`);
  if (!reply.startsWith('OK')) {
    console.error(`lock.js: RELEASE: ${reply}`);
    sock.destroy();
    return 1;
  }
  console.log(`released ${key}`);
  await call('QUIT');
  sock.end();
  return 0;
}

main().then(
  (code) => { process.exitCode = code; },
  (err) => { console.error(`lock.js: ${err.message}`); process.exitCode = 1; },
);
