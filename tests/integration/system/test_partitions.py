"""
test_partitions.py - the broker under network partitions: every Redis,
sentinel, cluster node, broker and client on a host of its own (network
namespaces on one bridge, netpart.py), cuts made with iptables DROP rules,
both ways and one way, clients writing to a fenced resource, and a checker
over the whole history (history.py).

The scenarios (each starts its own hosts and servers, ~10-30 s):
  a  broker<->Redis cut shorter than a TTL (1.5 s, TTL 6 s): nothing is
     lost, nobody is told LOST, the holders' RELEASE answers OK 0;
  b  broker<->Redis cut longer than a TTL (5 s, TTL 2 s), both ways, and
     one way (Redis->broker dropped: commands run in Redis, no reply comes
     back): every hold on the cut-off broker (an exclusive lock, a shared
     hold and a permit among them) ends for its client, told EVENT LOST,
     no later than its confirmed renewal + TTL + JEOPARDY_BOUND_S, and the
     other broker's waiters get the keys; one way, a key that Redis still
     shows as the lost session's (as a renewal that ran there and whose
     reply was lost leaves it) is freed by the broker after the heal;
  c  Sentinel split brain (redis_replica_acks 0): the old master and one
     broker cut off from the replicas, the sentinels and the other broker
     for 12 s; clients reach both brokers; down-after-milliseconds 2000;
  d  the same with redis_replica_acks 1, min-replicas-to-write 1 and a
     replica on each side (1 master + 3 replicas: one stays with the old
     master, two go with the sentinels, so that each side has a master
     with a replica once the sentinels promote one: neither safeguard can
     refuse writes on either side);
  e  a client<->broker cut: the broker frees the client's keys within the
     keepalive budget (tcp_keepalive_s 1: 1 + 4 x 1 s) and a waiter gets
     them;
  f  Redis Cluster (3 masters + 3 replicas, cluster-node-timeout 1000,
     cluster-require-full-coverage no): a master cut off together with a
     broker for 8 s; that broker's holders are told LOST by the jeopardy
     rule, the other broker keeps serving the other masters' keys.

What is asserted (the issue's promises, no more; see history.py for why
each check is sound):
  - per key, tokens never go back: a hold whose ACQUIRE was sent after
    another hold's OK was read has a greater token;
  - every hold whose client can still reach its broker ends, for that
    client, no later than the moment the broker can no longer vouch for
    it + JEOPARDY_BOUND_S (b, c, d, f; see "vouch deadlines");
  - no loss unreported: of two holds of a key that overlapped, the one
    with the lower token (the one the resource refuses) was told LOST
    (EVENT LOST or ERR LOST), unless its client could not reach its
    broker; and no write of a hold never told LOST was refused;
  - the client<->broker cut (e): the broker frees the keys within the
    keepalive budget + KEEPALIVE_SLACK_S;
  - the scenario specifics above (a: nothing lost; b: the long holders
    are told EVENT LOST, the key is freed after the heal; f: the other
    broker keeps serving).
  Overlapping holders are reported (count and total time), not asserted
  away: fencing tokens are the defence for them.

Vouch deadlines.  The broker can no longer vouch for a hold once its last
confirmed renewal, counted from when that renewal was sent, plus the TTL
has passed.  A client cannot see renewals, so the test uses an upper
bound on that moment, from what it knows of the cut:
  - broker cut off from its Redis (b, both ways or one way; c/d: the
    majority-side broker from the old master; f: from every node but the
    one cut off with it): no renewal sent after the cut was in place
    (cut.t1) can be confirmed, so the deadline is at most cut.t1 + TTL;
  - c/d, the cut-off broker: it renews only while it holds the Sentinel
    lease, and the last sentinel answer it can get was asked before
    cut.t1 and is good for at most down-after-milliseconds: at most
    cut.t1 + DOWN_AFTER + TTL;
  - f, the cut-off broker's keys of the master cut off with it: that
    master refuses writes (CLUSTERDOWN) once it has lost the majority;
    the test watches it from the hub and takes the first moment it was
    seen saying cluster_state:fail (t_fail): at most t_fail + TTL.
The bound overestimates the true deadline by up to a renewal interval
(TTL/3), so "vouch->LOST" in the summary line (told_at - bound) is a lower
bound of the true delay and may be negative.  JEOPARDY_BOUND_S covers the
broker's timer, the write, and this process's reader thread on a loaded
2-core machine.

Every test prints one line to stderr:
  partitions[<scenario>]: grants=... overlaps=<holds>/<pairs>/<seconds>
  regressions=... unreported=... told_lost=... vouch_to_lost_ms p50/max ...
with LBT_TIMINGS=1 also the long holds and the cut's timeline.  Needs
root, ip(8) and iptables (make deps); skipped elsewhere.
PART_LOGDIR=<dir> keeps every broker's log.
"""

import collections
import os
import random
import re
import shutil
import socket
import sys
import threading
import time
import traceback
import unittest
import uuid

import harness
import netpart
from history import History, Hold, Resource, summary_line
from netpart import NsBroker, NsRedis
import topology
from topology import cli, hash_slot

JEOPARDY_BOUND_S = 0.5      # told no later than the vouch deadline + this
FREE_AFTER_HEAL_S = 6.0     # a key Redis still shows as a lost session's is
                            # freed this soon after the heal (reconnect:
                            # connect timeout 1 s + backoff up to 2 s)
KEEPALIVE_S = 1             # e: the broker's --tcp_keepalive_s
KEEPALIVE_BUDGET_S = KEEPALIVE_S + max(1, KEEPALIVE_S // 2) * 4
KEEPALIVE_SLACK_S = 2.0
DOWN_AFTER_MS = 2000        # c, d: sentinel down-after-milliseconds
NUDGE_S = 6.0               # c, d: no promotion yet (3.2-4.3 s measured):
                            # SENTINEL FAILOVER.  Well after the old side's
                            # lease (DOWN_AFTER_MS) ran out: forced before
                            # it (tried: 0.5 s), the new master grants keys
                            # the old side still holds, as Sentinel's own
                            # failover never does
LOCK_DELAY_MS = 1000        # --failover_lock_delay_ms (c, d, f)
REPLY_SLACK_S = 10.0        # a reply comes within its WAIT + this
METRICS_PORT = 9100         # each broker's, on its host's loopback
MASTER_NAME = topology.MASTER_NAME


def timings():
    return bool(os.environ.get("LBT_TIMINGS"))


class Closed(Exception):
    """The session's connection is gone."""


# --------------------------------------------------------------- client --

class World:
    """What the clients of one scenario share."""

    def __init__(self, net):
        self.net = net
        self.history = History()
        self.resource = Resource()
        self.stop = threading.Event()
        self.clients = []
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.replies = []           # (t, broker, key, kind of reply)

    def count(self, what, n=1):
        with self.lock:
            self.counts[what] += n

    def note_reply(self, broker, key, word):
        with self.lock:
            self.replies.append((time.monotonic(), broker, key, word))


class Session:
    """One connection of a client, made in the client's thread (already
    inside its host)."""

    def __init__(self, client):
        self.client = client
        self.world = client.world
        self.broker = client.broker
        self.hold = None
        self.buf = b""
        self.cid = None
        self.sock = socket.create_connection(
            (self.broker.ip, self.broker.port), timeout=2.0)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if client.keepalive:
            # What PROTOCOL.md tells client authors: find a dead broker
            # (or a cut) within a budget of our own.
            s = self.sock
            s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 4)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 5000)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _fill(self, timeout):
        self.sock.settimeout(max(0.001, timeout))
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return
        except OSError as e:
            raise Closed(str(e))
        if not data:
            raise Closed("EOF")
        self.buf += data

    def _pop(self):
        """The next reply line (EVENT lines handled on the way), or
        None."""
        while b"\n" in self.buf:
            raw, self.buf = self.buf.split(b"\n", 1)
            if not raw.endswith(b"\r"):
                self.world.history.violation("reply not ended by CRLF: %r"
                                             % raw)
            text = raw.rstrip(b"\r").decode("latin-1")
            if text.startswith("EVENT "):
                self._event(text)
                continue
            return text
        return None

    def _event(self, text):
        t = time.monotonic()
        m = re.fullmatch(r"EVENT LOST (\S+) ([0-9]+)", text)
        h = self.hold
        if not m:
            self.world.history.violation("unknown event %r" % text)
        elif h is None or h.key != m.group(1) or h.token != int(m.group(2)):
            self.world.history.violation(
                "EVENT LOST names no lock the session holds: %r (holds %s)"
                % (text, h and "%s %d" % (h.key, h.token)))
        else:
            h.tell("EVENT LOST", t)
            h.end(t, "event")
            self.world.count("event_lost")

    def request(self, line, timeout):
        self.sock.sendall(line.encode() + b"\n")
        deadline = time.monotonic() + timeout
        while True:
            r = self._pop()
            if r is not None:
                return r
            left = deadline - time.monotonic()
            if left <= 0:
                self.world.history.violation(
                    "no reply to %r from %s within %.1f s"
                    % (line, self.broker.host.host, timeout), "no reply")
                raise Closed("no reply")
            self._fill(min(left, 0.2))

    def pump(self, until, done):
        """Read EVENT lines until time `until`, done() or the hold told."""
        while True:
            r = self._pop()
            if r is not None:
                self.world.history.violation("reply %r with no request "
                                             "outstanding" % r)
            if (self.hold is not None and self.hold.told) or done():
                return
            left = until - time.monotonic()
            if left <= 0:
                return
            self._fill(min(left, 0.05))


class PClient(threading.Thread):
    """A client on a host, talking to one broker.  Each hold: ACQUIRE key
    [SHARED | LIMIT 1] WAIT w TTL t; on OK write to the resource, hold
    (reading events) for a random time in hold_s, or with hold_s None
    until release() or the end, write again unless told LOST, RELEASE.
    once: after one hold, stay connected and idle.  Reconnects when its
    connection closes."""

    def __init__(self, world, name, host, broker, keys, ttl_ms=2000,
                 wait_ms=500, hold_s=(0.05, 0.2), kind="x", once=False,
                 keepalive=False, seed=None):
        super().__init__(name=name, daemon=True)
        self.world = world
        self.host = host                # Host
        self.broker = broker            # NsBroker
        self.keys = list(keys)
        self.ttl_ms = ttl_ms
        self.wait_ms = wait_ms
        self.hold_s = hold_s
        self.kind = kind
        self.once = once
        self.keepalive = keepalive
        self.rng = random.Random(seed)
        self.release_evt = threading.Event()
        self.done = False
        self.holds = []
        self.sess = None
        self.nhold = 0

    def release(self):
        self.release_evt.set()

    def current(self):
        s = self.sess
        return s.hold if s is not None else None

    def run(self):
        try:
            self.host.enter()
            while not self.world.stop.is_set():
                try:
                    self.session()
                except Closed:
                    self.world.count("closed")
                    time.sleep(0.2)
                except OSError:         # connect: refused or cut
                    time.sleep(0.3)
        except Exception:
            self.world.history.violation("client %s crashed:\n%s"
                                         % (self.name,
                                            traceback.format_exc()))

    def session(self):
        sess = Session(self)
        self.sess = sess
        try:
            r = sess.request("HELLO %s" % self.name, REPLY_SLACK_S)
            m = re.fullmatch(r"OK (%s) lockbroker/\S+" % harness.UUID_RE, r)
            if not m:
                raise AssertionError("HELLO answered %r" % r)
            sess.cid = m.group(1)
            if sess.request("EVENTS ON", REPLY_SLACK_S) != "OK":
                raise AssertionError("EVENTS ON refused")
            while not self.world.stop.is_set():
                if self.done:
                    sess.pump(time.monotonic() + 0.2,
                              self.world.stop.is_set)
                    continue
                self.one_hold(sess)
        except Closed:
            h = sess.hold
            if h is not None:
                h.end(time.monotonic(), "closed")
            raise
        finally:
            sess.close()
            self.sess = None

    def one_hold(self, sess):
        key = self.rng.choice(self.keys)
        word = {"x": "", "shared": " SHARED", "permit": " LIMIT 1"}[self.kind]
        line = "ACQUIRE %s%s WAIT %d TTL %d" % (key, word, self.wait_ms,
                                                self.ttl_ms)
        r_t = time.monotonic()
        r = sess.request(line, self.wait_ms / 1000.0 + REPLY_SLACK_S)
        bname = self.broker.host.host
        m = re.fullmatch(r"OK ([0-9]+)", r)
        if not m:
            self.world.note_reply(bname, key, " ".join(r.split(" ")[:2]))
            if r == "BUSY":
                return
            if r.startswith("ERR UNAVAILABLE"):
                self.world.count("unavailable:" + bname)
                time.sleep(self.rng.uniform(0.05, 0.15))
                return
            raise AssertionError("%s: %r answered %r" % (self.name, line, r))
        s = time.monotonic()
        self.world.note_reply(bname, key, "OK")
        self.nhold += 1
        h = Hold("%s/%d" % (self.name, self.nhold), key, self.kind,
                 int(m.group(1)), self.ttl_ms, self.name, sess.cid, bname,
                 self.host.host, r_t, s)
        sess.hold = h
        self.holds.append(h)
        if self.once:
            self.done = True
        self.world.history.add(h)
        self.world.resource.write(h)
        if self.hold_s is None:
            until = float("inf")
        else:
            until = s + self.rng.uniform(*self.hold_s)
        sess.pump(until, lambda: self.release_evt.is_set() or
                  self.world.stop.is_set())
        if h.told:
            sess.hold = None
            return
        self.world.resource.write(h)
        h.end(time.monotonic(), "released")
        r = sess.request("RELEASE %s" % key, REPLY_SLACK_S)
        h.release_reply = r
        if r.startswith("ERR LOST"):
            h.tell("ERR LOST", time.monotonic())
            self.world.count("err_lost")
        elif not (r == "OK 0" or r.startswith("ERR UNAVAILABLE")):
            self.world.history.violation("%s: RELEASE %s answered %r"
                                         % (self.name, key, r))
        sess.hold = None


# ----------------------------------------------------------------- base --

class PartitionCase(unittest.TestCase):
    """One scenario: its own hosts, servers and clients; the body runs
    inside the hub (Net.run), the control host that reaches them all."""

    def setUp(self):
        netpart.skip_unless_usable()
        self.t_begin = time.monotonic()
        self.prefix = "lbp" + uuid.uuid4().hex[:10]
        self.brokers = []

    def start_net(self, hosts):
        self.net = netpart.Net(hosts)
        self.addCleanup(self.net.close)
        self.world = World(self.net)
        return self.net

    def broker(self, host, redis_addr, *extra):
        b = NsBroker(self.net[host], redis_addr, self.prefix,
                     "--metrics_port", METRICS_PORT, *extra,
                     ready_timeout=20.0)
        self.addCleanup(b.close)
        self.brokers.append(b)
        if os.environ.get("PART_LOGDIR"):
            self.addCleanup(self.keep_log, b)
        return b

    def keep_log(self, b):
        d = os.environ["PART_LOGDIR"]
        os.makedirs(d, exist_ok=True)
        try:
            shutil.copy(b.logpath, os.path.join(d, "%s-%s.log" % (
                self.id().rsplit(".", 1)[-1], b.host.host)))
        except OSError:
            pass

    def client(self, name, host, broker, keys, **kw):
        c = PClient(self.world, name, self.net[host], broker, keys,
                    seed=hash((self.prefix, name)), **kw)
        if not self.world.clients:
            self.addCleanup(self.stop_clients)
        self.world.clients.append(c)
        return c

    def start_clients(self, first=()):
        """Start the clients; those in first before the others, once they
        hold their keys (so that the others queue behind them)."""
        for c in first:
            c.start()
        self.wait_holding(first)
        for c in self.world.clients:
            if c not in first:
                c.start()

    def stop_clients(self):
        self.world.stop.set()
        for c in self.world.clients:
            if c.is_alive():
                c.join(timeout=REPLY_SLACK_S + 5)
        hung = [c.name for c in self.world.clients if c.is_alive()]
        if hung:
            self.world.history.violation("clients still running after "
                                         "stop: %s" % hung)

    def wait_holding(self, clients, timeout=10.0):
        harness.wait_until(lambda: all(c.current() is not None
                                       for c in clients), timeout,
                           what="%s to hold their keys"
                           % [c.name for c in clients])

    def wait_granted(self, clients, timeout):
        """Wait until each client was granted once; returns their first
        holds (None where the time ran out)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and \
                not all(c.holds for c in clients):
            time.sleep(0.02)
        return [c.holds[0] if c.holds else None for c in clients]

    def wait_up(self, brokers, timeout, master=None):
        """Wait until every broker says redis=up (on master, if given);
        returns the time it took."""
        t0 = time.monotonic()

        def up():
            for b in brokers:
                st = b.stats()
                if st.get("redis") != "up":
                    return False
                if master and st.get("redis_master") != master:
                    return False
            return True
        harness.wait_until(up, timeout, interval=0.1,
                           what="%s redis=up%s" % (
                               [b.host.host for b in brokers],
                               " on " + master if master else ""))
        return time.monotonic() - t0

    def lock_key(self, key):
        return "%s:lock:%s" % (self.prefix, key)

    def excused(self, h):
        """The hold's client could not reach its broker during the hold."""
        return self.net.severed_during(h.host, h.broker, h.s, h.e)

    def lost_causes(self):
        """lockbroker_lost_locks_total by cause, per broker (the label the
        daemon gains with the jeopardy rule; "-" where there is none)."""
        out = []
        for b in self.brokers:
            text = b.metrics(METRICS_PORT)
            causes = []
            for labels, n in re.findall(r'^lockbroker_lost_locks_total'
                                        r'(\{[^}]*\})? ([0-9.e+]+)$',
                                        text, re.M):
                m = re.search(r'cause="([^"]*)"', labels)
                causes.append("%s=%s" % (m.group(1) if m else "all", n))
            out.append("%s:%s" % (b.host.host, ",".join(causes) or "-"))
        return " ".join(out)

    def lost_before(self, t):
        """Holds told LOST before t (before any cut: a lease or a renewal
        that failed on a healthy network)."""
        return sum(1 for h in self.world.history.holds
                   if h.told and h.told_at < t)

    def grants_in(self, t_from, t_to):
        """Grants per broker with s in [t_from, t_to]."""
        n = collections.Counter(h.broker for h in self.world.history.holds
                                if t_from <= h.s <= t_to)
        return ",".join("%s=%d" % kv for kv in sorted(n.items())) or "0"

    def finish(self, name, deadline=None, extra="", timeline=()):
        """Stop the clients, check the history, print the summary line,
        fail on violations.  Returns the numbers."""
        self.stop_clients()
        w = self.world
        nums = w.history.check(w.resource, deadline=deadline,
                               bound_s=JEOPARDY_BOUND_S,
                               excused=self.excused)
        line = summary_line(name, nums, extra)
        try:
            line += " lost_by_cause(%s)" % self.lost_causes()
        except Exception:                   # a report, never a failure
            pass
        line += " wall=%.1fs" % (time.monotonic() - self.t_begin)
        sys.stderr.write("\n" + line + "\n")
        if timings():
            t0 = w.history.t0
            for what, t in timeline:
                sys.stderr.write("  %8.3f %s\n" % (t - t0, what))
            for c in w.clients:
                if c.hold_s is None or c.once:
                    for h in c.holds:
                        sys.stderr.write("  " + h.describe(t0) + "\n")
        sys.stderr.flush()
        if w.history.violation_count():
            cuts = "\n".join("  %s at %.3f-%.3f, healed %s" % (
                c.describe(), c.t0 - w.history.t0, c.t1 - w.history.t0,
                "-" if c.healed_t1 is None else
                "%.3f" % (c.healed_t1 - w.history.t0))
                for c in self.net.cuts)
            self.fail("%s\n\n%s\ncuts:\n%s" % (line, w.history.report(),
                                                cuts))
        return nums

    def fresh_grant(self, host, broker, key, wait_ms=3000, ttl_ms=2000):
        """One ACQUIRE from a new session (recorded in the history), then
        RELEASE; returns the hold or None (and the reply)."""
        c = self.net[host].connect(broker.ip, broker.port,
                                   timeout=wait_ms / 1000.0 + REPLY_SLACK_S)
        try:
            cid = c.hello("fresh")
            r_t = time.monotonic()
            r = c.req("ACQUIRE %s WAIT %d TTL %d" % (key, wait_ms, ttl_ms))
            m = re.fullmatch(r"OK ([0-9]+)", r)
            if not m:
                return None, r
            h = Hold("fresh/%s" % key, key, "x", int(m.group(1)), ttl_ms,
                     "fresh", cid, broker.host.host, host, r_t,
                     time.monotonic())
            self.world.history.add(h)
            self.world.resource.write(h)
            h.end(time.monotonic(), "released")
            h.release_reply = c.req("RELEASE %s" % key)
            return h, r
        finally:
            c.close()


# ------------------------------------------------- a, b, e: one Redis --

class TestRedisCut(PartitionCase):
    """One Redis, brokers A (ba, the one cut off) and B (bb); clients on
    c1 and c2."""

    HOSTS = ["redis", "ba", "bb", "c1", "c2"]

    def start_servers(self, *broker_args, with_b=True):
        self.redis = NsRedis(self.net["redis"])
        self.addCleanup(self.redis.close)
        self.ba = self.broker("ba", self.redis.addr, *broker_args)
        self.bb = self.broker("bb", self.redis.addr, *broker_args) \
            if with_b else None

    def test_a_redis_cut_shorter_than_ttl(self):
        self.start_net(self.HOSTS)
        self.net.run(self.scenario_a)

    def scenario_a(self):
        ttl, cut_s = 6000, 1.5
        self.start_servers()
        longs = [self.client("long-a%d" % i, "c1", self.ba, ["la%d" % i],
                             ttl_ms=ttl, hold_s=None, once=True)
                 for i in range(2)]
        waiters = [self.client("wait-b%d" % i, "c2", self.bb, ["la%d" % i],
                               ttl_ms=ttl, wait_ms=30000, hold_s=(0.1, 0.1),
                               once=True) for i in range(2)]
        for i in range(2):
            self.client("churn-a%d" % i, "c1", self.ba, ["ka0", "ka1"],
                        ttl_ms=ttl)
            self.client("churn-b%d" % i, "c2", self.bb, ["ka0", "ka1"],
                        ttl_ms=ttl)
        self.start_clients(first=longs)
        time.sleep(1.0)                 # waiters queued, churn going
        cut = self.net.cut(["ba"], ["redis"])
        time.sleep(cut_s)
        heal = self.net.heal()
        up_s = self.wait_up([self.ba], 10.0)
        time.sleep(3.0)                 # past the TTL of the cut's start
        for c in longs:
            c.release()
        got = self.wait_granted(waiters, 10.0)
        time.sleep(0.3)
        nums = self.finish(
            "a redis cut %.1fs < ttl %.0fs" % (cut_s, ttl / 1000.0),
            extra=" (during cut %s) redis_up_after_heal=%.2fs" % (
                self.grants_in(cut.t0, heal[1]), up_s),
            timeline=[("cut", cut.t1), ("heal", heal[1])])
        self.assertEqual(nums["told_lost"], 0,
                         "a cut shorter than the TTL lost locks")
        for c in longs:
            self.assertEqual([h.release_reply for h in c.holds], ["OK 0"],
                             "%s: its lock was not kept through the cut"
                             % c.name)
        for c, h in zip(waiters, got):
            self.assertIsNotNone(h, "%s never got the key after its holder"
                                 " released it" % c.name)
        self.assertEqual(nums["stale_rejected"], 0)

    def test_b_redis_cut_longer_than_ttl_both_ways(self):
        self.start_net(self.HOSTS)
        self.net.run(lambda: self.scenario_b(oneway=False))

    def test_b_redis_cut_longer_than_ttl_one_way(self):
        self.start_net(self.HOSTS)
        self.net.run(lambda: self.scenario_b(oneway=True))

    def scenario_b(self, oneway):
        ttl, cut_s = 2000, 5.0
        self.start_servers()
        kinds = [("lx", "x"), ("ls", "shared"), ("lp", "permit")]
        longs = [self.client("long-%s" % k, "c1", self.ba, [k], ttl_ms=ttl,
                             hold_s=None, once=True, kind=kind)
                 for k, kind in kinds]
        # Another broker's waiters: the keys' next holders.  One way, no
        # waiter for lx: it is the key Redis keeps (below), handed on by
        # a fresh ACQUIRE once the broker freed it.
        waiters = [self.client("wait-%s" % k, "c2", self.bb, [k], ttl_ms=ttl,
                               wait_ms=30000, hold_s=(0.1, 0.1), once=True,
                               kind="permit" if kind == "permit" else "x")
                   for k, kind in kinds if not (oneway and k == "lx")]
        for i in range(2):
            self.client("churn-a%d" % i, "c1", self.ba, ["kb0", "kb1"],
                        ttl_ms=ttl)
            self.client("churn-b%d" % i, "c2", self.bb, ["kb0", "kb1"],
                        ttl_ms=ttl)
        self.start_clients(first=longs)
        time.sleep(1.0)
        if oneway:
            cut = self.net.cut(["redis"], ["ba"], both=False)
        else:
            cut = self.net.cut(["ba"], ["redis"])
        deadline_at = cut.t1 + ttl / 1000.0
        timeline = [("cut %s" % cut.describe(), cut.t1),
                    ("vouch deadline (bound)", deadline_at)]
        kept = None
        if oneway:
            kept = self.keep_in_redis(longs[0], deadline_at)
            timeline.append(("lx kept in Redis: %s" % (kept[1],), kept[0]))
        time.sleep(max(0.0, cut.t0 + cut_s - time.monotonic()))
        heal = self.net.heal()
        timeline.append(("heal", heal[1]))
        freed = fresh = r = None
        if kept and kept[1] == "kept":
            freed = self.wait_freed(longs[0].holds[0], heal[1])
            if freed is not None:
                timeline.append(("lx freed in Redis", freed))
                fresh, r = self.fresh_grant("c2", self.bb, "lx", ttl_ms=ttl)
        up_s = self.wait_up([self.ba], 15.0)
        time.sleep(1.5)
        name = "b redis cut %.0fs > ttl %.0fs, %s" % (
            cut_s, ttl / 1000.0,
            "one way (redis->broker dropped)" if oneway else "both ways")

        def deadline(h):
            # (the cut-off broker cannot grant during the cut)
            if h.broker == "ba" and h.s <= cut.t1:
                return cut.t1 + h.ttl_ms / 1000.0
            return None
        # When the other broker's waiters got the keys: about when Redis
        # let them expire, so about when the cut-off holders must know.
        handed = ",".join("-" if not c.holds else "%+.2f" % (
            c.holds[0].s - deadline_at) for c in waiters)
        self.finish(
            name, deadline=deadline,
            extra=" (during cut %s) redis_up_after_heal=%.2fs "
            "waiters_granted_after_deadline_s=%s%s" % (
                self.grants_in(cut.t0, heal[1]), up_s, handed,
                "" if kept is None else
                " lx_in_redis_at_deadline=%s freed_after_heal=%s" % (
                    kept[1], "-" if freed is None else
                    "%.2fs" % (freed - heal[1]))),
            timeline=timeline)
        for c in longs:
            h = c.holds[0]
            self.assertEqual(h.told, "EVENT LOST",
                             "%s (%s) was not told EVENT LOST: %s"
                             % (c.name, c.kind, h.describe(
                                 self.world.history.t0)))
        if kept and kept[1] == "kept":
            self.assertIsNotNone(
                freed, "Redis still showed the lost hold's value after the "
                "heal, and the broker did not free it within %.0f s"
                % FREE_AFTER_HEAL_S)
            self.assertIsNotNone(fresh, "lx not granted on the other broker"
                                 " once it was freed: %r" % (r,))

    def keep_in_redis(self, client, deadline_at):
        """One way: once the broker has stopped renewing (it says
        redis=down, or it told the hold LOST, or the deadline bound
        passed), make sure Redis still shows the session's value for a
        while, as a renewal that ran in Redis and whose reply was lost
        leaves it: if the key still holds exactly that value, extend it to
        30 s.  Returns (t, "kept" or "gone")."""
        h = client.holds[0]

        def stopped():
            return (h.told or
                    time.monotonic() > deadline_at + JEOPARDY_BOUND_S or
                    self.ba.stats().get("redis") != "up")
        harness.wait_until(stopped, deadline_at - time.monotonic() + 5.0,
                           interval=0.01, what="the broker to stop renewing")
        value = "%s:%d" % (h.sid, h.token)
        r = cli(self.redis.addr, "EVAL",
                "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end "
                "return -1", 1, self.lock_key(h.key), value, 30000)
        return time.monotonic(), "kept" if r == 1 else "gone"

    def wait_freed(self, h, healed):
        """The time Redis stopped showing h's value, within
        FREE_AFTER_HEAL_S of the heal, else None."""
        value = "%s:%d" % (h.sid, h.token)
        deadline = healed + FREE_AFTER_HEAL_S
        while time.monotonic() < deadline:
            if cli(self.redis.addr, "GET", self.lock_key(h.key)) != value:
                return time.monotonic()
            time.sleep(0.02)
        return None

    def test_e_client_cut_from_broker(self):
        self.start_net(["redis", "ba", "c1", "c2"])
        self.net.run(self.scenario_e)

    def scenario_e(self):
        self.start_servers("--tcp_keepalive_s", KEEPALIVE_S, with_b=False)
        longs = [self.client("long-c1-%d" % i, "c1", self.ba, ["le%d" % i],
                             ttl_ms=5000, hold_s=None, once=True,
                             keepalive=True) for i in range(2)]
        waiters = [self.client("wait-c2-%d" % i, "c2", self.ba, ["le%d" % i],
                               ttl_ms=5000, wait_ms=30000,
                               hold_s=(0.1, 0.1), once=True)
                   for i in range(2)]
        self.client("churn-c2", "c2", self.ba, ["ke0"], ttl_ms=5000)
        self.start_clients(first=longs)
        time.sleep(1.0)
        cut = self.net.cut(["c1"], ["ba"])
        got = self.wait_granted(waiters, KEEPALIVE_BUDGET_S +
                                KEEPALIVE_SLACK_S + 10.0)
        # The cut-off clients find out by their own keepalive (same
        # budget) if the cut lasts: let it, for the report.
        until = cut.t1 + KEEPALIVE_BUDGET_S + KEEPALIVE_SLACK_S
        while time.monotonic() < until and \
                not all(c.holds[0].e is not None for c in longs):
            time.sleep(0.05)
        heal = self.net.heal()
        time.sleep(0.5)
        freed = [None if h is None else h.s - cut.t1 for h in got]
        noticed = [c.holds[0].e - cut.t1 if c.holds and
                   c.holds[0].how == "closed" else None for c in longs]
        self.finish(
            "e client<->broker cut, tcp_keepalive_s %d" % KEEPALIVE_S,
            extra=" freed_after_cut_s=%s (bound %.0f+%.0f) "
            "client_noticed_after_s=%s" % (
                ",".join("-" if f is None else "%.2f" % f for f in freed),
                KEEPALIVE_BUDGET_S, KEEPALIVE_SLACK_S,
                ",".join("-" if f is None else "%.2f" % f for f in noticed)),
            timeline=[("cut", cut.t1), ("heal", heal[1])])
        for c, f in zip(waiters, freed):
            self.assertIsNotNone(f, "%s never got the cut-off client's key"
                                 % c.name)
            self.assertLessEqual(
                f, KEEPALIVE_BUDGET_S + KEEPALIVE_SLACK_S,
                "%s got the cut-off client's key %.2f s after the cut "
                "(keepalive budget %d s)" % (c.name, f, KEEPALIVE_BUDGET_S))


# ------------------------------------------------- c, d: split brain --

class TestSentinelSplitBrain(PartitionCase):
    """The old master and broker A cut off from the replicas, the
    sentinels and broker B; clients (c1, c2) reach both brokers."""

    CUT_S = 12.0

    def test_c_split_brain_acks_0(self):
        self.start_net(["m1", "r1", "r2", "s1", "s2", "s3", "ba", "bb", "c1",
                        "c2"])
        self.net.run(lambda: self.scenario(
            "c sentinel split brain, acks 0", ["m1", "r1", "r2"],
            old_side=["m1", "ba"], redis_args=(), broker_args=()))

    def test_d_split_brain_acks_1_min_replicas(self):
        self.start_net(["m1", "ra", "rb", "rc", "s1", "s2", "s3", "ba", "bb",
                        "c1", "c2"])
        self.net.run(lambda: self.scenario(
            "d sentinel split brain, acks 1 + min-replicas-to-write 1",
            ["m1", "ra", "rb", "rc"], old_side=["m1", "ra", "ba"],
            redis_args=("--min-replicas-to-write", 1,
                        "--min-replicas-max-lag", 1),
            broker_args=("--redis_replica_acks", 1,
                         "--redis_replica_ack_timeout_ms", 200)))

    def scenario(self, name, nodes, old_side, redis_args, broker_args):
        ttl = 2000
        net = self.net
        topo = netpart.NsSentinelTopology(
            [net[n] for n in nodes], [net[s] for s in ("s1", "s2", "s3")],
            down_after_ms=DOWN_AFTER_MS, redis_args=redis_args,
            ready_timeout=30.0)
        self.addCleanup(topo.close)
        # Every replica re-pointed at the promoted one at once: with 1,
        # Sentinel may first pick the replica cut off on the old side and
        # wait out failover-timeout (10 s) before it re-points the one
        # the new master needs for min-replicas-to-write.
        for s in topo.sentinels:
            cli(s.addr, "SENTINEL", "SET", MASTER_NAME, "parallel-syncs",
                len(nodes) - 1)
        args = ("--redis_sentinels", topo.sentinel_addrs(),
                "--redis_master_name", MASTER_NAME,
                "--failover_lock_delay_ms", LOCK_DELAY_MS) + broker_args
        self.ba = self.broker("ba", None, *args)
        self.bb = self.broker("bb", None, *args)
        keys = ["kc0", "kc1", "kc2"]
        for i in range(3):
            self.client("churn-a%d" % i, "c1", self.ba, keys, ttl_ms=ttl,
                        wait_ms=1000, hold_s=(0.05, 0.3))
            self.client("churn-b%d" % i, "c2", self.bb, keys, ttl_ms=ttl,
                        wait_ms=1000, hold_s=(0.05, 0.3))
        longs = [self.client("long-a", "c1", self.ba, ["la"], ttl_ms=ttl,
                             hold_s=None, once=True),
                 self.client("long-b", "c2", self.bb, ["lb"], ttl_ms=ttl,
                             hold_s=None, once=True)]
        self.start_clients(first=longs)
        time.sleep(2.0)
        old_master = topo.master_addr()
        new_side = [n for n in nodes + ["s1", "s2", "s3", "bb"]
                    if n not in old_side]
        cut = net.cut(old_side, new_side)
        timeline = [("cut %s" % cut.describe(), cut.t1)]
        promoted = None
        # Sentinel's own election can fail (a split vote) and is retried
        # only after 2 x failover-timeout, past the cut: asked for after
        # NUDGE_S as an operator would (topology.wait_new_master); what is
        # tested is the brokers on both sides, not Sentinel's vote.
        nudge = topology.FailoverNudge(topo, old_master, cut.t1 + NUDGE_S)
        while time.monotonic() < cut.t0 + self.CUT_S:
            if promoted is None:
                addrs = [a for a in topo.master_addrs() if a]
                if len(addrs) == 3 and len(set(addrs)) == 1 and \
                        addrs[0] != old_master:
                    promoted = time.monotonic()
                    timeline.append(("sentinels agree on %s" % addrs[0],
                                     promoted))
                elif nudge.poll():
                    timeline.append(("no promotion %.0f s after the cut: "
                                     "failover asked for" % NUDGE_S,
                                     time.monotonic()))
            time.sleep(0.1)
        heal = net.heal()
        timeline.append(("heal", heal[1]))
        new_master = topo.master_addr()
        up_s = self.wait_up([self.ba, self.bb], 20.0, master=new_master)
        time.sleep(1.5)

        lease_end = cut.t1 + DOWN_AFTER_MS / 1000.0

        def deadline(h):
            if h.broker == "ba" and h.s < heal[0]:
                return lease_end + h.ttl_ms / 1000.0
            if h.broker == "bb" and h.s <= cut.t1:
                return cut.t1 + h.ttl_ms / 1000.0
            return None
        late_grants = sum(1 for h in self.world.history.holds
                          if h.broker == "ba" and lease_end < h.s < heal[0])
        self.finish(
            name, deadline=deadline,
            extra=" (during cut %s; on ba after cut+down_after: %d) "
            "lost_before_cut=%d failover_after_cut=%s "
            "brokers_on_%s_after_heal=%.2fs" % (
                self.grants_in(cut.t0, heal[1]), late_grants,
                self.lost_before(cut.t0),
                "-" if promoted is None else "%.2fs" % (promoted - cut.t1),
                new_master, up_s),
            timeline=timeline)
        self.assertIsNotNone(promoted, "the sentinels did not promote a "
                             "replica during the %.0f s cut (the scenario's "
                             "premise)" % self.CUT_S)


# ------------------------------------------------------ f: a cluster --

class TestClusterMasterCut(PartitionCase):
    """A 3 + 3 Redis Cluster; one master and broker A cut off from the
    other five nodes and broker B."""

    CUT_S = 8.0
    NODES = ["n0", "n1", "n2", "n3", "n4", "n5"]

    def test_f_cluster_master_cut_with_broker(self):
        self.start_net(self.NODES + ["ba", "bb", "c1", "c2"])
        self.net.run(self.scenario_f)

    def keys_by_master(self, topo, want):
        """{master addr: [key names]} with `want` names for each master
        (the lock keys' slots decide)."""
        slots = topo.slot_map()
        out = collections.defaultdict(list)
        i = 0
        while any(len(out[m]) < want for _, _, m in slots):
            name = "f%d" % i
            m = topology.owner_in(slots, hash_slot(self.lock_key(name)))
            if len(out[m]) < want:
                out[m].append(name)
            i += 1
        return out

    def scenario_f(self):
        ttl = 2000
        net = self.net
        topo = netpart.NsClusterTopology([net[n] for n in self.NODES])
        self.addCleanup(topo.close)
        masters = topo.masters()
        mx = topo.node(masters[0])
        others = [topo.node(m) for m in masters[1:]]
        # the node asked may not list the replica yet (gossip)
        harness.wait_until(lambda: topo.replicas_of(mx), 10.0,
                           what="the cut master's replica listed")
        rx = topo.replicas_of(mx)[0]
        args = ("--redis_cluster", topo.seeds(),
                "--failover_lock_delay_ms", LOCK_DELAY_MS)
        self.ba = self.broker("ba", None, *args)
        self.bb = self.broker("bb", None, *args)
        names = self.keys_by_master(topo, 3)
        kx = names[mx.addr]                     # the cut-off master's keys
        ko = [names[o.addr] for o in others]
        self.on_mx = set(kx)
        churn_keys = [kx[0], ko[0][0], ko[1][0]]
        for i in range(2):
            self.client("churn-a%d" % i, "c1", self.ba, churn_keys,
                        ttl_ms=ttl, wait_ms=1000)
            self.client("churn-b%d" % i, "c2", self.bb, churn_keys,
                        ttl_ms=ttl, wait_ms=1000)
        longs = [self.client("long-a-mx", "c1", self.ba, [kx[1]], ttl_ms=ttl,
                             hold_s=None, once=True),
                 self.client("long-a-other", "c1", self.ba, [ko[0][1]],
                             ttl_ms=ttl, hold_s=None, once=True),
                 self.client("long-b-mx", "c2", self.bb, [kx[2]], ttl_ms=ttl,
                             hold_s=None, once=True),
                 self.client("long-b-other", "c2", self.bb, [ko[1][1]],
                             ttl_ms=ttl, hold_s=None, once=True)]
        self.start_clients(first=longs)
        time.sleep(2.0)
        old_side = [mx.host.host, "ba"]
        new_side = [n.host.host for n in topo.nodes if n is not mx] + ["bb"]
        cut = net.cut(old_side, new_side)
        timeline = [("cut %s" % cut.describe(), cut.t1)]
        t_fail = t_promoted = None
        while time.monotonic() < cut.t0 + self.CUT_S:
            ci = topology._quiet(topology.cluster_info, mx.addr,
                                 timeout=0.5)
            if t_fail is None and ci and ci.get("cluster_state") == "fail":
                t_fail = time.monotonic()
                timeline.append(("%s says cluster_state:fail" % mx.addr,
                                 t_fail))
            if t_promoted is None and topology.role_of(rx.addr) == "master":
                t_promoted = time.monotonic()
                timeline.append(("%s promoted" % rx.addr, t_promoted))
            time.sleep(0.05)
        heal = net.heal()
        timeline.append(("heal", heal[1]))
        up_s = self.wait_up([self.ba, self.bb], 20.0)
        time.sleep(2.0)

        def deadline(h):
            if h.broker == "ba" and h.s < heal[0]:
                if h.key in self.on_mx:
                    return None if t_fail is None else \
                        t_fail + h.ttl_ms / 1000.0
                return cut.t1 + h.ttl_ms / 1000.0
            if h.broker == "bb" and h.key in self.on_mx and h.s <= cut.t1:
                return cut.t1 + h.ttl_ms / 1000.0
            return None
        # The other broker keeps serving the other masters' keys.
        served = collections.Counter(
            h.key for h in self.world.history.holds
            if h.broker == "bb" and h.key not in self.on_mx and
            cut.t1 + 1.0 <= h.s <= heal[0])
        told_b_other = [h for h in self.world.history.holds
                        if h.broker == "bb" and h.key not in self.on_mx and
                        h.told and h.s <= heal[1]]
        self.finish(
            "f cluster master cut off with a broker", deadline=deadline,
            extra=" (during cut %s) lost_before_cut=%d mx_fail_after_cut=%s "
            "replica_promoted_after_cut=%s brokers_up_after_heal=%.2fs "
            "bb_other_keys_granted_in_cut=%d" % (
                self.grants_in(cut.t0, heal[1]), self.lost_before(cut.t0),
                "-" if t_fail is None else "%.2fs" % (t_fail - cut.t1),
                "-" if t_promoted is None else
                "%.2fs" % (t_promoted - cut.t1), up_s, sum(served.values())),
            timeline=timeline)
        self.assertIsNotNone(t_fail, "%s never said cluster_state:fail "
                             "while cut off (the scenario's premise)"
                             % mx.addr)
        for c in longs[:3]:
            self.assertEqual(c.holds[0].told, "EVENT LOST",
                             "%s was not told EVENT LOST" % c.name)
        self.assertEqual(told_b_other, [],
                         "the other broker lost keys of the masters it "
                         "still reached")
        for k in churn_keys[1:]:
            self.assertGreater(served[k], 0, "the other broker granted no "
                               "%s (on a master it reaches) during the cut"
                               % k)


if __name__ == "__main__":
    unittest.main()
