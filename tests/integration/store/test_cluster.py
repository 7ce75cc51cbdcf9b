"""
test_cluster.py - Redis Cluster mode (--redis_cluster <seed host:port,...>).

Every Redis here is a real process (topology.ClusterTopology): 3 masters +
3 replicas on loopback, cluster-node-timeout 1000,
cluster-require-full-coverage no, made with `redis-cli --cluster create`.
Brokers run with --redis_cluster <all six nodes> (no -r) and
--failover_lock_delay_ms 1000; grants of keys that may be free right
after a master change use WAIT, so that a lock delay postpones them
instead of refusing them.  Lock keys are <prefix>:lock:<name> on the
master that serves their slot; the tests find that master with CLUSTER
KEYSLOT / CLUSTER SLOTS and read the key there.  They rely on no fence
key name: only on tokens strictly increasing per lock name.  Measured
here: cluster ready 2.2 s after start, replica promoted 2.2 s after
kill -9 of its master, survivor in cluster_state:fail 1.5 s after two
masters were SIGSTOPped (bounds below are several times that).

What each test guards:

  TestCheckConfig
    test_cluster_exclusive_with_redis_and_sentinels  -t exits 2 (naming
        redis_cluster, not "unknown") for --redis_cluster with -r, with
        --redis, with --redis_sentinels, and the same in a conf file;
        start-up refuses it the same way before listening; malformed seed
        lists exit 2; --redis_cluster alone is "configuration OK".

  TestSharedCluster (one cluster for the class; each test leaves it
  healthy: resharding moves a slot, the map is re-read by every helper)
    test_keys_spread_over_all_masters  60 plain names plus hash-tagged
        ones, held by 6 sessions on one broker: they land on all 3
        masters, each key on the master serving its slot with the
        session's <client-id>:<token>, a <prefix>:fence:* counter in that
        slot (on that master) is at least the token; redis_nodes=3; a second
        broker gets BUSY for each and OWNER names the holder; RELEASE
        removes every key from its master and the second broker can then
        take them, with greater tokens.
    test_discovery_from_any_seed   a broker whose first seed is a dead
        port and whose only live seed is a replica still comes up, finds
        all 3 masters and grants on each.
    test_brokers_exclude_and_wake_each_other  for a name on each master:
        a lock held on one broker is BUSY on the other; a waiter on the
        other broker is not answered before the release, and is answered
        OK within 500 ms of it, in both directions; while it waits 1 s,
        the waiting broker sends the key's master no more than a few
        calls naming the key (MONITOR, filtered by the broker's own
        connections: the waiter is woken, not polling Redis).
    test_wakeups_stay_in_the_shard  for a name on each master, both
        brokers SSUBSCRIBE its slot's channels <prefix>:released:{tag}
        and <prefix>:wanted:{tag} (tag as daemon/slot.c computes it) on
        that master and no other; a release on one broker wakes the other
        broker's waiter; no node has a classic subscriber to
        <prefix>:released or <prefix>:wanted.
    test_tokens_increase_under_contention  4 sessions on 2 brokers take
        turns on 3 names (one per master): holds seen by the clients never
        overlap, and tokens strictly increase per name in grant order.
    test_slot_move_learnt_from_moved  a slot with a held lock moved while
        no client talks: the holder renews (the broker follows -MOVED),
        OWNER from the other broker names it, the key is on the new
        master, the slot's next token exceeds the last one before the
        move; both brokers count the move in redis_map_changes and log a
        "slot map" line within 3 s.
    test_resharding_while_clients_work  a slot holding 3 held locks (one
        with a 2 s TTL, renewed through the move), a same-broker and a
        cross-broker waiter, and two workers (one per broker)
        acquiring/releasing 3 other names of that slot, is migrated to
        another master by hand while the workers go on: SETSLOT
        IMPORTING/MIGRATING (free names get -TRYAGAIN: their slot's
        counter is on the source, their key is not), then two held lock
        keys MIGRATEd (RENEW/OWNER of them get -ASK; RENEW/OWNER of the
        third are served by the source; all answer OK at once and
        redis_redirects grows), then the rest and SETSLOT NODE (-MOVED).
        No ERR to anyone (retries and redirections are the broker's), no
        lock lost (no EVENT LOST, RENEW OK, OWNER from the other broker
        names the holder, key on the destination, none left on the
        source), waiters get the lock on release, client-seen holds never
        overlap and tokens strictly increase per name across the move;
        last, redis_map_changes and "slot map" log lines grow on both
        brokers.
    test_fenced_writes_in_the_lock_slot  for {tag}ged names on every
        master: SETIF (PX, KEEPTTL) and DELIF through either broker write
        the data key with the lock's {tag} on the slot's master (a plain
        GET there reads it), a stale token writes nothing, and a data key
        of another slot is ERR BADARG naming the slot rule.
    test_round_trips_per_master_on_metrics  /metrics has one
        lockbroker_redis_rtt_seconds series per master (node="ip:port",
        the masters CLUSTER SLOTS names); a grant and a release of a name
        count 2-6 round trips on its slot's master and none elsewhere.

  TestFailover (a fresh cluster)
    test_master_killed_replica_promoted  kill -9 of a master while
        sessions (EVENTS ON) on two brokers hold several names in its
        slots and others wait on them cross-broker: a holder on another
        master renews (2 s TTL) and a free key there is granted and
        released throughout, each within 1 s; requests pipelined into the
        outage get exactly one reply each (OK or ERR UNAVAILABLE); both
        brokers apply the new map (redis_map_changes grows) and reach
        redis_nodes=3; then every
        replicated lock is still held (RENEW OK, key on the new master
        with its value, OWNER from the other broker) and any lock a
        session lost (the 1 s TTL one may be) was announced (EVENT LOST
        / ERR LOST); waiters are not answered while their holder keeps
        the lock and get it on release, woken within 1 s, with tokens
        above the holder's; new grants for the same names exceed every
        earlier token for the name (the counter is per slot: tokens are
        ordered per name only).

  TestClusterDown (a fresh cluster per test)
    test_majority_of_masters_paused  two of three masters SIGSTOPped (they
        keep their connections, silent), the survivor in
        cluster_state:fail: ACQUIRE (with and without WAIT) and OWNER of
        names on all three masters (one session each, pipelined) answer
        ERR UNAVAILABLE, each within 4 s of the reply before it (5.5 s
        with WAIT 1500), never OK or BUSY, never a hang; PING, STATS and
        HELD still answer; after SIGCONT and cluster_state:ok, ACQUIRE
        works on every master with tokens above the earlier ones, and the
        lock held on the survivor throughout is still held (no EVENT
        LOST, RENEW OK, OWNER, its key and value).
    test_majority_of_masters_killed  the same with kill -9 (connections
        refused; no replica can be elected without a majority), then the
        two masters restarted empty with their nodes.conf: ERR
        UNAVAILABLE while down, grants on every master after, with tokens
        above those granted before although two masters lost their
        counters.
"""

import os
import re
import shutil
import socket
import tempfile
import threading
import time
import unittest
import uuid

import harness
from harness import Broker, BrokerTestCase, parse_stats, wait_until
from topology import (ClusterTopology, cli, crc16, hash_slot, owner_in,
                      split_addr)
from test_sentinel import Session, run  # replies apart from EVENT lines
from test_metrics import http_req, parse_metrics
from test_lua_multi import generated  # the library embed.sh makes

DELAY_MS = 1000             # --failover_lock_delay_ms for these tests
GRANT_WAIT_MS = 5000        # WAIT of grants that may meet a lock delay
FAILOVER_S = 15.0           # kill -9 until promoted (measured 2.2 s)
HANDOFF_MS = 500            # release on one broker -> waiter on another
DOWN_REPLY_MS = 4000        # ERR UNAVAILABLE while the cluster is down
MAX_TOKEN = 2 ** 53 - 1
SEEDS_EXAMPLE = "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"
TOKEN_RE = re.compile(r"OK ([0-9]+)")

_shared = None


def shared_cluster():
    """The module's cluster, started on first use, checked healthy before
    each use."""
    global _shared
    if _shared is None or _shared.closed:
        _shared = ClusterTopology()
    _shared.wait_ready(20.0)
    return _shared


def tearDownModule():
    global _shared
    if _shared is not None:
        _shared.close()
        _shared = None


def slot_tag(slot, _memo={}):
    """The broker's tag for slot (daemon/slot.c): the first base-36
    string, shortest first, whose CRC16 lands in slot."""
    if not _memo:
        import itertools
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"
        for n in range(1, 5):
            for t in itertools.product(digits, repeat=n):
                t = "".join(t)
                _memo.setdefault(crc16(t) % 16384, t)
            if len(_memo) == 16384:
                break
    return _memo[slot]


def tcp_ports_of(pid):
    """The local ports of the TCP sockets process pid has open (read from
    /proc): the source ports of its connections, as Redis sees them."""
    inodes = set()
    fds = "/proc/%d/fd" % pid
    for fd in os.listdir(fds):
        try:
            link = os.readlink(os.path.join(fds, fd))
        except OSError:
            continue            # closed meanwhile
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            col = row.split()
            if len(col) > 9 and col[9] in inodes:
                ports.add(int(col[1].rsplit(":", 1)[1], 16))
    return ports


MONITOR_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


class KeyMonitor:
    """MONITOR on one Redis, for a window: it opens when the constructor
    returns (Redis said OK: later commands are shown); stop() closes it
    with an ECHO of a unique word on another connection and returns what
    ran in between, as (client "ip:port" or "lua", [command, args...])
    pairs.  Commands a script runs show as "lua"; the script call itself
    (EVALSHA ...) shows with its caller's address and arguments."""

    LINE = re.compile(r"\A[0-9.]+ \[[0-9]+ ([^\]]+)\] (.*)\Z", re.S)

    def __init__(self, addr):
        self.addr = addr
        self.sock = socket.create_connection(split_addr(addr), timeout=5.0)
        self.sock.sendall(harness._resp_encode(["MONITOR"]))
        self.reader = harness._RespReader(self.sock)
        r = self.reader.reply()
        if r != "OK":
            self.sock.close()
            raise AssertionError("MONITOR on %s answered %r" % (addr, r))

    def stop(self):
        mark = "lbt-monitor-end-" + uuid.uuid4().hex
        cli(self.addr, "ECHO", mark)
        out = []
        try:
            while True:
                r = self.reader.reply()
                if not isinstance(r, str):
                    raise AssertionError("MONITOR on %s sent %r"
                                         % (self.addr, r))
                m = self.LINE.match(r)
                if m is None:
                    raise AssertionError("MONITOR line %r" % r)
                args = MONITOR_ARG.findall(m.group(2))
                if args[:2] == ["ECHO", mark]:
                    return out
                out.append((m.group(1), args))
        finally:
            self.sock.close()


def key_calls(calls, key, ports):
    """The commands (scripts included) in calls, as KeyMonitor.stop()
    returns them, that clients on these local ports sent naming key."""
    return [args for who, args in calls
            if who != "lua" and int(who.rsplit(":", 1)[1]) in ports and
            key in args[1:]]


class Churn:
    """Worker threads taking turns on names: ACQUIRE name WAIT, then
    RELEASE.  Each hold is recorded as seen by its client: (name, start =
    OK received, end = RELEASE about to be sent, token, who, phase).  A
    client-side interval lies inside the real hold, so sorted by start the
    tokens of one name must strictly increase and the intervals must not
    overlap.  Every thread is bounded by `rounds` and `max_s`."""

    def __init__(self, wait_ms=5000, rounds=200, max_s=25.0):
        self.wait_ms = wait_ms
        self.rounds = rounds
        self.max_s = max_s
        self.holds = []
        self.errors = []
        self.stop = threading.Event()
        self.phase = "before"
        self.threads = []
        self.done = {}

    def start(self, sess, names):
        t = threading.Thread(target=self._loop, args=(sess, names),
                             daemon=True, name="churn-" + sess.name)
        self.done[sess.name] = 0
        self.threads.append(t)
        t.start()

    def _loop(self, sess, names):
        deadline = time.monotonic() + self.max_s
        try:
            for i in range(self.rounds):
                if self.stop.is_set() or time.monotonic() > deadline:
                    return
                name = names[i % len(names)]
                phase = self.phase
                line = "ACQUIRE %s WAIT %d" % (name, self.wait_ms)
                r = sess.req(line, timeout=self.wait_ms / 1000.0 + 10)
                start = time.monotonic()
                m = TOKEN_RE.fullmatch(r)
                if not m:
                    self.errors.append((sess.name, phase, line, r))
                    continue
                end = time.monotonic()
                r2 = sess.req("RELEASE " + name, timeout=10)
                self.holds.append((name, start, end, int(m.group(1)),
                                   sess.name, phase))
                if r2 != "OK 0":
                    self.errors.append((sess.name, phase, "RELEASE " + name,
                                        r2))
                self.done[sess.name] += 1
        except Exception as e:          # reported by check()
            self.errors.append((sess.name, self.phase, "exception", repr(e)))

    def count(self, phase=None):
        return sum(1 for h in self.holds if phase is None or h[5] == phase)

    def finish(self, timeout=30.0):
        self.stop.set()
        for t in self.threads:
            t.join(timeout)
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            raise AssertionError("churn threads still running: %s" % alive)

    def check(self, tc, extra=()):
        """No errors; per name, holds (plus extra (name, start, token)
        grants seen elsewhere) in client order have strictly increasing
        tokens and do not overlap."""
        tc.assertEqual(self.errors, [], "churn errors")
        by = {}
        for name, start, end, tok, who, phase in self.holds:
            by.setdefault(name, []).append((start, end, tok, who, phase))
        for name, start, tok in extra:
            by.setdefault(name, []).append((start, start, tok, "extra", ""))
        for name, hs in by.items():
            hs.sort()
            for a, b in zip(hs, hs[1:]):
                tc.assertGreater(b[2], a[2], "token of %s went back: %r then"
                                 " %r" % (name, a, b))
                tc.assertGreater(b[0], a[1], "holds of %s overlap: %r and %r"
                                 % (name, a, b))
        return by


class ClusterCase(BrokerTestCase):
    """No module Redis: each test uses a ClusterTopology."""

    def setUp(self):
        self.prefix = "lbt" + uuid.uuid4().hex[:12]
        self.brokers = []
        self.topo = None

    def fresh_cluster(self):
        topo = ClusterTopology()
        self.addCleanup(topo.close)
        return topo

    def cluster_broker(self, topo, *extra, seeds=None, **kw):
        kw.setdefault("ready_timeout", 10.0)
        b = Broker(None, kw.pop("prefix", self.prefix),
                   "--redis_cluster", seeds or topo.seeds(),
                   "--failover_lock_delay_ms", DELAY_MS, *extra, **kw)
        self.addCleanup(b.close)
        self.brokers.append(b)
        return b

    def session(self, broker, name="", events=False):
        s = Session(self, broker, name)
        if events:
            self.assertEqual(s.req("EVENTS ON"), "OK")
        s.hello()
        return s

    def bstats(self, broker):
        c = broker.client(timeout=2.0)
        try:
            return parse_stats(c.req("STATS"))
        finally:
            c.close()

    def logs(self, tail=60):
        out = []
        for b in self.brokers:
            out.append("=== broker :%d\n%s" % (
                b.port, "\n".join(b.log().splitlines()[-tail:])))
        if self.topo is not None:
            out.append(self.topo.describe(tail=8))
        return "\n".join(out)

    def map_lines(self, broker):
        return [ln for ln in broker.log().splitlines()
                if "slot map" in ln.lower()]

    # ------------------------------------------------------------ names --

    def slot_of(self, name):
        return hash_slot(self.lock_key(name))

    def names_on(self, topo, master, n, stem):
        """n names whose lock keys live on master now (checked with
        CLUSTER KEYSLOT)."""
        ranges = topo.slot_map()
        out = []
        for i in range(200000):
            name = "%s%d" % (stem, i)
            if owner_in(ranges, self.slot_of(name)) == master:
                out.append(name)
                if len(out) == n:
                    break
        for name in out:
            self.assertEqual(topo.keyslot(self.lock_key(name)),
                             self.slot_of(name))
        self.assertEqual(len(out), n)
        return out

    def names_in_slot(self, topo, slot, n, stem):
        """n names whose lock keys hash to slot (checked with CLUSTER
        KEYSLOT)."""
        out = []
        for i in range(2000000):
            name = "%s%d" % (stem, i)
            if self.slot_of(name) == slot:
                out.append(name)
                if len(out) == n:
                    break
        self.assertEqual(len(out), n)
        for name in out:
            self.assertEqual(topo.keyslot(self.lock_key(name)), slot)
        return out

    # ------------------------------------------------------- assertions --

    def grant(self, sess, name, ttl=None):
        """ACQUIRE of a name nobody holds, with WAIT (a lock delay may
        run); returns the token."""
        line = "ACQUIRE %s WAIT %d" % (name, GRANT_WAIT_MS)
        if ttl is not None:
            line += " TTL %d" % ttl
        return self.token(sess.req(line, timeout=GRANT_WAIT_MS / 1000.0 + 5))

    def token(self, reply):
        tok = self.assertToken(reply)
        self.assertLessEqual(tok, MAX_TOKEN)
        return tok

    def value(self, topo, name):
        """The lock key's value on the master serving its slot now."""
        return topo.get(self.lock_key(name))

    def assertOn(self, topo, name, sess, tok, msg=""):
        self.assertEqual(self.value(topo, name), "%s:%d" % (sess.cid, tok),
                         "%s not on %s with its holder's value %s\n%s"
                         % (name, topo.master_of_key(self.lock_key(name)),
                            msg, self.logs()))

    def assertHolds(self, sess, name, tok, other):
        """sess still holds name with tok: RENEW answers OK, and OWNER
        asked through another session shows it."""
        self.assertRegex(sess.req("RENEW " + name), r"\AOK [0-9]+\Z",
                         "%s lost %s without being told\n%s"
                         % (sess.name, name, self.logs()))
        self.assertRegex(other.req("OWNER " + name),
                         r"\AOK %s [0-9]+ %d\Z" % (sess.cid, tok))

    def wait_nodes(self, broker, n=3, timeout=10.0):
        wait_until(lambda: self.bstats(broker).get("redis_nodes") == str(n)
                   and self.bstats(broker).get("redis") == "up", timeout,
                   interval=0.05,
                   what="broker :%d redis=up redis_nodes=%d\n%s"
                   % (broker.port, n, self.logs()))


# ---------------------------------------------------------------- -t --

class TestCheckConfig(ClusterCase):
    def check(self, *args):
        return run([harness.BROKER_BIN, "-t"] + list(args))

    def assertRefused(self, r):
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("redis_cluster", r.stderr)
        self.assertNotIn("unknown", r.stderr)
        self.assertNotIn("configuration OK", r.stdout)

    def test_cluster_exclusive_with_redis_and_sentinels(self):
        with self.subTest(what="cluster alone"):
            r = self.check("--redis_cluster", SEEDS_EXAMPLE)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("configuration OK", r.stdout)
        with self.subTest(what="one seed"):
            r = self.check("--redis_cluster", "127.0.0.1:7000")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for opt in ("-r", "--redis"):
            with self.subTest(opt=opt):
                self.assertRefused(self.check("--redis_cluster",
                                              SEEDS_EXAMPLE, opt,
                                              "127.0.0.1:6379"))
        with self.subTest(opt="--redis_sentinels"):
            self.assertRefused(self.check(
                "--redis_cluster", SEEDS_EXAMPLE, "--redis_sentinels",
                "127.0.0.1:26379", "--redis_master_name", "mymaster"))
        d = tempfile.mkdtemp(prefix="lbt-cconf-")
        self.addCleanup(shutil.rmtree, d, True)
        for other in ("redis 127.0.0.1:6379",
                      "redis_sentinels 127.0.0.1:26379\n"
                      "redis_master_name mymaster"):
            with self.subTest(where="conf file", other=other):
                conf = os.path.join(d, "both.conf")
                with open(conf, "w") as f:
                    f.write("redis_cluster %s\n%s\n" % (SEEDS_EXAMPLE, other))
                self.assertRefused(self.check("-c", conf))
        with self.subTest(where="start-up"):
            # Start-up refuses what -t refuses, before listening.
            port = harness.free_port()
            r = run([harness.BROKER_BIN, "-b", "127.0.0.1", "-p", str(port),
                     "-r", "127.0.0.1:6379", "--redis_cluster",
                     SEEDS_EXAMPLE], timeout=10)
            self.assertRefused(r)
        for bad in ("127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000",
                    "127.0.0.1:7000,127.0.0.1", "127.0.0.1:7000,"):
            with self.subTest(seeds=bad):
                self.assertRefused(self.check("--redis_cluster", bad))


# ---------------------------------------------------- shared cluster --

class TestSharedCluster(ClusterCase):
    def setUp(self):
        super().setUp()
        self.topo = shared_cluster()

    def test_keys_spread_over_all_masters(self):
        topo = self.topo
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        names = ["spread-%d" % i for i in range(60)]
        # hash-tagged names: the slot is the tag's, for the lock key and
        # whatever the broker puts next to it
        names += ["user{42}:a", "user{42}:b", "{job}", "x{y}z{w}"]
        for name in names:
            self.assertEqual(topo.keyslot(self.lock_key(name)),
                             self.slot_of(name))
        masters = topo.masters()
        self.assertEqual(len(masters), 3)
        self.assertEqual(set(topo.master_of_slot(self.slot_of(n))
                             for n in names), set(masters),
                         "the names do not cover every master")

        holders = [self.session(A, "h%d" % i) for i in range(6)]
        held = {}           # name -> (session, token)
        for i, name in enumerate(names):
            s = holders[i % len(holders)]
            held[name] = (s, self.grant(s, name))
        self.wait_nodes(A, 3)
        st = self.bstats(A)
        self.assertEqual(st["locks_held"], str(len(names)))

        seen = set()
        fences = {}
        for name, (s, tok) in held.items():
            key = self.lock_key(name)
            m = topo.master_of_key(key)
            seen.add(m)
            self.assertEqual(cli(m, "GET", key), "%s:%d" % (s.cid, tok),
                             "%s (slot %d) not on %s" % (name,
                                                         self.slot_of(name),
                                                         m))
            if m not in fences:
                fences[m] = self.fence_counters(m)
            slot = self.slot_of(name)
            self.assertIn(slot, fences[m], "no <prefix>:fence:* counter in "
                          "slot %d (of %s) on %s" % (slot, name, m))
            self.assertGreaterEqual(fences[m][slot], tok)
        self.assertEqual(seen, set(masters))
        # each master runs the broker's function library, loaded there by
        # its connection (a cluster copies no function between masters)
        lib = generated()["library.name"]
        for m in masters:
            self.assertIn(lib, [x[1] for x in cli(m, "FUNCTION", "LIST")],
                          m)
            self.assertRegex(cli(m, "INFO", "commandstats"),
                             r"cmdstat_fcall:calls=[1-9]", m)

        o = self.session(B, "other")
        for name, (s, tok) in held.items():
            self.assertEqual(o.req("ACQUIRE " + name), "BUSY", name)
        for name in names[::7]:
            s, tok = held[name]
            self.assertRegex(o.req("OWNER " + name),
                             r"\AOK %s [0-9]+ %d\Z" % (s.cid, tok))

        for name, (s, tok) in held.items():
            self.assertEqual(s.req("RELEASE " + name), "OK 0", name)
        for name in names:
            self.assertIsNone(self.value(topo, name), name)
        self.assertEqual(self.bstats(A)["locks_held"], "0")
        for name in names[::5]:
            tok = self.token(o.req("ACQUIRE " + name))
            self.assertGreater(tok, held[name][1], name)
            self.assertOn(topo, name, o, tok)
            self.assertEqual(o.req("RELEASE " + name), "OK 0")
        for s in holders + [o]:
            s.sync()

    def test_round_trips_per_master_on_metrics(self):
        # Guards: /metrics has a round-trip histogram per master (label
        # node="ip:port", every master and only masters), and a grant and
        # a release of a name count on the master serving its slot.
        topo = self.topo
        mport = harness.free_port()
        A = self.cluster_broker(topo, "--metrics_port", mport)
        self.wait_nodes(A, 3)
        masters = topo.masters()
        s = self.session(A, "rtt")
        rtt = "lockbroker_redis_rtt_seconds_count"

        def counts():
            st, _, body = http_req(mport)
            self.assertEqual(st, 200)
            m = parse_metrics(body)
            return {k[len(rtt) + len('{node="'):-2]: v for k, v in m.items()
                    if k.startswith(rtt + "{")}

        before = counts()
        self.assertEqual(sorted(before), masters)
        for i, m in enumerate(masters):
            others = {o: before[o] for o in masters if o != m}
            name = self.names_on(topo, m, 1, "rtt%d-" % i)[0]
            self.grant(s, name)
            self.assertEqual(s.req("RELEASE " + name), "OK 0")
            after = counts()
            self.assertGreaterEqual(after[m] - before[m], 2, m)
            self.assertLessEqual(after[m] - before[m], 6, m)
            self.assertEqual({o: after[o] for o in others}, others,
                             "a call of %s's slot counted elsewhere" % m)
            before = after
        s.sync()

    def test_check_and_owner_value_in_the_key_slot(self):
        """1.2: CHECK, PROCLAIM and OWNER ... VALUE go to the key's slot's
        master; the value key is <prefix>:value:{<tag>}<name>, in the
        lock's slot."""
        topo = self.topo
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        h = self.session(A, "h")
        o = self.session(B, "o")
        names = ["v12-%d" % i for i in range(12)]
        self.assertEqual(len(set(topo.master_of_slot(self.slot_of(n))
                                 for n in names)), 3)
        for name in names:
            tok = self.grant(h, name)
            vk = "%s:value:{%s}%s" % (self.prefix,
                                      slot_tag(self.slot_of(name)), name)
            self.assertEqual(hash_slot(vk), self.slot_of(name))
            cli(topo.master_of_key(vk), "SET", vk, "%d at-%s" % (tok, name),
                "PX", "30000")
            self.assertEqual(o.req("CHECK %s %d" % (name, tok)),
                             "OK CURRENT")
            self.assertEqual(o.req("CHECK %s %d" % (name, tok + 1)),
                             "OK STALE %d" % tok)
            self.assertRegex(o.req("OWNER %s VALUE" % name),
                             r"\AOK %s [0-9]+ %d at-%s\Z" % (h.cid, tok,
                                                              re.escape(name)))
            # PROCLAIM: value.lua's keys (lock, value, watch mark) in one
            # slot, else Redis refuses the script (CROSSSLOT)
            self.assertEqual(h.req("PROCLAIM %s new-%s" % (name, name)), "OK")
            self.assertRegex(o.req("OWNER %s VALUE" % name),
                             r"\AOK %s [0-9]+ %d new-%s\Z" % (h.cid, tok,
                                                               re.escape(name)))
            self.assertEqual(h.req("RELEASE " + name), "OK 0")
            self.assertEqual(o.req("CHECK %s %d" % (name, tok)),
                             "OK STALE -")

    def test_fenced_writes_in_the_lock_slot(self):
        """1.2: SETIF and DELIF run on the master of the lock key's slot;
        a data key with the lock's {tag} is written there (read back with
        a plain GET on that master), through either broker; a data key of
        another slot is ERR BADARG naming the rule, nothing written."""
        topo = self.topo
        A = self.cluster_broker(topo, "--fenced_write_keys", "*")
        B = self.cluster_broker(topo, "--fenced_write_keys", "*")
        h = self.session(A, "h")
        o = self.session(B, "o")
        tags = ["fw%d" % i for i in range(12)]
        self.assertEqual(len(set(topo.master_of_slot(hash_slot(
            "{%s}" % t)) for t in tags)), 3)
        for tag in tags:
            name, data = "{%s}:lock" % tag, "{%s}:data" % tag
            self.assertEqual(hash_slot(data), self.slot_of(name))
            tok = self.grant(h, name)
            self.assertEqual(h.req("SETIF %s v1 HOLDING %s %d PX 30000"
                                   % (data, name, tok)), "OK")
            self.assertEqual(o.req("SETIF %s v2 HOLDING %s %d KEEPTTL"
                                   % (data, name, tok)), "OK")
            self.assertEqual(topo.get(data), "v2")
            self.assertErr(o.req("SETIF %s v3 HOLDING %s %d"
                                 % (data, name, tok + 1)), "NOTHELD")
            # another slot: refused before Redis, with the rule
            other = "{x%s}:data" % tag
            self.assertNotEqual(hash_slot(other), self.slot_of(name))
            for line in ("SETIF %s v HOLDING %s %d" % (other, name, tok),
                         "DELIF %s HOLDING %s %d" % (other, name, tok)):
                r = o.req(line)
                self.assertErr(r, "BADARG")
                self.assertIn("slot", r)
            self.assertIsNone(topo.get(other))
            self.assertEqual(h.req("DELIF %s HOLDING %s %d"
                                   % (data, name, tok)), "OK")
            self.assertIsNone(topo.get(data))
            self.assertEqual(h.req("RELEASE " + name), "OK 0")
        for s in (h, o):
            s.sync()

    def test_watch_and_value_across_three_masters(self):
        """1.2: ACQUIRE ... VALUE writes the value in the grant's slot; a
        WATCH on another broker hears grants (SPUBLISH "held <key>" on the
        slot's channel, while the key's watch mark, in the lock's slot,
        exists) and releases of keys on every master."""
        topo = self.topo
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        h = self.session(A, "h")
        w = self.session(B, "w")
        names = ["w12-%d" % i for i in range(9)]
        self.assertEqual(len(set(topo.master_of_slot(self.slot_of(n))
                                 for n in names)), 3)
        for name in names:
            self.assertEqual(w.req("WATCH " + name), "OK")
            self.assertEqual(w.c.readline(5.0), "EVENT FREE " + name)
        for name in names:
            tok = self.assertToken(h.req("ACQUIRE %s VALUE at-%s"
                                         % (name, name)))
            self.assertEqual(w.c.readline(5.0), "EVENT HOLDER %s %s %d at-%s"
                             % (name, h.cid, tok, name))
            self.assertRegex(w.req("OWNER %s VALUE" % name),
                             r"\AOK %s [0-9]+ %d at-%s\Z"
                             % (h.cid, tok, re.escape(name)))
            self.assertEqual(h.req("RELEASE " + name), "OK 0")
            self.assertEqual(w.c.readline(5.0), "EVENT FREE " + name)
            mark = "%s:watched:{%s}%s" % (self.prefix,
                                          slot_tag(self.slot_of(name)), name)
            self.assertEqual(hash_slot(mark), self.slot_of(name))
            self.assertEqual(cli(topo.master_of_key(mark), "EXISTS", mark),
                             1)
        w.sync()

    def test_watch_sees_early_handoffs_on_every_master(self):
        """1.2: a watcher on another broker sees the holders an early
        hand-off makes (pass.lua reads the key's watch mark without
        naming it in cluster mode), on keys of every master."""
        topo = self.topo
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        w = self.session(B, "w")
        names = ["eh12-%d" % i for i in range(9)]
        self.assertEqual(len(set(topo.master_of_slot(self.slot_of(n))
                                 for n in names)), 3)
        before = int(self.bstats(A)["early_handoffs"])
        for name in names[::3] + names[1::3][:1]:
            s = [self.session(A, "s%d" % i) for i in range(3)]
            self.assertEqual(w.req("WATCH " + name), "OK")
            t0 = self.grant(s[0], name)
            for x in s[1:]:
                x.send("ACQUIRE %s WAIT 5000" % name)
            time.sleep(0.2)
            self.assertEqual(s[0].req("RELEASE " + name), "OK 0")
            t1 = self.token(s[1].read(5))
            self.assertEqual(s[1].req("RELEASE " + name), "OK 0")
            t2 = self.token(s[2].read(5))
            self.assertGreater(t2, t1)
            self.assertGreater(t1, t0)
            want = "EVENT HOLDER %s %s %d -" % (name, s[2].cid, t2)
            harness.wait_until(lambda: want in w.drain_events(0.1), 5,
                               what=want)
            self.assertEqual(s[2].req("RELEASE " + name), "OK 0")
            self.assertEqual(w.req("UNWATCH " + name), "OK 1")
            for x in s:
                x.sync()
        self.assertGreater(int(self.bstats(A)["early_handoffs"]), before)
        w.sync()

    def test_acquire_all_across_three_masters(self):
        """1.2: ACQUIRE ALL of keys on three masters (and two in one slot
        by their {tag}): all granted, each key on its master with its
        holder's value and a token of its own slot's counter; one key
        held elsewhere gives back the others (none left in Redis), and
        the set is granted once it is released; opposite orders from two
        brokers never deadlock."""
        topo = self.topo
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        a = self.session(A, "a")
        b = self.session(B, "b")
        names = ["m12-%d" % i for i in range(9)] + ["{t}x", "{t}y"]
        self.assertEqual(len(set(topo.master_of_slot(self.slot_of(n))
                                 for n in names)), 3)
        line = "ALL %d %s" % (len(names), " ".join(names))
        toks = [int(t) for t in a.req("ACQUIRE " + line).split()[1:]]
        self.assertEqual(len(toks), len(names))
        for n, t in zip(names, toks):
            self.assertOn(topo, n, a, t)
        self.assertEqual(a.req("RELEASE " + line),
                         "OK" + " 0" * len(names))
        for n in names:
            self.assertIsNone(self.value(topo, n))
        # one key held by b: BUSY, nothing of a's left on any master
        tb = self.grant(b, names[5])
        self.assertEqual(a.req("ACQUIRE " + line), "BUSY")
        for n in names:
            if n != names[5]:
                self.assertIsNone(self.value(topo, n), n)
        self.assertOn(topo, names[5], b, tb)
        a.send("ACQUIRE %s WAIT 10000" % line)
        time.sleep(0.2)
        self.assertEqual(b.req("RELEASE " + names[5]), "OK 0")
        toks = [int(t) for t in a.read(10).split()[1:]]
        self.assertEqual(len(toks), len(names))
        self.assertGreater(toks[5], tb)
        self.assertEqual(a.req("RELEASE " + line), "OK" + " 0" * len(names))
        # opposite orders, two brokers, keys on two masters
        pair = [n for n in names[:9]
                if topo.master_of_slot(self.slot_of(n)) !=
                topo.master_of_slot(self.slot_of(names[0]))][:1] + \
            [names[0]]
        done = []

        def loop(s, order, rounds):
            for _ in range(rounds):
                r = s.req("ACQUIRE ALL 2 %s %s WAIT 10000" % order,
                          timeout=15)
                self.assertTrue(r.startswith("OK "), r)
                self.assertEqual(s.req("RELEASE ALL 2 %s %s" % order),
                                 "OK 0 0")
            done.append(1)
        t = threading.Thread(target=loop, args=(b, tuple(pair), 300))
        t.start()
        loop(a, tuple(reversed(pair)), 300)
        t.join(60)
        self.assertEqual(len(done), 2)
        # WANTED notices reach a holder on another broker through the
        # slot's wanted channel (SPUBLISH), for keys on every master
        self.assertEqual(a.req("EVENTS ON WANTED"), "OK")
        for n in names[:9:4]:
            tok = self.grant(a, n)
            b.send("ACQUIRE %s WAIT 5000" % n)
            harness.wait_until(lambda: any(
                e.startswith("EVENT WANTED %s 1 " % n)
                for e in a.drain_events(0.1)), 5, what="EVENT WANTED " + n)
            self.assertEqual(a.req("RELEASE " + n), "OK 0")
            self.assertGreater(self.token(b.read(5)), tok)
            self.assertEqual(b.req("RELEASE " + n), "OK 0")
        for s in (a, b):
            s.sync()

    def fence_counters(self, addr):
        """{slot: value} of the <prefix>:fence:* keys on addr."""
        out = {}
        cursor = "0"
        for _ in range(1000):
            cursor, keys = cli(addr, "SCAN", cursor, "MATCH",
                               self.prefix + ":fence:*", "COUNT", 1000)
            for k in keys:
                v = cli(addr, "GET", k)
                if v is not None and v.isdigit():
                    out[hash_slot(k)] = int(v)
            if cursor == "0":
                break
        return out

    def test_discovery_from_any_seed(self):
        topo = self.topo
        dead = harness.free_port()      # nothing listens there
        replica = topo.replicas_of(topo.masters()[0])[0]
        b = self.cluster_broker(topo, seeds="127.0.0.1:%d,%s"
                                % (dead, replica.addr), ready_timeout=15.0)
        s = self.session(b, "s")
        for m in topo.masters():
            name = self.names_on(topo, m, 1, "disc-")[0]
            tok = self.grant(s, name)
            self.assertEqual(cli(m, "GET", self.lock_key(name)),
                             "%s:%d" % (s.cid, tok))
        self.wait_nodes(b, 3)
        s.sync()

    def test_brokers_exclude_and_wake_each_other(self):
        topo = self.topo
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        polled = []
        for i, m in enumerate(topo.masters()):
            name = self.names_on(topo, m, 1, "wake%d-" % i)[0]
            for first, second in ((A, B), (B, A)):
                h = self.session(first, "holder")
                tok = self.grant(h, name)
                busy = self.session(second, "busy")
                self.assertEqual(busy.req("ACQUIRE " + name), "BUSY")
                w = self.session(second, "waiter")
                w.send("ACQUIRE %s WAIT 10000" % name)
                wait_until(lambda: self.bstats(second)["waiters"] == "1",
                           3.0, what="the waiter queued")
                # Not answered before the release (and, the first time,
                # for a full second: the key's master must not see the
                # waiting broker poll it).  What the master ran is seen
                # with MONITOR: only calls from the waiting broker's
                # connections that name this lock key count, so renewals,
                # other keys and other brokers on this shared cluster do
                # not.
                quiet_s = 1.0 if not polled else 0.3
                mon = KeyMonitor(m) if not polled else None
                ports = tcp_ports_of(second.pid) if mon else set()
                self.assertTrue(w.c.no_reply(quiet_s),
                                "waiter answered %r before the release"
                                % w.c.buf)
                if mon is not None:
                    calls = mon.stop()
                    ports |= tcp_ports_of(second.pid)
                    polled.append(key_calls(calls, self.lock_key(name),
                                            ports))
                self.assertEqual(busy.req("ACQUIRE " + name), "BUSY")
                t0 = time.monotonic()
                self.assertEqual(h.req("RELEASE " + name), "OK 0")
                wt = self.token(w.read(timeout=5.0))
                ms = harness.ms_since(t0)
                self.assertGreater(wt, tok)
                self.assertLess(ms, HANDOFF_MS, "cross-broker wake-up of %s "
                                "on %s took %.0f ms\n%s"
                                % (name, m, ms, self.logs()))
                self.assertOn(topo, name, w, wt)
                self.assertEqual(h.req("ACQUIRE " + name), "BUSY")
                self.assertEqual(w.req("RELEASE " + name), "OK 0")
                for s in (h, busy, w):
                    s.sync()
                    s.c.close()
        # A 100 ms poll would send ~10 calls naming the key in that second;
        # the waiter's own first attempt, if its reply came after STATS
        # counted it, or a slow safety retry a few.
        self.assertLessEqual(len(polled[0]), 3,
                             "the waiting broker sent %d calls naming the "
                             "key while its waiter waited 1 s: it polls\n%s"
                             % (len(polled[0]), "\n".join(
                                 " ".join(c) for c in polled[0])))

    def test_wakeups_stay_in_the_shard(self):
        """Wake-ups are sharded pub/sub: each broker subscribes the slot's
        channels on the slot's master only (SSUBSCRIBE), no classic
        SUBSCRIBE anywhere, and a release published in the shard wakes
        the other broker's waiter."""
        topo = self.topo
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        masters = topo.masters()
        self.assertEqual(slot_tag(0), "1bz")        # daemon/slot.c's walk
        self.assertEqual(slot_tag(16383), "hia")
        for m in masters:
            name = self.names_on(topo, m, 1, "shard-")[0]
            tag = slot_tag(self.slot_of(name))
            chans = ["%s:%s:{%s}" % (self.prefix, kind, tag)
                     for kind in ("released", "wanted")]
            for ch in chans:
                self.assertEqual(hash_slot(ch), self.slot_of(name))
            wait_until(lambda: all(
                cli(m, "PUBSUB", "SHARDNUMSUB", ch)[1] == 2
                for ch in chans), 5.0, what="both brokers SSUBSCRIBEd %s "
                "on %s\n%s" % (chans, m, self.logs()))
            for other in masters:
                if other != m:
                    self.assertEqual(cli(other, "PUBSUB", "SHARDNUMSUB",
                                         chans[0])[1], 0, other)
            h = self.session(A, "h")
            tok = self.grant(h, name)
            w = self.session(B, "w")
            w.send("ACQUIRE %s WAIT 5000" % name)
            wait_until(lambda: self.bstats(B)["waiters"] == "1", 3.0,
                       what="the waiter queued")
            self.assertTrue(w.c.no_reply(0.2))
            t0 = time.monotonic()
            self.assertEqual(h.req("RELEASE " + name), "OK 0")
            self.assertGreater(self.token(w.read(timeout=5.0)), tok)
            self.assertLess(harness.ms_since(t0), HANDOFF_MS)
            self.assertEqual(w.req("RELEASE " + name), "OK 0")
        for node in topo.nodes:
            if node.alive():
                self.assertEqual(cli(node.addr, "PUBSUB", "NUMSUB",
                                     self.prefix + ":released",
                                     self.prefix + ":wanted"),
                                 [self.prefix + ":released", 0,
                                  self.prefix + ":wanted", 0], node.addr)

    def test_tokens_increase_under_contention(self):
        topo = self.topo
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        names = [self.names_on(topo, m, 1, "tok%d-" % i)[0]
                 for i, m in enumerate(topo.masters())]
        churn = Churn(wait_ms=5000, rounds=30, max_s=25.0)
        sessions = [self.session(br, "w%d" % i)
                    for i, br in enumerate((A, B, A, B))]
        for i, s in enumerate(sessions):
            # each starts on a different name, so they meet on all three
            churn.start(s, names[i % 3:] + names[:i % 3])
        for t in churn.threads:
            t.join(30.0)
        churn.finish()
        by = churn.check(self)
        self.assertEqual(len(churn.holds), 4 * 30)
        for name in names:
            whos = set(h[3] for h in by[name])
            self.assertEqual(whos, {"w0", "w1", "w2", "w3"}, name)
        for s in sessions:
            s.sync()

    def test_slot_move_learnt_from_moved(self):
        topo = self.topo
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        a = self.session(A, "a", events=True)
        o = self.session(B, "o")
        name = "moved-1"
        slot = self.slot_of(name)
        other = self.names_in_slot(topo, slot, 1, "moved-x")[0]
        tok = self.grant(a, name)
        t1 = self.grant(o, other)
        self.assertEqual(o.req("RELEASE " + other), "OK 0")
        src = topo.master_of_slot(slot)
        dst = [m for m in topo.masters() if m != src][0]
        before = {br: (self.bstats(br), len(self.map_lines(br)))
                  for br in (A, B)}
        # Moved with nobody talking; every node agrees before the brokers
        # say a word, so each learns it from -MOVED (or a periodic
        # CLUSTER SLOTS): either way a slot map change.
        topo.migrate_slot(slot, src, dst)
        self.assertHolds(a, name, tok, o)
        self.assertOn(topo, name, a, tok)
        self.assertEqual(topo.master_of_key(self.lock_key(name)), dst)
        t2 = self.grant(a, other)
        self.assertGreater(t2, t1, "the slot's counter went back with the "
                           "move")
        self.assertEqual(cli(dst, "GET", self.lock_key(other)),
                         "%s:%d" % (a.cid, t2))
        a.drain_events(0.1)
        self.assertEqual(a.events, [])
        a.sync()
        o.sync()
        problems = []
        for br in (A, B):
            st0, lines0 = before[br]
            try:
                wait_until(lambda: int(self.bstats(br)["redis_map_changes"])
                           > int(st0["redis_map_changes"]), 3.0, what="it")
            except AssertionError:
                st = self.bstats(br)
                problems.append("broker :%d: redis_map_changes %s -> %s "
                                "(redis_redirects %s -> %s)" % (
                                    br.port, st0["redis_map_changes"],
                                    st["redis_map_changes"],
                                    st0["redis_redirects"],
                                    st["redis_redirects"]))
            if len(self.map_lines(br)) <= lines0:
                problems.append("broker :%d: no 'slot map' log line for "
                                "the move" % br.port)
        if problems:
            self.fail("slot %d moved %s -> %s, not seen as a slot map "
                      "change:\n  %s\n%s" % (slot, src, dst,
                                              "\n  ".join(problems),
                                              self.logs()))

    def test_resharding_while_clients_work(self):
        topo = self.topo
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        slot = self.slot_of("mig-seed")
        names = self.names_in_slot(topo, slot, 6, "mig-")
        src = topo.master_of_slot(slot)
        dst = [m for m in topo.masters() if m != src][0]
        n0, n1, n2 = names[:3]
        churn_names = names[3:]

        # Holders (events on): n0 on A with a 2 s TTL (renewed every
        # ~670 ms, through the move), n1 on A, n2 on B.
        h0 = self.session(A, "h0", events=True)
        h1 = self.session(A, "h1", events=True)
        h2 = self.session(B, "h2", events=True)
        t0 = self.grant(h0, n0, ttl=2000)
        t1 = self.grant(h1, n1)
        t2 = self.grant(h2, n2)
        # Waiters: n0 across brokers, n1 on the same broker.
        w0 = self.session(B, "w0")
        w1 = self.session(A, "w1")
        w0.send("ACQUIRE %s WAIT 20000" % n0)
        w1.send("ACQUIRE %s WAIT 20000" % n1)
        wait_until(lambda: self.bstats(A)["waiters"] == "1" and
                   self.bstats(B)["waiters"] == "1", 3.0,
                   what="2 waiters queued")
        before = {br: (int(self.bstats(br)["redis_map_changes"]),
                       len(self.map_lines(br))) for br in (A, B)}

        churn = Churn(wait_ms=5000, rounds=400, max_s=25.0)
        churn.start(self.session(A, "cA"), churn_names)
        churn.start(self.session(B, "cB"), churn_names[::-1])
        self.addCleanup(churn.stop.set)
        wait_until(lambda: churn.count("before") >= 6, 5.0,
                   what="workers running\n%s" % churn.errors)

        # The slot is split while the workers go on.  Each stage is held
        # open for a fixed short time (in a real reshard it lasts as long
        # as redis-cli takes):
        # 1. MIGRATING/IMPORTING, every key still on src: a grant of a free
        #    name gets -TRYAGAIN (its slot's counter is there, its lock key
        #    is not), to be retried;
        # 2. the lock keys of n0 and n1 moved, n2's and the counter not: a
        #    command on n0 or n1 alone gets -ASK, to be followed;
        # 3. the rest moved and SETSLOT NODE everywhere: -MOVED from then.
        ob = self.session(B, "owner-via-b")
        oa = self.session(A, "owner-via-a")
        churn.phase = "open"
        topo.begin_migration(slot, src, dst)
        time.sleep(0.15)
        self.assertGreaterEqual(int(cli(src, "CLUSTER", "COUNTKEYSINSLOT",
                                        slot)), 4)  # 3 locks + a counter
        redirects0 = sum(int(self.bstats(br)["redis_redirects"])
                         for br in (A, B))
        topo.migrate_keys(src, dst, [self.lock_key(n0), self.lock_key(n1)])
        for s, line, want in (
                (h0, "RENEW " + n0, r"\AOK [0-9]+\Z"),
                (ob, "OWNER " + n1, r"\AOK %s [0-9]+ %d\Z" % (h1.cid, t1)),
                (h2, "RENEW " + n2, r"\AOK [0-9]+\Z"),
                (oa, "OWNER " + n2, r"\AOK %s [0-9]+ %d\Z" % (h2.cid, t2))):
            r, ms = s.timed_req(line, timeout=5.0)
            self.assertRegex(r, want, "%s while the slot is split\n%s"
                             % (line, self.logs()))
        self.assertGreater(sum(int(self.bstats(br)["redis_redirects"])
                               for br in (A, B)), redirects0,
                           "no -ASK followed while the slot is split")
        time.sleep(0.15)
        topo.finish_migration(slot, src, dst)
        churn.phase = "after"
        self.assertEqual(topo.master_of_slot(slot), dst)
        wait_until(lambda: churn.count("after") >= 10, 10.0,
                   what="workers going on after the move\n%s"
                   % churn.errors)
        churn.finish()

        self.assertEqual(int(cli(src, "CLUSTER", "COUNTKEYSINSLOT", slot)),
                         0)
        # No lock lost.
        for s in (h0, h1, h2):
            s.drain_events(0.2)
            self.assertEqual(s.events, [], "%s told LOST across the move\n%s"
                             % (s.name, self.logs()))
        self.assertHolds(h0, n0, t0, ob)
        self.assertHolds(h1, n1, t1, ob)
        self.assertHolds(h2, n2, t2, oa)
        for s, name, tok in ((h0, n0, t0), (h1, n1, t1), (h2, n2, t2)):
            self.assertEqual(cli(dst, "GET", self.lock_key(name)),
                             "%s:%d" % (s.cid, tok))
        # Waiters were not answered meanwhile; they get the lock on release.
        for w in (w0, w1):
            self.assertTrue(w.c.no_reply(0.05), "%s answered %r while the "
                            "lock is held" % (w.name, w.c.buf))
        extra = [(n0, 0.0, t0), (n1, 0.0, t1), (n2, 0.0, t2)]
        for h, w, name in ((h0, w0, n0), (h1, w1, n1)):
            self.assertEqual(h.req("RELEASE " + name), "OK 0")
            wt = self.token(w.read(timeout=5.0))
            extra.append((name, time.monotonic(), wt))
            self.assertEqual(cli(dst, "GET", self.lock_key(name)),
                             "%s:%d" % (w.cid, wt))
        # Tokens strictly increase per name across the move.
        by = churn.check(self, extra)
        phases = set(h[5] for h in churn.holds)
        self.assertIn("after", phases)
        for name in churn_names:
            self.assertGreaterEqual(len(by[name]), 2, name)

        redirects = sum(int(self.bstats(br)["redis_redirects"])
                        for br in (A, B))
        self.assertGreater(redirects, 0, self.logs())
        for s in (h0, h1, h2, w0, w1, oa, ob):
            s.sync()
        # The move is a slot map change whether the broker learnt it from
        # -MOVED or from CLUSTER SLOTS (read every second): counted and
        # logged by both brokers.  (Checked last, and for both brokers
        # before failing: the rest of the test does not depend on it.)
        problems = []
        for br in (A, B):
            try:
                wait_until(lambda: int(self.bstats(br)["redis_map_changes"])
                           > before[br][0], 3.0, what="it")
            except AssertionError:
                problems.append("broker :%d: redis_map_changes still %s "
                                "(was %d before the move)" % (
                                    br.port,
                                    self.bstats(br)["redis_map_changes"],
                                    before[br][0]))
            if len(self.map_lines(br)) <= before[br][1]:
                problems.append("broker :%d: no 'slot map' log line for "
                                "the move" % br.port)
        if problems:
            self.fail("the slot move was not seen as a slot map change:\n"
                      "  %s\n%s" % ("\n  ".join(problems), self.logs()))


# ----------------------------------------------------------- failover --

class TestFailover(ClusterCase):
    def test_master_killed_replica_promoted(self):
        topo = self.topo = self.fresh_cluster()
        A = self.cluster_broker(topo)
        B = self.cluster_broker(topo)
        masters = topo.masters()
        victim, healthy = masters[0], masters[1]
        f = self.names_on(topo, victim, 4, "f")
        g = self.names_on(topo, healthy, 2, "g")

        # Holders, events on: (session, name, token, must_keep, broker).
        # f[2] has a TTL below the failover time: it may expire before the
        # promotion; its broker may reassert it or report it lost, never
        # neither.
        holders = []
        for br, name, ttl, keep in ((A, f[0], 60000, True),
                                    (B, f[1], 60000, True),
                                    (A, f[2], 1000, False)):
            s = self.session(br, "holder-" + name, events=True)
            holders.append((s, name, self.grant(s, name, ttl), keep, br))
        hg = self.session(A, "holder-" + g[0], events=True)
        self.grant(hg, g[0], 2000)
        # Waiters across brokers.
        waiters = []
        for br, name in ((B, f[0]), (A, f[1])):
            w = self.session(br, "waiter-" + name)
            w.send("ACQUIRE %s WAIT 30000" % name)
            waiters.append((w, name))
        wait_until(lambda: self.bstats(A)["waiters"] == "1" and
                   self.bstats(B)["waiters"] == "1", 3.0,
                   what="2 waiters queued")
        reps = topo.replicas_of(victim)
        keys = [self.lock_key(n) for n in f[:3]]
        # (one key per EXISTS: they are in different slots)
        wait_until(lambda: all(r.cli_ro("EXISTS", k) == 1
                               for r in reps for k in keys), 3.0,
                   what="locks replicated")

        # Probes on the healthy master while the victim is down: hg renews
        # and a free key is granted and released, each fast.
        probe = self.session(B, "probe")
        probes, stop = [], threading.Event()

        def probing():
            deadline = time.monotonic() + FAILOVER_S + 5
            try:
                while not stop.is_set() and time.monotonic() < deadline:
                    for s, line in ((hg, "RENEW " + g[0]),
                                    (probe, "ACQUIRE %s" % g[1]),
                                    (probe, "RELEASE %s" % g[1])):
                        r, ms = s.timed_req(line, timeout=10.0)
                        probes.append((line, r, ms))
                    stop.wait(0.1)
            except Exception as e:
                probes.append(("exception", repr(e), 0))
        pt = threading.Thread(target=probing, daemon=True)
        self.addCleanup(stop.set)

        changes = {br: int(self.bstats(br)["redis_map_changes"])
                   for br in (A, B)}
        old = topo.kill(victim)
        pt.start()
        # Requests sent into the outage, pipelined: exactly one reply each.
        p = self.session(A, "pipeline")
        for i in range(3):
            p.send("ACQUIRE %s TTL 5000" % f[3])
            p.send("RELEASE %s" % f[3])
        p.send("OWNER %s" % f[3])
        replies = [p.read(timeout=FAILOVER_S + 5) for _ in range(7)]
        new = topo.wait_failover(old, FAILOVER_S)
        stop.set()
        pt.join(15.0)
        self.assertFalse(pt.is_alive())

        f3_tokens = []
        for i in range(3):
            acq, rel = replies[2 * i], replies[2 * i + 1]
            self.assertRegex(acq, r"\A(OK [0-9]+|ERR UNAVAILABLE [ -~]+)\Z")
            if acq.startswith("OK"):
                f3_tokens.append(int(acq.split()[1]))
                self.assertRegex(rel, r"\A(OK 0|ERR (UNAVAILABLE|LOST) "
                                 r"[ -~]+)\Z")
            else:
                self.assertRegex(rel, r"\AERR NOTHELD [ -~]+\Z")
        self.assertEqual(f3_tokens, sorted(set(f3_tokens)))
        # "OK <p> ...": a RELEASE answered ERR UNAVAILABLE is finished later
        self.assertRegex(replies[6], r"\A(OK -|OK %s [0-9]+ [0-9]+|"
                         r"ERR UNAVAILABLE [ -~]+)\Z" % p.cid)

        self.assertGreater(len(probes), 6, probes)
        for line, r, ms in probes:
            want = r"\AOK [0-9]+\Z" if not line.startswith("RELEASE") \
                else r"\AOK 0\Z"
            self.assertRegex(r, want, "%s on the healthy master during the "
                             "failover\n%s" % (line, self.logs()))
            self.assertLess(ms, 1000, "%s took %.0f ms during the failover"
                            % (line, ms))
        hg.drain_events(0.1)
        self.assertEqual(hg.events, [])

        # Both brokers learn the new map (read at least every second) and
        # have a command connection to each of its 3 masters; until then a
        # RENEW may answer ERR UNAVAILABLE, as in any outage.
        for br in (A, B):
            wait_until(lambda: int(self.bstats(br)["redis_map_changes"]) >
                       changes[br], 5.0, interval=0.05,
                       what="broker :%d to apply the map after the "
                       "failover\n%s" % (br.port, self.logs()))
            self.wait_nodes(br, 3)

        # Holders: still holding, or told.
        other = {A: self.session(B, "owner-via-b"),
                 B: self.session(A, "owner-via-a")}
        kept = {}
        for s, name, tok, keep, br in holders:
            event = "EVENT LOST %s %d" % (name, tok)
            s.drain_events(0.3)
            self.assertEqual([e for e in s.events if e != event], [])
            r = s.req("RENEW " + name, timeout=10.0)
            if event in s.events or keep is False and r.startswith("ERR"):
                self.assertFalse(keep, "%s lost a replicated lock:\n%s"
                                 % (name, self.logs()))
                self.assertErr(r, "LOST")
                self.assertNotRegex(other[br].req("OWNER " + name),
                                    r"\AOK %s " % s.cid)
                kept[name] = False
                continue
            self.assertRegex(r, r"\AOK [0-9]+\Z", "%s: %s\n%s"
                             % (s.name, r, self.logs()))
            self.assertEqual(topo.master_of_key(self.lock_key(name)), new)
            self.assertOn(topo, name, s, tok)
            self.assertRegex(other[br].req("OWNER " + name),
                             r"\AOK %s [0-9]+ %d\Z" % (s.cid, tok))
            kept[name] = True

        # Waiters were not answered while their holder kept the lock; they
        # get it on release (woken at once: the brokers' wake-ups work on
        # the new map), with a token above the holder's.
        holder_of = {h[1]: h for h in holders}
        granted = {h[1]: [h[2]] for h in holders}  # name -> tokens, in order
        for w, name in waiters:
            s, _, tok, _, _ = holder_of[name]
            if kept[name]:
                self.assertTrue(w.c.no_reply(0.05), "waiter on %s answered "
                                "%r during the failover" % (name, w.c.buf))
                t0 = time.monotonic()
                self.assertEqual(s.req("RELEASE " + name), "OK 0")
                wt = self.token(w.read(timeout=5.0))
                ms = harness.ms_since(t0)
                self.assertLess(ms, 2 * HANDOFF_MS, "waiter on %s woken "
                                "%.0f ms after the release\n%s"
                                % (name, ms, self.logs()))
            else:
                wt = self.token(w.read(timeout=GRANT_WAIT_MS / 1000.0 + 5))
            self.assertGreater(wt, max(granted[name]))
            granted[name].append(wt)
            self.assertOn(topo, name, w, wt)
            self.assertEqual(w.req("RELEASE " + name), "OK 0")
        s, name, _, _, _ = holders[2]
        if kept[name]:
            self.assertEqual(s.req("RELEASE " + name), "OK 0")
        # New grants for the same names: above every earlier token for
        # that name (the counter is per slot: names of other slots may
        # have higher ones).
        n = self.session(B, "new")
        for name in f[:3]:
            t = self.grant(n, name)
            self.assertGreater(t, max(granted[name]), name)
            self.assertOn(topo, name, n, t)
        for br in (A, B):
            self.wait_nodes(br, 3)
            self.assertGreater(len(self.map_lines(br)), 0, self.logs())
        self.assertRegex(hg.req("RENEW " + g[0]), r"\AOK [0-9]+\Z")
        for s in [h[0] for h in holders] + [w for w, _ in waiters] + \
                [p, n, hg, probe] + list(other.values()):
            s.sync()


# -------------------------------------------------------- cluster down --

class TestClusterDown(ClusterCase):
    def outage(self, fault):
        """Two of three masters down by fault ('pause' or 'kill'): clear
        errors, then recovery."""
        topo = self.topo = self.fresh_cluster()
        A = self.cluster_broker(topo)
        masters = topo.masters()
        survivor = masters[2]
        names = [self.names_on(topo, m, 2, "c%d-" % i)
                 for i, m in enumerate(masters)]
        h = self.session(A, "holder", events=True)
        held = names[2][1]
        tok = self.grant(h, held, 60000)
        s = self.session(A, "s")
        toks = [self.grant(s, ns[0]) for ns in names]
        for ns in names:
            self.assertEqual(s.req("RELEASE " + ns[0]), "OK 0")

        for m in masters[:2]:
            if fault == "pause":
                topo.pause(m)
                self.addCleanup(topo.resume, m)     # before the brokers stop
            else:
                topo.kill(m)
        topo.wait_state("fail", nodes=[survivor], timeout=10.0)

        # One session per master, its requests pipelined, all sent at
        # once: a session answers in order, so each reply is timed from
        # the one before it.
        lines = ("ACQUIRE %s", "OWNER %s", "ACQUIRE %s WAIT 1500")
        probes = [self.session(A, "down%d" % i) for i in range(3)]
        for p, ns in zip(probes, names):
            for line in lines:
                p.send(line % ns[0])
        t0 = time.monotonic()
        for p, ns in zip(probes, names):
            prev = t0
            for line in lines:
                r = p.read(timeout=15.0)
                now = time.monotonic()
                ms = (now - max(prev, t0)) * 1000.0
                prev = now
                self.assertErr(r, "UNAVAILABLE")
                self.assertLess(ms, DOWN_REPLY_MS + (1500 if "WAIT" in line
                                                     else 0),
                                "%s took %.0f ms\n%s" % (line % ns[0], ms,
                                                         self.logs()))
        self.assertEqual(s.req("PING"), "OK PONG")
        st = self.bstats(A)
        self.assertIn(st["redis"], ("up", "down"))
        self.assertEqual(s.req("HELD"), "OK 0")

        for m in masters[:2]:
            if fault == "pause":
                topo.resume(m)
            else:
                topo.restart(m)
        topo.wait_ready(30.0)
        # Three masters serve the slots again: the same ones, or (seen
        # once in a loaded CI run, after a pause) a replica promoted when
        # the majority came back and still saw its master as failed.  The
        # grants below find each name's master through the map.
        self.assertEqual(len(topo.masters()), len(masters))
        for ns, old in zip(names, toks):
            t = self.grant(s, ns[0])
            self.assertGreater(t, old)
            self.assertOn(topo, ns[0], s, t)
            self.assertEqual(s.req("RELEASE " + ns[0]), "OK 0")
        # The lock on the survivor outlived the outage (TTL 60 s).
        h.drain_events(0.2)
        self.assertEqual(h.events, [], self.logs())
        o = self.session(A, "o")
        self.assertHolds(h, held, tok, o)
        self.assertOn(topo, held, h, tok)
        self.wait_nodes(A, 3)
        for x in [h, s, o] + probes:
            x.sync()

    def test_majority_of_masters_paused(self):
        self.outage("pause")

    def test_majority_of_masters_killed(self):
        self.outage("kill")


if __name__ == "__main__":
    unittest.main()
