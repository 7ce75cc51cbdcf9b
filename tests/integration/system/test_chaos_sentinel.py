"""
test_chaos_sentinel.py - the chaos test of test_chaos.py on a Redis
Sentinel topology, with master kills under load (issue 10: "Extend the
chaos test with master kills under load: 0 violations checked by a fenced
resource").

Set-up
  * the store: topology.SentinelTopology, 1 master + 2 replicas + 3
    Sentinels (down-after-milliseconds 500, quorum 2), no persistence;
  * three lockbrokerd in Sentinel mode on it (--redis_sentinels,
    --redis_master_name, no -r), one prefix, --redis_timeout_ms 500,
    --failover_lock_delay_ms 1000;
  * test_chaos's machinery as it is: the fenced resource (a separate,
    never faulted redis-server that accepts a write iff its token is >=
    the highest it accepted for the key, and logs every write), its client
    threads (ACQUIRE <key> WAIT 300 TTL 600, write, hold 5-20 ms, write,
    RELEASE, a few holds per session; 20 of them here, on 4 keys), its
    reply accounting and its checks.
  * the faults, one at a time, 0.8-1.5 s of calm before each, a fixed
    number of each kind in a random order (CHAOS_SEED replays it), each
    followed by test_chaos's settle (every broker redis=up, no client
    stalled) and counted as a fault window until 2 s after that:
      kill_master       kill -9 of the master.  The holders that are
                        between their two writes at that moment stall
                        until every broker is on the new master, so they
                        hold their locks right through the failover (the
                        keys expire on the promoted replica, TTL 600 ms <
                        failover time: their brokers must set them again
                        within the lock delay).  The test polls the
                        brokers' STATS and the Sentinels from the kill on
                        until all brokers are up on the new master, then
                        restarts the killed node (empty) as a replica of
                        the new master and waits until the topology is
                        ready (linked, Sentinels agree);
      kill_master_lost  the same, but first both replicas are put behind
                        FreezableProxies frozen for 0.3-0.7 s of load
                        before the kill, so the grants and fence INCRs made
                        meanwhile are lost with the master (the promoted
                        replica never saw them): the brokers must reassert
                        those locks and raise the counter above every token
                        the dead master handed out;
      kill_master_pause a plain kill, with one broker (one with a stalled
                        holder, if any) SIGSTOPped from just before the
                        kill until 1.5 s after the others are on the new
                        master, i.e. past their lock delay: its holders'
                        keys (expired meanwhile) may be taken, it must
                        report them LOST, and the resource must reject
                        their late writes (docs/DEPLOYMENT.md: "Zero lost
                        locks" is not promised; fencing protects);
      kill_broker       (test_chaos) kill -9 a broker, restart it; its
                        holders stall 1.2 s before their second write;
      kill_client       (test_chaos) a few clients reset their connections.
    Normal build: 4 master kills (1 plain, 2 losing writes, 1 with a
    paused broker), ~28 s in all on 2 cores; sanitized: 3 (no plain one),
    ~25 s.  (Each kill used to take 3.5 s more: the topology is ready
    again only once no Sentinel still counts another's "master is down"
    vote, which Sentinel drops 5 ask-periods after the last one;
    topology.SENTINEL_DEBUG sets ask-period to 100 ms.)

What is asserted (see test_chaos.py for why each check is sound)
  1. Exclusion: a hold granted while an earlier-token hold of the key was
     still in use needs that earlier holder told LOST or cut off (its
     broker killed); and none of that outside a fault window.
  2. Fencing: the resource's log is consistent, accepted tokens per key
     never decrease, a token is written by one session only, and no write
     of a hold that was never told LOST (nor cut off) was rejected.
  3. Token order across failovers: a hold whose ACQUIRE was sent after
     another hold's OK was read has a greater token (one fence counter per
     prefix, so across keys too); no token is handed out twice; after
     each failover the new master's counter is at least every token the
     clients were handed and every count the old master had before the
     kill.
  4. Held through a failover: a third of the clients hold with TTL
     LONG_TTL_MS, which outlasts a failover (kill to brokers on the new
     master: ~3 s), the rest with TTL 600 ms, which does not.  When every
     broker reached the new master within half the lock delay of the
     first one (they do, within a few ms, here), a lock held right through
     the failover whose TTL, counted from its last renewal before the
     kill, outlasts the time until its broker reached the new master is
     kept: never told LOST, both writes accepted, RELEASE answered OK 0
     (docs/DEPLOYMENT.md: "A held lock survives a failover that lost its
     write, provided that its broker reaches the new master within the
     lock delay and within the lock's TTL").  One whose TTL ran out before
     its broker reached the new master is never kept: the broker could
     not vouch for it (jeopardy), so it told the holder LOST.
  5. Replies: every request got exactly one well-formed reply in time; no
     broker closed a session by itself.
  6. Liveness: after the faults every key is acquirable on every broker
     (WAIT 5000) with a token above every earlier one; every broker ends
     on the master the Sentinels report.
  7. Every broker is alive at the end and exits 0 on SIGTERM with no
     sanitizer report.

A summary line goes to stderr (faults, failovers and their timing, holds,
lost locks reported, reclaimed locks, stale writes rejected, token
regressions, violations), and a tally of violation kinds if any.
CHAOS_VERBOSE=1 prints the fault log too; CHAOS_LOGDIR=<dir> keeps a copy
of every broker's log.
"""

import bisect
import collections
import os
import random
import re
import shutil
import sys
import threading
import time
import unittest

import harness
from harness import Client, parse_stats
import test_chaos as chaos
from topology import FailoverNudge, SentinelTopology, cli

SANITIZED = chaos.SANITIZED
N_BROKERS = 3
N_CLIENTS = 20
LONG_TTL_MS = 6000              # the TTL of every third client's holds
DELAY_MS = 1000                 # --failover_lock_delay_ms
FAILOVER_S = 15.0               # kill -9 until the Sentinels agree (~2 s)
SWITCH_S = 15.0                 # then until every broker is on it
NUDGE_S = 6.0                   # no new master yet: SENTINEL FAILOVER
READY_S = 30.0                  # the killed node back as a linked replica
FREEZE_S = (0.3, 0.7)           # writes that only the master gets
# The faults of one run, shuffled.
if SANITIZED:
    PLAN = (["kill_master_lost"] * 2 + ["kill_master_pause"] +
            ["kill_broker", "kill_client"])
else:
    PLAN = (["kill_master"] + ["kill_master_lost"] * 2 +
            ["kill_master_pause"] + ["kill_broker", "kill_client"])
FAULTS = ("kill_master", "kill_master_lost", "kill_master_pause",
          "kill_broker", "kill_client")
LATE_S = DELAY_MS / 1000.0 + 0.5    # a paused broker comes back this long
                                    # after the others reached the master
QUIET_S = 2.0                   # clients run on without faults at the end


def violation_kind(v):
    """A violation's first words, numbers left out."""
    return " ".join(re.sub(r"[0-9][0-9.:]*", "N", v.split("]", 1)[-1])
                    .split()[:7])


class SentinelChaosClient(chaos.ChaosClient):
    """test_chaos's client; a hold stalled by a master kill (it is
    between its two writes when the master dies) stays stalled until
    every broker is on the new master, so that it holds its lock right
    through the failover: its broker must reclaim it (or tell it LOST),
    and its second write then goes to the resource."""

    failover_wait = None        # a threading.Event set by kill_master

    def __init__(self, world, idx, *args):
        super().__init__(world, idx, *args)
        if idx % 3 == 0:
            self.ttl_ms = LONG_TTL_MS

    def write(self, sess, h):
        ev = self.failover_wait
        if h.stalled and ev is not None:
            self.failover_wait = None
            with self.world.lock:
                self.world.through_failover.append((ev, h))
            ev.wait(FAILOVER_S + SWITCH_S)
        super().write(sess, h)


class TestChaosSentinel(chaos.TestChaos):
    """Reuses TestChaos's checks, monitors and settle logic; its own
    test_chaos (the single-Redis scenario) is not run again here."""

    test_chaos = None           # not collected under this class

    def setUp(self):
        seed = int(os.environ.get("CHAOS_SEED") or
                   random.SystemRandom().randrange(1, 10 ** 9))
        self.rng = random.Random(seed)
        self.world = chaos.World(seed)
        self.world.through_failover = []    # holds stalled across one
        self.topo = SentinelTopology()
        self.addCleanup(self.topo.close)
        self.resource = harness.Redis()
        self.addCleanup(self.resource.close)
        self.prefix = "chaoss%d" % seed
        for _ in range(N_BROKERS):
            b = chaos.ChaosBroker(
                None, self.prefix,
                "--redis_sentinels", self.topo.sentinel_addrs(),
                "--redis_master_name", self.topo.master_name,
                "--failover_lock_delay_ms", DELAY_MS,
                "--redis_timeout_ms", "500", ready_timeout=15.0)
            self.addCleanup(b.close)
            self.world.brokers.append(b)
        if os.environ.get("CHAOS_LOGDIR"):
            self.addCleanup(self.keep_logs, os.environ["CHAOS_LOGDIR"])
        self.addCleanup(self.stop_clients)
        self.monitors = {}
        self.addCleanup(lambda: [m[1].close()
                                 for m in self.monitors.values()])
        self.failover_s = []        # kill -9 until the Sentinels agreed
        self.switch_s = []          # kill -9 until every broker was on it
        self.ready_s = []           # restart until the topology was ready
        self.lost_incrs = 0         # fence INCRs the dead masters took along
        self.failovers = []         # {event, old, new, spread}
        self.broker_stats = collections.Counter()  # lost, reclaimed, ...

    def keep_logs(self, d):
        os.makedirs(d, exist_ok=True)
        for b in self.world.brokers:
            try:
                shutil.copy(b.logpath, os.path.join(d, "broker-%d.log"
                                                    % b.port))
            except OSError:
                pass

    # -- faults --

    def bstats(self, b):
        c = Client(b.port, timeout=chaos.REPLY_TIMEOUT_S)
        try:
            return parse_stats(c.req("STATS"))
        finally:
            c.close()

    def fence(self, addr):
        return int(cli(addr, "GET", self.prefix + ":fence") or 0)

    def top_token(self):
        with self.world.lock:
            return max([h.token for h in self.world.holds] or [0])

    def fault(self, kind):
        if kind.startswith("kill_master"):
            self.kill_master(kind)
            return
        if kind != "kill_broker":
            super().fault(kind)
            return
        # The victim's counters die with it: keep them for the summary.
        snap = [(b, b.generation, self.bstats(b)) for b in self.world.brokers]
        super().fault(kind)
        for b, gen, st in snap:
            if b.generation != gen:
                for k in ("reclaimed", "lost"):
                    self.broker_stats[k] += int(st.get(k, 0))

    def kill_master(self, kind):
        w = self.world
        topo = self.topo
        t = w.now()
        old = topo.master_addr()
        proxies = []
        lost = 0
        lose_writes = kind == "kill_master_lost"
        late = None
        if lose_writes:
            proxies = topo.proxy_replicas()
            for p in proxies:
                p.freeze()
            time.sleep(self.rng.uniform(*FREEZE_S))
        before = self.top_token()
        fence_old = self.fence(old)
        if lose_writes:
            lost = fence_old - max(self.fence(r.addr)
                                   for r in topo.replicas())
            self.lost_incrs += lost
        # Holders between their two writes now stay stalled until every
        # broker is on the new master (SentinelChaosClient.write).
        fo = {"event": threading.Event(), "old": old, "spread": None,
              "seen": None, "kill_t": None, "start_t": time.monotonic()}
        self.failovers.append(fo)
        for c in w.clients:
            c.failover_wait = fo["event"]
        self.stall_holders(None)
        try:
            if kind == "kill_master_pause":
                # Preferably a broker with a stalled holder on it.
                ports = set(c.sess.port for c in w.clients
                            if c.stall_flag and c.sess is not None)
                late = self.rng.choice([b for b in w.brokers
                                        if b.port in ports] or w.brokers)
                late.pause()
            topo.kill_master()
            fo["kill_t"] = topo.fault_t0
            for p in proxies:
                p.close()
            if late is not None:
                # The others reach the new master and their lock delay
                # runs out; the late broker's holders' keys are free to
                # take by then (expired, TTL 600 ms): they must be told
                # LOST, and fencing must stop their writes.
                new, seen, agreed = self.wait_brokers_switched(
                    old, [b for b in w.brokers if b is not late])
                time.sleep(LATE_S)
                late.resume()
                m, seen2, _ = self.wait_brokers_switched(old, [late])
                if m != new:
                    w.violation("broker :%d went to %s, the others to %s%s"
                                % (late.port, m, new, self.sentinels_then()))
                seen.update(seen2)
            else:
                new, seen, agreed = self.wait_brokers_switched(old)
        finally:
            if late is not None:
                late.resume()
            fo["event"].set()
            for c in w.clients:
                c.failover_wait = None
        fo["new"] = new
        fo["late"] = late
        fo["seen"] = seen
        first = min(seen.values())
        fo["spread"] = max(seen.values()) - first
        if late is None:
            self.switch_s.append(max(seen.values()) - topo.fault_t0)
        addr, _ = topo.wait_new_master(old, FAILOVER_S)
        if addr != new:
            w.violation("the brokers went to %s, the Sentinels say %s%s"
                        % (new, addr, self.sentinels_then()))
        secs = agreed - topo.fault_t0
        self.failover_s.append(secs)
        fence_new = self.fence(new)
        # The next token is the counter plus one: it must be above every
        # token the dead master handed out (and what it counted).
        if fence_new < max(before, fence_old):
            w.violation("after the failover from %s to %s the fence counter"
                        " is %d, below %d (the top token handed out) or "
                        "%d (the old master's counter)"
                        % (old, new, fence_new, before, fence_old))
        t1 = time.monotonic()
        topo.restart(old, replicaof=new)
        topo.wait_ready(READY_S)
        self.ready_s.append(time.monotonic() - t1)
        w.faults[kind] += 1
        w.fault_log.append(
            "%7.3f-%7.3f kill -9 master %s%s%s; new master %s: Sentinels "
            "agreed after %.2f s, the brokers were on it after %.2f-%.2f s "
            "(fence %d -> %d); %s back as a replica, ready after %.2f s"
            % (t, w.now(), old,
               " (replicas frozen, %d fence INCRs lost)" % lost
               if lose_writes else "",
               " (broker :%d SIGSTOPped until %.1f s after the others "
               "were on the new master)" % (late.port, LATE_S)
               if late else "", new, secs,
               first - topo.fault_t0, max(seen.values()) - topo.fault_t0,
               fence_old, fence_new, old, self.ready_s[-1]))

    def wait_brokers_switched(self, old, brokers=None):
        """Poll every broker and the Sentinels from the kill on until all
        brokers are up on one master other than old and the Sentinels
        agree on a master other than old; returns the brokers' master, the
        time each broker was first seen there ({port: t}) and the time the
        Sentinels were seen to agree (monotonic)."""
        w = self.world
        brokers = w.brokers if brokers is None else brokers
        seen = {}
        agreed = None
        deadline = time.monotonic() + FAILOVER_S + SWITCH_S
        # Sentinel's own election can fail and is retried only after 2 x
        # failover-timeout (topology.wait_new_master): asked for after
        # NUDGE_S, as an operator would; what is tested is the brokers.
        nudge = FailoverNudge(self.topo, old, self.topo.fault_t0 + NUDGE_S)
        while True:
            for b in brokers:
                try:
                    st = self.bstats(b)
                except (OSError, EOFError) as e:
                    w.violation("STATS of broker :%d failed during a "
                                "failover: %s" % (b.port, e))
                    continue
                m = st.get("redis_master")
                if st.get("redis") == "up" and m not in (old, "-", None):
                    if b.port not in seen or seen[b.port][0] != m:
                        seen[b.port] = (m, time.monotonic())
                else:
                    seen.pop(b.port, None)
            if agreed is None:
                addrs = [a for sp, a in zip(self.topo.sentinels,
                                            self.topo.master_addrs())
                         if sp.alive()]
                if addrs and len(set(addrs)) == 1 and \
                        addrs[0] not in (old, None):
                    agreed = time.monotonic()
                elif nudge.poll():
                    w.fault_log.append("%7.3f no new master %.0f s after "
                                       "the kill: failover asked for"
                                       % (w.now(), NUDGE_S))
            masters = set(m for m, _ in seen.values())
            if len(seen) == len(brokers) and len(masters) == 1 and \
                    agreed is not None:
                return (masters.pop(),
                        {port: t for port, (_, t) in seen.items()}, agreed)
            if time.monotonic() >= deadline:
                raise AssertionError(
                    "the brokers were not all on one new master %.0f s "
                    "after the kill of %s: %s\n%s"
                    % (FAILOVER_S + SWITCH_S, old, seen,
                       self.topo.describe()))
            time.sleep(0.02)

    def stop_clients(self):
        self.world.stop.set()
        for b in self.world.brokers:
            b.resume()
        for c in self.world.clients:
            c.join(timeout=chaos.REPLY_TIMEOUT_S + chaos.RELEASE_GIVEUP_S +
                   10)

    # -- the test --

    def test_chaos_sentinel(self):
        w = self.world
        for i in range(N_CLIENTS):
            c = SentinelChaosClient(w, i, self.resource.port,
                                    self.rng.random())
            w.clients.append(c)
        for c in w.clients:
            c.start()
        plan = list(PLAN)
        self.rng.shuffle(plan)
        self.calm(1.0)
        for kind in plan:
            self.calm(self.rng.uniform(0.8, 1.5))
            t = time.monotonic()
            self.fault(kind)
            self.settle()
            w.windows.append((t, time.monotonic() + chaos.CALM_GRACE_S))
            self.new_baselines()
        self.finish_clients(QUIET_S)

        self.check_after_faults()
        self.check_holds()
        self.check_token_order()
        self.check_held_through_failover()
        self.check_resource()
        self.check_brokers()
        self.report()

    def report(self):
        """The summary line; then fail on violations, showing the first
        of each kind, then the first ones, 8 at most; every broker must
        still run."""
        w = self.world
        self.summary()
        if w.violations:
            shown, kinds = [], set()
            for v in w.violations:
                if violation_kind(v) not in kinds:
                    kinds.add(violation_kind(v))
                    shown.append(v)
            shown += [v for v in w.violations if v not in shown]
            self.fail("%d violation(s) (seed %d); the first of each kind:"
                      "\n\n%s\n\nfaults:\n  %s"
                      % (len(w.violations), w.seed,
                         "\n\n".join(shown[:8]),
                         "\n  ".join(w.fault_log)))
        for b in w.brokers:
            self.assertTrue(b.alive(), "broker :%d died:\n%s"
                            % (b.port, b.log()[-3000:]))

    # -- checks --

    def check_token_order(self):
        """Per key: a hold whose ACQUIRE was sent after another hold's OK
        was read was granted later, so its token is greater (one counter
        per prefix, raised at every new tenure).  Not across keys: an
        early hand-off gives out a token set aside for its key by an
        earlier grant, below tokens granted for other keys since
        (PROTOCOL.md: compare tokens of the same key only)."""
        w = self.world
        every = w.holds
        try:
            for k in sorted({h.key for h in every}):
                w.holds = [h for h in every if h.key == k]
                self.check_token_order_of_key()
        finally:
            w.holds = every

    def check_token_order_of_key(self):
        w = self.world
        t0 = w.t0
        sent = {}                   # sid -> sorted ACQUIRE send times
        for sid, (_, _, lines) in w.transcripts.items():
            sent[sid] = [t for t, d, line in lines
                         if d == ">" and line.startswith("ACQUIRE ")]
        reqs = []
        for h in w.holds:
            times = sent.get(h.sid, [])
            i = bisect.bisect_right(times, h.s)
            if i == 0:
                w.violation("no ACQUIRE found before " + h.describe(t0))
                continue
            reqs.append((times[i - 1], h))
        by_s = sorted(w.holds, key=lambda h: h.s)
        reqs.sort(key=lambda x: x[0])
        top = None                  # the hold with the top token so far
        j = 0
        bad = 0
        for r, y in reqs:
            while j < len(by_s) and by_s[j].s < r:
                if top is None or by_s[j].token > top.token:
                    top = by_s[j]
                j += 1
            if top is not None and y.token <= top.token and top is not y:
                bad += 1
                w.count("token_regressions")
                if bad <= 5:
                    w.violation(
                        "token went back: %s sent its ACQUIRE at t=%.3f, "
                        "after %s was granted token %d, and got %d\n  %s\n"
                        "  %s" % (y.sid, r - t0, top.sid, top.token,
                                  y.token, top.describe(t0),
                                  y.describe(t0)), [top.sid, y.sid])
            w.count("token_order_checked")
        if bad > 5:
            w.violation("%d holds in all got a token not above an earlier "
                        "grant's" % bad)

    def kept(self, h):
        return (h.outcome == "released" and not h.told and not h.broken and
                all(ok for _, ok in h.writes))

    def check_held_through_failover(self):
        """A lock held right through a failover is kept (reclaimed if the
        failover lost it, its second write accepted, RELEASE OK 0, never
        told LOST) when its broker reached the new master well within the
        lock delay, which starts when the first broker gets there, and
        while its TTL, counted from its last renewal before the kill (at
        most a third of it before), still ran: DEPLOYMENT.md promises it
        then.  Checked for holds whose broker was seen on the new master
        (polling STATS from the kill on) within half the delay of the
        first one.  A lock whose TTL ran out before its broker reached the
        new master is never kept: it was lost by the broker's own count
        (jeopardy), and its holder told so."""
        w = self.world
        fos = {id(fo["event"]): fo for fo in self.failovers}
        for ev, h in w.through_failover:
            fo = fos.get(id(ev))
            seen = fo.get("seen") if fo is not None else None
            if seen is None or h.port not in seen or fo["kill_t"] is None:
                if self.kept(h):
                    w.count("kept_through_failover")
                continue
            reached = seen[h.port] - fo["kill_t"]
            if self.kept(h):
                w.count("kept_through_failover")
                if reached > h.ttl / 1000.0 + 0.3:
                    w.violation("a lock held through a failover was kept "
                                "although its TTL (%d ms) ran out before "
                                "its broker reached the new master (%.0f "
                                "ms after the kill): %s"
                                % (h.ttl, reached * 1000,
                                   h.describe(w.t0)), [h.sid])
                continue
            after = seen[h.port] - min(seen.values())
            if after * 1000 <= DELAY_MS / 2 and \
                    reached + 0.5 < h.ttl * 2 / 3 / 1000.0 and \
                    not self.ghost_before(h, fo, seen[h.port]):
                w.violation("a lock held through a failover was not kept "
                            "although its broker was on the new master "
                            "%.0f ms after the first one (lock delay %d ms)"
                            " and %.0f ms after the kill, within its TTL: "
                            "%s" % (after * 1000, DELAY_MS, reached * 1000,
                                    h.describe(w.t0)), [h.sid])

    def ghost_before(self, h, fo, reached_t):
        """Whether an earlier holder's value of h's key may be on the new
        master still: a hold that ended after the fault began (its
        release may be among the writes the failover lost) with a TTL
        that may not have run out there when h's broker reached it.  h's
        reassert then finds the key another's, and h is rightly lost."""
        for y in self.world.holds:
            if y is h or y.key != h.key or y.e is None:
                continue
            if y.e >= fo["start_t"] - 0.1 and \
                    y.e + (y.ttl or 0) / 1000.0 > reached_t - 0.5:
                return True
        return False

    def sentinels_then(self):
        """For a violation about where the brokers went: each node's role
        and each Sentinel's last log lines at that moment (a second
        failover, votes, epochs), which the end of the run no longer
        shows."""
        return "\n  topology then:\n" + self.topo.describe(tail=40)

    def check_brokers(self):
        """Every broker ends on the master the Sentinels report."""
        w = self.world
        master = self.topo.master_addr()
        for b in w.brokers:
            st = self.bstats(b)
            if st.get("redis_master") != master:
                w.violation("broker :%d ends on %s, the Sentinels say %s"
                            % (b.port, st.get("redis_master"), master))
            for k in ("reclaimed", "lost"):
                self.broker_stats[k] += int(st.get(k, 0))
            self.broker_stats["tenures_max"] = max(
                self.broker_stats["tenures_max"],
                int(st.get("redis_tenures", 0)))

    def summary(self):
        w = self.world
        c = w.counts

        def span(xs):
            return "%.1f-%.1f" % (min(xs), max(xs)) if xs else "-"
        # How far apart the brokers reached each new master (but for the
        # one kept paused on purpose).
        spreads = [fo["spread"] for fo in self.failovers
                   if fo["spread"] is not None and not fo.get("late")]
        line = (
            "chaos-sentinel: seed=%d %.1fs%s brokers=%d clients=%d keys=%d "
            "sessions=%d holds=%d faults=%d (%s) failovers=%d "
            "failover_s=%s brokers_switched_s=%s switch_spread_ms=%s "
            "replica_ready_s=%s "
            "fence_incrs_lost=%d held_through_failover=%d (kept=%d) "
            "redis_hiccups=%d lost_reported=%d "
            "(err_lost=%d event_lost=%d) broker_lost=%d reclaimed=%d "
            "stale_writes_rejected=%d writes_accepted=%d stalls=%d "
            "superseded_holds=%d overlapping=%d broken_holds=%d busy=%d "
            "unavailable(acquire=%d release=%d) requests=%d replies=%d "
            "closed_with_request_outstanding=%d token_order_checked=%d "
            "token_regressions=%d "
            "final_acquires=%d violations=%d"
            % (w.seed, w.now(), " (sanitized)" if SANITIZED else "",
               N_BROKERS, N_CLIENTS, len(chaos.KEYS), c["sessions"],
               c["holds"], sum(w.faults[f] for f in FAULTS),
               " ".join("%s=%d" % (f, w.faults[f]) for f in FAULTS),
               len(self.failover_s), span(self.failover_s),
               span(self.switch_s),
               "%.0f" % (1000 * max(spreads)) if spreads else "-",
               span(self.ready_s), self.lost_incrs,
               len(w.through_failover), c["kept_through_failover"],
               w.faults["redis_hiccup"], c["holds_told_lost"],
               c["err_lost"], c["event_lost"], self.broker_stats["lost"],
               self.broker_stats["reclaimed"],
               c["stale_writes_rejected"], c["writes_accepted"],
               c["stalls"], c["superseded_holds"], c["overlapping_holds"],
               c["holds_broken"], c["busy"], c["acquire_unavailable"],
               c["release_unavailable"], c["requests"], c["replies"],
               c["closed_with_request_outstanding"],
               c["token_order_checked"], c["token_regressions"],
               c["final_acquires"],
               len(w.violations)))
        sys.stderr.write("\n" + line + "\n")
        if w.violations:
            # What kinds: the first words of each, numbers left out.
            kinds = collections.Counter(violation_kind(v)
                                        for v in w.violations)
            sys.stderr.write("violation kinds:\n" + "".join(
                "  %5d  %s ...\n" % (n, k) for k, n in kinds.most_common()))
        if os.environ.get("CHAOS_VERBOSE"):
            sys.stderr.write("faults:\n  " + "\n  ".join(w.fault_log) + "\n")
        sys.stderr.flush()


if __name__ == "__main__":
    unittest.main()
