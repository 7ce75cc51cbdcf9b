"""
test_chaos_cluster.py - the chaos test of test_chaos.py on a Redis
Cluster: master kills (replica promoted, the old master back as a
replica), a slot migration under load, broker kills and pauses, client
kills, with the fenced resource checking that no stale token is ever
accepted.

Set-up
  * the store: topology.ClusterTopology, 3 masters + 3 replicas on
    loopback (cluster-node-timeout 1000, cluster-require-full-coverage
    no), no persistence;
  * three lockbrokerd in cluster mode (--redis_cluster <all six nodes>,
    no -r), one prefix, --redis_timeout_ms 500, --failover_lock_delay_ms
    1000;
  * test_chaos's machinery as it is (imported, not copied): the fenced
    resource (a separate, never faulted redis-server that accepts a write
    iff its token is >= the highest it accepted for the key -- a hold
    writes twice with its one token -- and logs every write), its client
    threads and their strict reply accounting, its settle and calm
    (STATS-watching) logic and its checks; test_chaos_sentinel's client
    that holds its lock right through a failover, its token-order check
    and its broker-kill bookkeeping;
  * 24 client threads on 8 lock names chosen at set-up from the slot map:
    2 plain names per master, plus two names sharing a hash tag ({mvN}a,
    {mvN}b) in one slot: the slot that is migrated;
  * the faults, one at a time, 0.8-1.5 s of calm before each, a fixed
    list in a random order (CHAOS_SEED replays it), each followed by a
    settle (every broker redis=up with all 3 masters connected, no client
    stalled) and, apart from the migration, a fault window until 2 s
    after that:
      kill_master   (3 times) kill -9 of a master.  The holders of names
                    on it that are between their two writes stall until
                    every broker is on the promoted replica (they hold
                    right through the failover: reasserted, or told
                    LOST); holds on the other masters must go on
                    meanwhile.  Then the killed node is started again
                    with its nodes.conf (same node id) and must rejoin as
                    a replica of the new master.  The second kill takes
                    the master the first one promoted, so the node killed
                    first is promoted back: an address that left the slot
                    map returns to it (brokers built before 07a7f51 never
                    reconnected to it; its names stayed ERR UNAVAILABLE).
                    The third picks a master at random;
      migrate_slot  (twice) the two-name slot is moved from its master to
                    another one by hand (IMPORTING/MIGRATING, one key
                    moved while split, then the rest and SETSLOT NODE)
                    while clients use it.  NOT a fault window: a lock lost
                    (or superseded) during a migration is a violation;
      kill_broker   (test_chaos) kill -9 a broker, restart it; its
                    holders stall 1.2 s before their second write;
      pause_broker  (test_chaos) SIGSTOP a broker 1.5 s, over the TTL of
                    600 ms, then SIGCONT; its holders stall likewise;
      kill_client   (test_chaos) a few clients reset their connections.

What is asserted (test_chaos.py says why each check is sound)
  1. Exclusion: a hold granted while an earlier-token hold of the name
     was still in use needs the earlier holder told LOST (ERR LOST or
     EVENT LOST) or cut off (its broker killed); none of that, and no
     LOST at all, outside a fault window.
  2. Fencing: the resource's log is consistent, accepted tokens per name
     never go back, a token is written by one session only, and no write
     of a hold that was never told LOST (nor cut off) was rejected.
  3. Tokens per name: a hold whose ACQUIRE was sent after another hold
     of that name was granted has a greater token.  Checked per name, not
     across names: in cluster mode each slot has its own counter.  For the
     same reason test_chaos's "token handed to two sessions" runs per
     name.
  4. Replies: every request got exactly one well-formed reply in time, or
     its connection closed (requests == replies +
     closed_with_request_outstanding); no broker closed a session by
     itself.
  5. Progress: after every fault, every name is granted again within
     PROGRESS_S; during each failover, names on the other two masters are
     granted.  After the faults every name is acquirable on every broker
     (WAIT 5000) with a token above every earlier one.
  6. The killed master rejoins as a replica of its successor (same node
     id, read from the nodes.conf in its dir); every broker ends connected
     to the 3 masters the cluster reports; every broker exits 0 on
     SIGTERM with no sanitizer report.

A summary line goes to stderr.  CHAOS_VERBOSE=1 prints the fault log too;
CHAOS_LOGDIR=<dir> keeps a copy of every broker's log.
"""

import collections
import os
import random
import sys
import threading
import time
import unittest
from unittest import mock

import harness
import test_chaos as chaos
import test_chaos_sentinel as chaos_sentinel
from topology import ClusterTopology, cluster_nodes, hash_slot, info, owner_in

SANITIZED = chaos.SANITIZED
N_BROKERS = 3
N_CLIENTS = 24
DELAY_MS = 1000                 # --failover_lock_delay_ms
FAILOVER_S = 15.0               # kill -9 until promoted (measured ~2.4 s)
SWITCH_S = 10.0                 # then until every broker is on it
READY_S = 30.0                  # the killed node back as a linked replica
PROGRESS_S = 15.0 if SANITIZED else 10.0   # every name granted again
QUIET_S = 2.0                   # clients run on without faults at the end
PLAN = (["kill_master"] * 3 + ["migrate_slot"] * 2 + ["kill_broker"] * 2 +
        ["pause_broker"] * 2 + ["kill_client"])
FAULTS = ("kill_master", "migrate_slot", "kill_broker", "pause_broker",
          "kill_client")


def pick_keys(prefix, slot_map, per_master=2):
    """Lock names for the run: per_master plain names on each master (by
    the slot of the Redis key <prefix>:lock:<name>), then two names with
    one hash tag, {mvN}a and {mvN}b, in a slot of its own.  Returns
    (names, the tagged pair's slot)."""
    masters = sorted(set(m for _, _, m in slot_map))
    by_master = collections.defaultdict(list)
    slots = set()
    i = 0
    while any(len(by_master[m]) < per_master for m in masters):
        name = "cc-%d" % i
        i += 1
        slot = hash_slot("%s:lock:%s" % (prefix, name))
        m = owner_in(slot_map, slot)
        if m in masters and len(by_master[m]) < per_master and \
                slot not in slots:
            by_master[m].append(name)
            slots.add(slot)
    names = [n for m in masters for n in by_master[m]]
    for j in range(1000):
        slot = hash_slot("{mv%d}" % j)
        if slot not in slots and owner_in(slot_map, slot) is not None:
            return names + ["{mv%d}a" % j, "{mv%d}b" % j], slot
    raise AssertionError("no free slot for the migrated names")


class TestChaosCluster(chaos_sentinel.TestChaosSentinel):
    """TestChaosSentinel's (and so TestChaos's) clients, monitors, settle
    logic and checks on a Redis Cluster.  Neither parent's own test runs
    again here."""

    test_chaos = None               # not collected under this class
    test_chaos_sentinel = None

    def setUp(self):
        seed = int(os.environ.get("CHAOS_SEED") or
                   random.SystemRandom().randrange(1, 10 ** 9))
        self.rng = random.Random(seed)
        self.world = chaos.World(seed)
        self.world.through_failover = []    # holds stalled across one
        self.prefix = "chaosc%d" % seed
        self.topo = ClusterTopology()
        self.addCleanup(self.topo.close)
        self.keys, self.mig_slot = pick_keys(self.prefix,
                                             self.topo.slot_map())
        # test_chaos's client, final acquires and resource check read its
        # module-level KEYS: point them at this run's names for the test
        # (restored at the very end, after the clients have stopped).
        patcher = mock.patch.object(chaos, "KEYS", self.keys)
        patcher.start()
        self.addCleanup(patcher.stop)
        for k in self.keys:
            rk = "%s:lock:%s" % (self.prefix, k)
            self.assertEqual(self.topo.keyslot(rk), hash_slot(rk), rk)
        self.first_master = {k: self.topo.master_of_key(
            "%s:lock:%s" % (self.prefix, k)) for k in self.keys}
        self.assertEqual(len(set(self.first_master.values())), 3,
                         "names on every master: %s" % self.first_master)
        self.resource = harness.Redis()
        self.addCleanup(self.resource.close)
        for _ in range(N_BROKERS):
            b = chaos.ChaosBroker(
                None, self.prefix,
                "--redis_cluster", self.topo.seeds(),
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
        self.failover_s = []        # kill -9 until the cluster agreed
        self.switch_s = []          # kill -9 until every broker was on it
        self.rejoin_s = []          # restart until the old master rejoined
        self.progress_s = []        # settle until every name was granted
        self.during_failover = []   # holds on other masters meanwhile
        self.failovers = []
        self.promoted = None        # the node the last kill_master promoted
        self.broker_stats = collections.Counter()

    def keep_logs(self, d):
        """TestChaosSentinel's broker logs, plus every session's whole
        transcript (a violation shows only the last lines)."""
        super().keep_logs(d)
        w = self.world
        with open(os.path.join(d, "transcripts.txt"), "w") as f:
            for sid in sorted(w.transcripts):
                port, cid, lines = w.transcripts[sid]
                f.write("session %s on :%d client-id %s\n" % (sid, port, cid))
                for t, dr, line in lines:
                    f.write("  %8.3f %s %s\n" % (t - w.t0, dr, line))
            f.write("\nfaults:\n  " + "\n  ".join(w.fault_log) + "\n")

    # -- helpers --

    def lock_key(self, name):
        return "%s:lock:%s" % (self.prefix, name)

    def names_on(self, master):
        return [k for k in self.keys
                if self.topo.master_of_key(self.lock_key(k)) == master]

    def wait_brokers_on(self, old, new):
        """Poll every broker until each has redis=up, the 3 masters
        connected, new among them and old not; returns {port: time first
        seen so}."""
        w = self.world
        seen = {}
        deadline = time.monotonic() + SWITCH_S
        while True:
            for b in w.brokers:
                try:
                    st = self.bstats(b)
                except (OSError, EOFError) as e:
                    w.violation("STATS of broker :%d failed during a "
                                "failover: %s" % (b.port, e))
                    continue
                ms = st.get("redis_master", "").split(",")
                if st.get("redis") == "up" and \
                        st.get("redis_nodes") == "3" and \
                        new in ms and old not in ms:
                    seen.setdefault(b.port, time.monotonic())
                else:
                    seen.pop(b.port, None)
            if len(seen) == len(w.brokers):
                return seen
            if time.monotonic() >= deadline:
                states = []
                for b in w.brokers:
                    try:
                        st = self.bstats(b)
                    except (OSError, EOFError) as e:
                        st = {"error": str(e)}
                    states.append("  broker :%d redis=%s redis_nodes=%s "
                                  "redis_node_stats=%s" % (
                                      b.port, st.get("redis"),
                                      st.get("redis_nodes"),
                                      st.get("redis_node_stats")))
                raise AssertionError(
                    "the brokers were not all on %s (and off %s) %.0f s "
                    "after the cluster agreed (on it: %s)\n%s\n%s"
                    % (new, old, SWITCH_S, sorted(seen), "\n".join(states),
                       self.topo.describe()))
            time.sleep(0.02)

    def holds_since(self, t, keys=None):
        """The holds granted (OK read) after t, on keys if given."""
        with self.world.lock:
            hs = list(self.world.holds)
        return [h for h in hs if h.s > t and (keys is None or h.key in keys)]

    # -- faults --

    def fault(self, kind):
        if kind == "migrate_slot":
            self.migrate_slot()
            return
        super().fault(kind)     # kill_master -> self.kill_master

    def kill_master(self, kind):
        w = self.world
        topo = self.topo
        t = w.now()
        masters = topo.masters()
        # The second kill takes down the replica the first one promoted,
        # so the node killed first (back as its replica) is promoted in
        # turn: a master address that left the map and returns to it.
        old = self.promoted if self.promoted in masters else \
            self.rng.choice(masters)
        failback = old == self.promoted
        node = topo.node(old)
        old_id = node.id
        conf = os.path.join(node.dir, "nodes.conf")
        if not os.path.exists(conf):
            w.violation("%s has no cluster-config-file %s" % (old, conf))
        if not topo.replicas_of(old):
            raise AssertionError("%s has no live replica to promote\n%s"
                                 % (old, topo.describe()))
        on_old = set(self.names_on(old))
        others = set(self.keys) - on_old
        # Holders of names on the victim, between their two writes, hold
        # right through the failover (SentinelChaosClient.write waits for
        # this event before the second write).
        fo = {"event": threading.Event(), "old": old, "new": None,
              "seen": None, "spread": None, "late": None}
        self.failovers.append(fo)
        for c in w.clients:
            s = c.sess
            h = s.hold if s is not None else None
            if c.phase == "holding" and h is not None and h.key in on_old:
                c.failover_wait = fo["event"]
                c.stall_flag = True
        try:
            topo.kill(old)
            t_kill = topo.fault_t0
            new = topo.wait_failover(old, FAILOVER_S)
            t_agreed = time.monotonic()
            self.failover_s.append(topo.last_failover_s)
            # Full coverage is off: the other masters served all along.
            during = self.holds_since(t_kill, others)
            during = [h for h in during if h.s < t_agreed]
            self.during_failover.append(len(during))
            if not during:
                w.violation("no name on the other masters (%s) was granted "
                            "during the %.2f s failover of %s"
                            % (sorted(others), t_agreed - t_kill, old))
            seen = self.wait_brokers_on(old, new)
        finally:
            fo["event"].set()
            for c in w.clients:
                c.failover_wait = None
        fo["new"] = new
        self.promoted = None if failback else new
        fo["seen"] = seen
        fo["spread"] = max(seen.values()) - min(seen.values())
        self.switch_s.append(max(seen.values()) - t_kill)
        # The old master comes back with its nodes.conf: same id, and it
        # must turn into a replica of the node that took its slots.
        t1 = time.monotonic()
        topo.restart(old)
        new_id = topo.node(new).id

        def rejoined():
            if node.cli("CLUSTER", "MYID") != old_id:
                return False
            i = info(old, timeout=1.0)
            if i.get("role") != "slave" or \
                    i.get("master_link_status") != "up" or \
                    "%s:%s" % (i.get("master_host"),
                               i.get("master_port")) != new:
                return False
            for d in cluster_nodes(new, timeout=1.0):
                if d["id"] == old_id:
                    return "slave" in d["flags"] and d["master"] == new_id
            return False
        try:
            harness.wait_until(rejoined, READY_S, interval=0.05,
                               what="%s to rejoin as a replica of %s"
                               % (old, new))
        except AssertionError as e:
            w.violation("%s\n%s" % (e, topo.describe()))
        topo.wait_ready(READY_S)
        self.rejoin_s.append(time.monotonic() - t1)
        w.faults[kind] += 1
        w.fault_log.append(
            "%7.3f-%7.3f kill -9 %smaster %s (names %s); %s promoted after "
            "%.2f s, every broker on it after %.2f s (spread %.0f ms), "
            "%d holds on the other masters meanwhile; %s back as its "
            "replica after %.2f s"
            % (t, w.now(), "promoted " if failback else "", old,
               ",".join(sorted(on_old)), new,
               self.failover_s[-1], self.switch_s[-1],
               1000 * fo["spread"], self.during_failover[-1], old,
               self.rejoin_s[-1]))

    def migrate_slot(self):
        w = self.world
        topo = self.topo
        t = w.now()
        slot = self.mig_slot
        src = topo.master_of_slot(slot)
        dst = self.rng.choice([m for m in topo.masters() if m != src])
        names = [k for k in self.keys if "{" in k]
        before = topo.keys_in_slot(slot)
        topo.begin_migration(slot, src, dst)
        time.sleep(0.3)                 # split: ASK / TRYAGAIN for a while
        moved = topo.move_keys(slot, src, dst, batch=1, limit=1)
        time.sleep(0.3)
        topo.finish_migration(slot, src, dst)
        left = topo.keys_in_slot(slot).get(src)
        if left:
            w.violation("slot %d: %d keys left on %s after the migration"
                        % (slot, left, src))
        for k in names:
            m = topo.master_of_key(self.lock_key(k))
            if m != dst:
                w.violation("%s is served by %s after its slot moved to %s"
                            % (k, m, dst))
        w.faults["migrate_slot"] += 1
        w.fault_log.append(
            "%7.3f-%7.3f slot %d (names %s, %s keys) migrated %s -> %s, "
            "%d key(s) moved while split"
            % (t, w.now(), slot, ",".join(names), before.get(src), src, dst,
               moved))

    def settle(self):
        """test_chaos's settle, after every broker has the 3 masters."""
        def three(b):
            st = self.bstats(b)
            return st.get("redis") == "up" and st.get("redis_nodes") == "3"
        for b in self.world.brokers:
            harness.wait_until(lambda: three(b), 15.0, interval=0.05,
                               what="broker :%d on 3 masters after a fault"
                               % b.port)
        super().settle()

    def wait_progress(self, since, kind):
        """Every name granted again after since."""
        want = set(self.keys)
        got = set()

        def done():
            got.update(h.key for h in self.holds_since(since))
            return got >= want
        try:
            harness.wait_until(done, PROGRESS_S, interval=0.05,
                               what="every name granted again")
            took = time.monotonic() - since
            if kind != "start-up":
                self.progress_s.append(took)
            self.world.fault_log[-1] += "; every name granted %.2f s " \
                "after %s" % (took, "the clients started"
                               if kind == "start-up" else "the settle")
        except AssertionError:
            self.world.violation(
                "no progress after %s: %s not granted within %.0f s of the "
                "settle" % (kind, sorted(want - got), PROGRESS_S))

    # -- the test --

    def test_chaos_cluster(self):
        w = self.world
        for i in range(N_CLIENTS):
            c = chaos_sentinel.SentinelChaosClient(w, i, self.resource.port,
                                                   self.rng.random())
            w.clients.append(c)
        started = time.monotonic()
        for c in w.clients:
            c.start()
        plan = list(PLAN)
        self.rng.shuffle(plan)
        self.calm(1.0)
        w.fault_log.append("%7.3f start-up" % w.now())
        self.wait_progress(started, "start-up")
        for kind in plan:
            self.calm(self.rng.uniform(0.8, 1.5))
            t = time.monotonic()
            self.fault(kind)
            self.settle()
            if kind != "migrate_slot":
                w.windows.append((t, time.monotonic() + chaos.CALM_GRACE_S))
            self.wait_progress(time.monotonic(), kind)
            self.new_baselines()
        self.finish_clients(QUIET_S)

        self.check_after_faults()
        self.check_holds()
        self.check_token_order()
        self.check_replies()
        self.check_resource()
        self.check_brokers()
        self.report()

    # -- checks --

    def per_key(self, check):
        """Run a parent's check on each name's holds alone: tokens come
        from one counter per slot, so equal tokens on two names in two
        slots are expected, and order across names means nothing."""
        w = self.world
        every = w.holds
        try:
            for k in self.keys:
                w.holds = [h for h in every if h.key == k]
                check(self)
        finally:
            w.holds = every

    def check_holds(self):
        # A migration opens no fault window, so this also fails a lock
        # lost or superseded while a slot moved.
        self.per_key(chaos.TestChaos.check_holds)

    def check_token_order(self):
        self.per_key(chaos_sentinel.TestChaosSentinel.check_token_order)

    def check_replies(self):
        c = self.world.counts
        if c["requests"] != c["replies"] + \
                c["closed_with_request_outstanding"]:
            self.world.violation(
                "requests=%d, but replies=%d and closed with a request "
                "outstanding=%d" % (c["requests"], c["replies"],
                                    c["closed_with_request_outstanding"]))

    def check_brokers(self):
        """Every broker ends on the masters the cluster reports."""
        w = self.world
        masters = sorted(self.topo.masters())
        for b in w.brokers:
            st = self.bstats(b)
            ms = sorted(x for x in st.get("redis_master", "").split(",")
                        if x)
            if ms != masters or st.get("redis_nodes") != "3":
                w.violation("broker :%d ends on %s (redis_nodes=%s), the "
                            "cluster says %s" % (b.port, ms,
                                                 st.get("redis_nodes"),
                                                 masters))
            for k in ("reclaimed", "lost", "redis_redirects",
                      "redis_map_changes"):
                self.broker_stats[k] += int(st.get(k, 0))

    def summary(self):
        w = self.world
        c = w.counts

        def span(xs):
            return "%.1f-%.1f" % (min(xs), max(xs)) if xs else "-"
        kept = sum(1 for _, h in w.through_failover if self.kept(h))
        told = sum(1 for _, h in w.through_failover if h.told)
        per_master = collections.Counter(self.first_master[h.key]
                                         for h in w.holds)
        line = (
            "chaos-cluster: seed=%d %.1fs%s brokers=%d clients=%d keys=%d "
            "masters=3 sessions=%d holds=%d (per first master %s) "
            "faults=%d (%s) failover_s=%s brokers_switched_s=%s "
            "rejoin_s=%s holds_elsewhere_during_failover=%s "
            "progress_after_fault_s=%s "
            "held_through_failover=%d (kept=%d told_lost=%d) "
            "redis_hiccups=%d lost_reported=%d (err_lost=%d event_lost=%d) "
            "broker_lost=%d reclaimed=%d redirects=%d "
            "stale_writes_rejected=%d writes_accepted=%d stalls=%d "
            "superseded_holds=%d overlapping=%d broken_holds=%d busy=%d "
            "unavailable(acquire=%d release=%d) requests=%d replies=%d "
            "closed_with_request_outstanding=%d "
            "closed_after_quit_before_ok=%d token_order_checked=%d "
            "token_regressions=%d final_acquires=%d violations=%d"
            % (w.seed, w.now(), " (sanitized)" if SANITIZED else "",
               N_BROKERS, N_CLIENTS, len(self.keys), c["sessions"],
               c["holds"], "/".join(str(per_master[m])
                                    for m in sorted(per_master)),
               sum(w.faults[f] for f in FAULTS),
               " ".join("%s=%d" % (f, w.faults[f]) for f in FAULTS),
               span(self.failover_s), span(self.switch_s),
               span(self.rejoin_s),
               "/".join(map(str, self.during_failover)) or "-",
               span(self.progress_s), len(w.through_failover), kept, told,
               w.faults["redis_hiccup"], c["holds_told_lost"],
               c["err_lost"], c["event_lost"], self.broker_stats["lost"],
               self.broker_stats["reclaimed"],
               self.broker_stats["redis_redirects"],
               c["stale_writes_rejected"], c["writes_accepted"],
               c["stalls"], c["superseded_holds"], c["overlapping_holds"],
               c["holds_broken"], c["busy"], c["acquire_unavailable"],
               c["release_unavailable"], c["requests"], c["replies"],
               c["closed_with_request_outstanding"],
               c["closed_after_quit_before_ok"],
               c["token_order_checked"], c["token_regressions"],
               c["final_acquires"], len(w.violations)))
        sys.stderr.write("\n" + line + "\n")
        if w.violations:
            kinds = collections.Counter(chaos_sentinel.violation_kind(v)
                                        for v in w.violations)
            sys.stderr.write("violation kinds:\n" + "".join(
                "  %5d  %s ...\n" % (n, k) for k, n in kinds.most_common()))
        if os.environ.get("CHAOS_VERBOSE"):
            sys.stderr.write("faults:\n  " + "\n  ".join(w.fault_log) + "\n")
        sys.stderr.flush()


if __name__ == "__main__":
    unittest.main()
