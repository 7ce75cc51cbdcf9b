// Type-checked by `make typecheck` (tsc --noEmit, strict): the API as an
// application writes it, against index.d.ts. It is never run.

import { readFileSync } from 'fs';
import {
  Client, ConnectionEvent, Hold, KeyState, LockBusyError, LockLostError, LockTimeoutError,
  WaitCancelledError, Watch, CheckResult, FREE, BrokerError, ClosedError, Counters, CounterEvent,
  LimitError, LimitExceededError,
} from 'lockbroker';

async function app(): Promise<number> {
  const client: Client = await Client.connect(['10.0.0.11:7711', '10.0.0.12:7711'], {
    grace: 30000,
    auth: 's3cret',
    tls: { ca: readFileSync('ca.crt') },
    name: 'billing-worker-3',
    pingInterval: 2000,
    onEvent: (ev: ConnectionEvent) => console.log(ev.kind, ev.broker, ev.detail),
    onCounter: (ev: CounterEvent) => console.log(ev.name, ev.key, ev.seconds),
  });
  client.on('counter', (ev) => { const k: CounterEvent['name'] = ev.name; void k; });
  const counted: Counters = client.counters();
  const perWait: number = counted.waitSecondsTotal / counted.waits;
  client.on('connection', (ev) => { const k: ConnectionEvent['kind'] = ev.kind; void k; });
  client.on('lost', (hold, err) => console.log(hold.key, err.code));

  const hold: Hold = await client.lock('orders:42', { wait: 5000, ttl: 10000, signal: AbortSignal.timeout(6000) });
  const token: number = hold.token;
  hold.signal.addEventListener('abort', () => console.log(hold.signal.reason));
  hold.onLost((err: LockLostError) => console.log(err.text));
  const ttl: number = await hold.renew({ ttl: 20000 });
  await hold.release({ linger: 1000 });

  const n: number = await client.withLock('jobs:1', { shared: true }, async (h) => h.token + ttl);
  const s: string = await client.withLock('jobs:2', (h) => h.key);

  try {
    await client.lock('x', { wait: 0, limit: 3 });
  } catch (e) {
    if (e instanceof LockBusyError || e instanceof LockTimeoutError) console.log(e.code);
    if (e instanceof WaitCancelledError) console.log(e.cause);
    if (e instanceof BrokerError) console.log(e.text, e.request, e.reply, e.key);
    if (e instanceof LockLostError) console.log(e.token);
    if (e instanceof ClosedError || e instanceof LimitExceededError || e instanceof LimitError) console.log(e.message);
  }

  const leader: Hold = await client.elect('svc:leader', '10.0.0.7:8080');
  await leader.proclaim('10.0.0.7:9090');
  const w: Watch = await client.watch('svc:leader');
  const st: KeyState = await w.wait((x) => x.kind !== 'free', { timeout: 3000 });
  const who: string | null = w.leader;
  w.on('change', (x: KeyState) => console.log(x.holders, x.limit, x.clientId, x.value));
  w.on('error', (err) => console.log(err.code, w.error && w.error.reply));
  for await (const x of w) {
    if (x === FREE) break;
  }
  await w.close();

  const owner: KeyState = await client.owner('orders:42');
  const check: CheckResult = await client.check('orders:42', token);
  const held: string[] = await client.held();
  const stats: Record<string, string> = await client.stats();
  await client.ping();
  await hold[Symbol.asyncDispose]();
  await client[Symbol.asyncDispose]();
  console.log(n, s, st, who, owner.ttlMs, check.current, held, stats.version, client.clientId, client.version, perWait);
  return token;
}

void app;
