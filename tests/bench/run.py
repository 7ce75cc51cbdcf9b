#!/usr/bin/env python3
"""
run.py - the lockbroker benchmark driver (make bench).

Starts its own redis-server (--save '' --appendonly no) and brokers on
free 127.0.0.1 ports, runs every measurement with the load generator
(tests/bench/lbbench.c), and prints ONE table, then issue 14's targets
beside this run's figures (met / not met; nothing asserts them), then the
Redis Cluster table, all also written to --out.
Everything it starts it stops again, by pid.  The redis_replica_acks
rows use a second redis-server (a master) with one replica of its own.
The Redis Cluster rows (a second table) use a 1-master cluster (one
cluster-enabled redis-server given all 16384 slots with CLUSTER
ADDSLOTSRANGE) and then a 3-master cluster (topology.ClusterTopology,
masters=3, replicas=0), one at a time, with brokers started with
--redis_cluster.  The pairs section also runs the 50-connection pairs
over TLS against the same broker's tls_port (a CA and a certificate for
127.0.0.1 made with the openssl CLI in the work dir).  About 2 minutes
(--no-cluster: about 1).  --only
runs some sections of the table alone (e.g. --only handoff: the contended
rows, hot key and semaphore, in about 15 s).

  python3 tests/bench/run.py --broker build/lockbrokerd --tool build/lbbench \
      --scripts scripts --out build/bench/results.txt [--seconds 4] \
      [--no-cluster] [--only pairs,handoff,memory,acks,cluster]

What each row means: docs/BENCHMARKS.md.  Nothing here asserts a number:
the machine is shared and the figures are indicative.
"""

import argparse
import datetime
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402  (redis-server on a free port, line client)
import topology  # noqa: E402  (Redis Cluster nodes and ClusterTopology)

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAIR_CONNS = (1, 50, 500)
CPU_CONNS = 50                  # the pairs run CPU time is taken around
IDLE_SESSIONS = 10000
LOCK_SESSIONS, LOCKS_EACH = 100, 1000
CONTENDERS = 8
SEM_PERMITS = 3                 # the semaphore row: 8 contenders, LIMIT 3
SECTIONS = ("pairs", "handoff", "memory", "acks", "cluster")
# the master and its one replica for the redis_replica_acks rows (harness
# already passes --save '' --appendonly no)
REPL_ARGS = ["--repl-diskless-sync-delay", "0"]
CLUSTER_MASTERS = (1, 3)        # the cluster rows: 1 master, then 3


def stop(proc, sig=signal.SIGTERM):
    """Stop a process we started (by its pid) and reap it."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def cpu_ticks(pid):
    """utime + stime of pid, in clock ticks (/proc/<pid>/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])    # fields 14 and 15


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS for pid %d" % pid)


def make_certs(workdir):
    """A CA and a server certificate for 127.0.0.1 (EC P-256, as a
    deployment would use); returns (ca, cert, key) paths."""
    def ossl(*args):
        subprocess.run(["openssl"] + list(args), cwd=workdir, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=30)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    ossl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt",
         "-days", "2", "-subj", "/CN=bench-ca")
    ossl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj",
         "/CN=127.0.0.1")
    with open(os.path.join(workdir, "tls.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    ossl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey",
         "ca.key", "-set_serial", "1", "-days", "2", "-extfile", "tls.ext",
         "-out", "tls.crt")
    return tuple(os.path.join(workdir, n) for n in
                 ("ca.crt", "tls.crt", "tls.key"))


def kv(line):
    """'a=1 b=2.5' -> {'a': 1, 'b': 2.5}."""
    out = {}
    for word in line.split():
        k, _, v = word.partition("=")
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


class Broker:
    """A lockbrokerd on a free port, logging at warn: harness.Broker runs
    brokers with -v, and their debug logging would be measured too."""

    def __init__(self, binary, redis, workdir, name, *extra, cluster=None,
                 masters=1):
        """redis: a node with .addr (-r), or None with cluster: seed
        addresses for --redis_cluster; then ready also waits for
        redis_nodes=<masters>."""
        self.port = harness.free_port()
        self.tls_port = None
        if "--tls_port" in extra:
            self.tls_port = int(extra[list(extra).index("--tls_port") + 1])
        self.masters = masters if cluster else None
        self.log = open(os.path.join(workdir, name + ".log"), "wb")
        store = ["--redis_cluster", cluster] if cluster else \
            ["-r", redis.addr]
        self.proc = subprocess.Popen(
            [binary, "-b", "127.0.0.1", "-p", str(self.port)] + store +
            ["--prefix", "bench", "--log_level", "warn"] +
            [str(a) for a in extra],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            harness.wait_until(self.ready, 10, what="broker %s ready" % name)
        except BaseException:
            self.close()
            raise

    def stats(self):
        c = harness.Client(self.port, timeout=2.0)
        try:
            return kv(c.req("STATS"))
        finally:
            c.close()

    def ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError("broker exited; see its log")
        st = self.stats()
        return st.get("redis") == "up" and (
            self.masters is None or st.get("redis_nodes") == self.masters)

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    @property
    def tls_addr(self):
        return "127.0.0.1:%d" % self.tls_port

    @property
    def pid(self):
        return self.proc.pid

    def close(self):
        stop(self.proc)
        self.log.close()


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = tempfile.mkdtemp(prefix="lockbroker-bench-")
        self.procs = []
        self.runs = 0

    def tool(self, *argv, timeout=None):
        """Run lbbench to completion; its one result line, parsed."""
        self.runs += 1
        self.last_tag = "r%d" % self.runs
        argv = [self.args.tool] + [str(a) for a in argv] + [
            "--tag", self.last_tag]
        res = subprocess.run(argv, capture_output=True, text=True,
                             timeout=timeout or 60)
        if res.returncode != 0 or not res.stdout.strip():
            raise RuntimeError("%s failed (%d): %s" % (
                " ".join(argv), res.returncode, res.stderr.strip()))
        if res.stderr.strip():
            sys.stderr.write(res.stderr)
        return kv(res.stdout.strip().splitlines()[-1])

    def sessions(self, broker, n, keys=0):
        """Open n sessions (then keys locks each); RSS at each stage."""
        argv = [self.args.tool, "sessions", "--broker", broker.addr,
                "--conns", n, "--keys", keys, "--limit", 60,
                "--tag", "s%d" % n]
        p = subprocess.Popen([str(a) for a in argv], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        try:
            out = {}
            line = p.stdout.readline()
            if not line.startswith("ready sessions="):
                raise RuntimeError("lbbench sessions: %r" % line)
            out["sessions"] = kv(line[6:])
            time.sleep(0.3)
            out["rss_sessions"] = rss_bytes(broker.pid)
            if keys:
                p.stdin.write("go\n")
                p.stdin.flush()
                line = p.stdout.readline()
                if not line.startswith("ready locks="):
                    raise RuntimeError("lbbench sessions: %r" % line)
                out["locks"] = kv(line[6:])
                time.sleep(0.3)
                out["rss_locks"] = rss_bytes(broker.pid)
            p.stdin.close()
            p.wait(timeout=10)
            return out
        finally:
            stop(p, signal.SIGKILL)

    def run(self):
        a = self.args
        r = {"started": datetime.datetime.now(datetime.timezone.utc),
             "load_before": os.getloadavg()}
        redis = harness.Redis()
        self.procs.append(redis)
        r["redis_version"] = subprocess.run(
            ["redis-server", "--version"], capture_output=True,
            text=True).stdout.split("v=")[-1].split()[0]
        r["broker_version"] = subprocess.run(
            [a.broker, "-V"], capture_output=True, text=True).stdout.strip()
        r["commit"] = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True,
            text=True, cwd=HERE).stdout.strip() or "?"
        want = a.only
        if "pairs" in want or "handoff" in want:
            # broker2 (same prefix) only for the 4+4 handoff run: started
            # beside the pairs runs it received every release PUBLISH of
            # them and woke for each, a process hop the direct runs (their
            # own prefix) never paid (issue 14: about 10 us per 1-conn
            # ACQUIRE with all on one core)
            # with a TLS listener beside (the TLS pairs row)
            ca, crt, key = make_certs(self.work)
            b1 = Broker(a.broker, redis, self.work, "broker1",
                        "--tls_port", harness.free_port(), "--tls_cert_file",
                        crt, "--tls_key_file", key)
            self.procs.append(b1)

        # 1. pairs, broker and direct, and the CPU time around the 50 run
        pairs = {}
        for n in PAIR_CONNS if "pairs" in want else ():
            common = ["--conns", n, "--seconds", a.seconds, "--warmup",
                      a.warmup, "--limit", a.seconds + a.warmup + 30]
            cb, cr = cpu_ticks(b1.pid), cpu_ticks(redis.pid)
            pairs[("broker", n)] = res = self.tool(
                "pairs", "--broker", b1.addr, *common)
            if n == CPU_CONNS:
                r["cpu_broker"] = (cpu_ticks(b1.pid) - cb, res["total"])
                r["cpu_redis_b"] = (cpu_ticks(redis.pid) - cr,
                                    res["total"])
            cr = cpu_ticks(redis.pid)
            pairs[("direct", n)] = res = self.tool(
                "pairs", "--redis", redis.addr, "--scripts", a.scripts,
                *common)
            if n == CPU_CONNS:
                r["cpu_redis_d"] = (cpu_ticks(redis.pid) - cr,
                                    res["total"])
                # the same broker and load over TLS (handshakes happen
                # before the run; the window is requests only)
                cb = cpu_ticks(b1.pid)
                pairs[("tls", n)] = res = self.tool(
                    "pairs", "--broker", b1.tls_addr, "--tls", ca, *common)
                r["cpu_broker_tls"] = (cpu_ticks(b1.pid) - cb,
                                       res["total"])
        if pairs:
            r["pairs"] = pairs

        # 2. contended handoff: 8 on one broker; 4 + 4 on two; the same 8
        # on one broker sharing a semaphore of SEM_PERMITS (LIMIT)
        common = ["--conns", CONTENDERS, "--hold-ms", 1, "--wait-ms", 10000,
                  "--seconds", a.seconds, "--warmup", a.warmup,
                  "--limit", a.seconds + a.warmup + 30]
        if "handoff" in want:
            r["handoff1"] = self.tool("handoff", "--broker", b1.addr,
                                      *common)
            r["semaphore"] = self.tool("handoff", "--broker", b1.addr,
                                       "--permits", SEM_PERMITS, *common)
            b2 = Broker(a.broker, redis, self.work, "broker2")
            self.procs.append(b2)
            r["handoff2"] = self.tool("handoff", "--broker", b1.addr,
                                      "--broker", b2.addr, *common)
            b2.close()
            self.procs.remove(b2)
        if "pairs" in want or "handoff" in want:
            b1.close()
            self.procs.remove(b1)
        # 3. memory, with brokers of its own
        if "memory" in want:
            self.memory(r, redis)

        # 4. replica acks: a Redis master with one replica of its own, one
        # broker with redis_replica_acks 0, then one with 1 (one at a time)
        if "acks" in want:
            self.replica_acks(r)

        # 5. Redis Cluster: 1 master, then 3 masters (the second table)
        if "cluster" in want:
            redis.close()       # idle from here on; the clusters are alone
            self.procs.remove(redis)
            t0 = time.monotonic()
            self.cluster(r)
            r["cluster_s"] = time.monotonic() - t0
        r["load_after"] = os.getloadavg()
        r["finished"] = datetime.datetime.now(datetime.timezone.utc)
        return r

    def memory(self, r, redis):
        """3. memory: fresh brokers, so nothing earlier is in their heaps."""
        a = self.args
        b3 = Broker(a.broker, redis, self.work, "broker3",
                    "--max_sessions", IDLE_SESSIONS + 100)
        self.procs.append(b3)
        time.sleep(0.3)
        r["rss_base"] = rss_bytes(b3.pid)
        r["idle"] = self.sessions(b3, IDLE_SESSIONS)
        b3.close()
        self.procs.remove(b3)
        b4 = Broker(a.broker, redis, self.work, "broker4")
        self.procs.append(b4)
        time.sleep(0.3)
        r["rss_base4"] = rss_bytes(b4.pid)
        r["held"] = self.sessions(b4, LOCK_SESSIONS, LOCKS_EACH)
        b4.close()
        self.procs.remove(b4)

    def replica_acks(self, r):
        """Pairs at CPU_CONNS through a broker on a master with one replica,
        with redis_replica_acks 0 and 1; the handoff run with acks 1."""
        a = self.args
        master = harness.Redis(*REPL_ARGS)
        self.procs.append(master)
        replica = harness.Redis(*(REPL_ARGS + ["--replicaof", "127.0.0.1",
                                               master.port]))
        self.procs.append(replica)

        def linked():
            i = master.cli("INFO", "replication")
            j = replica.cli("INFO", "replication")
            return ("master_link_status:up" in j and
                    "connected_slaves:1" in i)
        harness.wait_until(linked, 20, what="replica master_link_status:up")
        pairs = ["pairs", "--conns", CPU_CONNS, "--seconds", a.seconds,
                 "--warmup", a.warmup, "--limit", a.seconds + a.warmup + 30]

        def wait_calls():
            for line in master.cli("INFO", "commandstats").splitlines():
                if line.startswith("cmdstat_wait:"):
                    return kv(line.split(":", 1)[1].replace(",", " "))[
                        "calls"]
            return 0
        for acks in (0, 1):
            b = Broker(a.broker, master, self.work, "broker_acks%d" % acks,
                       "--redis_replica_acks", acks)
            self.procs.append(b)
            w = wait_calls()
            r["acks%d" % acks] = self.tool(*(pairs + ["--broker", b.addr]))
            r["wait_calls%d" % acks] = wait_calls() - w
            if acks:
                try:
                    r["handoff_acks1"] = self.tool(
                        "handoff", "--broker", b.addr, "--conns",
                        CONTENDERS, "--hold-ms", 1, "--wait-ms", 10000,
                        "--seconds", a.seconds, "--warmup", a.warmup,
                        "--limit", a.seconds + a.warmup + 30)
                except RuntimeError as e:
                    sys.stderr.write("run.py: handoff with acks 1: %s\n" % e)
                    r["handoff_acks1"] = None
                c = harness.Client(b.port, timeout=2.0)
                try:
                    st = kv(c.req("STATS"))
                finally:
                    c.close()
                r["acks_missed"] = st.get("replica_acks_missed", "?")
            b.close()
            self.procs.remove(b)
        try:
            r["replica_linked_after"] = linked()
        except (OSError, EOFError, harness.RedisError):
            r["replica_linked_after"] = False
        for p in (replica, master):
            p.close()
            self.procs.remove(p)

    # ---------------------------------------------------- Redis Cluster --

    def new_cluster(self, masters):
        """A cluster of `masters` masters and no replicas, registered in
        self.procs (stopped by pid at close)."""
        if masters == 1:
            c = OneMasterCluster(self.work)
        else:
            c = topology.ClusterTopology(masters=masters, replicas=0)
        self.procs.append(c)
        return c

    def cluster(self, r):
        """Pairs at PAIR_CONNS through one broker on a 1-master cluster,
        then on a 3-master one (no replicas; one cluster at a time, fresh
        brokers), with the CPU of the broker and of every master around
        each run; then the 4+4 two-broker handoff on the 3-master cluster.
        A failure here is reported in the table (and the exit status), the
        rows above are kept."""
        out = r["cluster"] = {}
        try:
            for m in CLUSTER_MASTERS:
                out[m] = self.cluster_pairs(m, handoff=(
                    m == max(CLUSTER_MASTERS)))
        except (RuntimeError, AssertionError, OSError, EOFError,
                harness.RedisError, subprocess.TimeoutExpired) as e:
            # what is still running is stopped by close(), by pid
            r["cluster_error"] = (str(e) or type(e).__name__).splitlines()[0]
            sys.stderr.write("run.py: cluster rows: %s\n" % e)

    def cluster_pairs(self, nmasters, handoff):
        a = self.args
        topo = self.new_cluster(nmasters)
        slot_map = topo.slot_map()
        masters = sorted(set(x for _, _, x in slot_map))
        if len(masters) != nmasters:
            raise RuntimeError("cluster of %d masters serves slots from %s"
                               % (nmasters, masters))
        pids = {x: topo.node(x).pid for x in masters}
        seeds = ",".join(masters)
        b = Broker(a.broker, None, self.work, "cluster%d_b1" % nmasters,
                   cluster=seeds, masters=nmasters)
        self.procs.append(b)
        res = {"masters": masters, "pairs": {}}
        for n in PAIR_CONNS:
            common = ["--conns", n, "--seconds", a.seconds, "--warmup",
                      a.warmup, "--limit", a.seconds + a.warmup + 30]
            calls0 = {x: evalsha_calls(x) for x in masters}
            reads0 = {x: reads_processed(x) for x in masters}
            cb = cpu_ticks(b.pid)
            cm = {x: cpu_ticks(pids[x]) for x in masters}
            t0 = time.monotonic()
            x = self.tool("pairs", "--broker", b.addr, *common)
            x["wall_s"] = time.monotonic() - t0
            x["cpu_broker"] = cpu_ticks(b.pid) - cb
            x["cpu_masters"] = sum(cpu_ticks(pids[m]) - cm[m]
                                   for m in masters)
            x["calls"] = {m: evalsha_calls(m) - calls0[m] for m in masters}
            x["reads"] = sum(reads_processed(m) - reads0[m] for m in masters)
            # where the run's lock keys live: the broker's key is
            # <prefix>:lock:<name>, lbbench's names <tag>:p<conns>:<i>
            keys = dict.fromkeys(masters, 0)
            for i in range(n):
                slot = topology.hash_slot("bench:lock:%s:p%d:%d" % (
                    self.last_tag, n, i))
                keys[topology.owner_in(slot_map, slot)] += 1
            x["keys"] = keys
            res["pairs"][n] = x
        if handoff:
            b2 = Broker(a.broker, None, self.work, "cluster%d_b2" % nmasters,
                        cluster=seeds, masters=nmasters)
            self.procs.append(b2)
            res["handoff2"] = self.tool(
                "handoff", "--broker", b.addr, "--broker", b2.addr,
                "--conns", CONTENDERS, "--hold-ms", 1, "--wait-ms", 10000,
                "--seconds", a.seconds, "--warmup", a.warmup,
                "--limit", a.seconds + a.warmup + 30)
            res["hot_master"] = topology.owner_in(
                slot_map, topology.hash_slot("bench:lock:%s:hot"
                                             % self.last_tag))
            brokers = (b, b2)
        else:
            brokers = (b,)
        res["redirects"] = sum(x.stats().get("redis_redirects", 0)
                               for x in brokers)
        for x in brokers:
            x.close()
            self.procs.remove(x)
        topo.close()
        self.procs.remove(topo)
        return res

    def close(self):
        for p in reversed(self.procs):
            try:
                p.close()
            except Exception as e:      # keep stopping the others
                sys.stderr.write("run.py: stopping %r: %s\n" % (p, e))
        shutil.rmtree(self.work, ignore_errors=True)


class OneMasterCluster:
    """A Redis Cluster of one master and no replicas: one cluster-enabled
    redis-server (topology.ClusterNode: 127.0.0.1, free client and bus
    ports) given all 16384 slots with CLUSTER ADDSLOTSRANGE.  redis-cli
    --cluster create wants 3 masters at least.  --cluster-announce-ip
    127.0.0.1: a node that never met another reports an empty IP in
    CLUSTER SLOTS.  The same few methods as topology.ClusterTopology;
    close() stops it by pid."""

    def __init__(self, workdir):
        self.dir = tempfile.mkdtemp(prefix="cluster1-", dir=workdir)
        self.node_ = topology.ClusterNode(
            self.dir, ["--cluster-announce-ip", "127.0.0.1"])
        try:
            self.node_.cli("CLUSTER", "ADDSLOTSRANGE", 0,
                           topology.SLOT_COUNT - 1)
            harness.wait_until(
                lambda: topology.cluster_info(self.node_.addr, timeout=1.0)
                .get("cluster_state") == "ok", 15, interval=0.05,
                what="1-master cluster_state:ok")
        except BaseException:
            self.close()
            raise

    def node(self, addr):
        if addr != self.node_.addr:
            raise KeyError(addr)
        return self.node_

    def slot_map(self):
        return topology.slot_owners(topology.cluster_slots(self.node_.addr))

    def close(self):
        self.node_.stop()


def reads_processed(addr):
    """total_reads_processed of the Redis at addr (INFO stats): reads
    from client sockets, so script calls per read is the pipeline batch
    a master takes in per wake-up."""
    return int(topology.info(addr, "stats")["total_reads_processed"])


def evalsha_calls(addr):
    """cmdstat_evalsha calls of the Redis at addr (INFO commandstats)."""
    st = topology.info(addr, "commandstats").get("cmdstat_evalsha")
    return kv(st.replace(",", " "))["calls"] if st else 0


# ------------------------------------------------------------- output --

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def ms(us):
    return "%.2f" % (us / 1000.0)


def n0(x):
    return "{:,.0f}".format(x)


def table(r, args):
    """The first table: the rows of the sections that ran (--only)."""
    rows = []

    def row(what, broker="", direct="", ratio=""):
        rows.append((what, broker, direct, ratio))

    if "pairs" in r:
        pair_rows(r, row)
    if "handoff1" in r:
        handoff_rows(r, row)
    if "acks0" in r:
        acks_rows(r, row)
    if "rss_base" in r:
        memory_rows(r, row)

    head = ("measurement", "broker", "direct Redis", "broker/direct")
    lines = [
        "lockbroker benchmark, %s" % r["started"].strftime("%Y-%m-%d %H:%M UTC"),
        "machine: nproc %d, %s, Linux %s; load average %.2f before, "
        "%.2f after (1 min)" % (os.cpu_count(), cpu_model(), platform.release(),
                                r["load_before"][0], r["load_after"][0]),
        "%s, commit %s; redis-server %s (own, no persistence)" % (
            r["broker_version"], r["commit"], r["redis_version"]),
    ]
    if "acks0" in r:
        lines.append(
            "replica-ack rows: a second redis-server master with one replica "
            "(--replicaof, diskless sync), replica still linked after them: "
            "%s" % ("yes" if r["replica_linked_after"] else "NO"))
    if set(args.only) != set(SECTIONS):
        lines.append("sections run (--only): %s" % ", ".join(
            x for x in SECTIONS if x in args.only))
    lines += [
        "%.1f s per point after %.1f s warm-up; the run took %.0f s" % (
            args.seconds, args.warmup,
            (r["finished"] - r["started"]).total_seconds()),
        "",
    ]
    if rows:
        lines += render(head, rows)
    lines += [""] + targets_table(r)
    if "cluster" in r:
        lines += [""] + cluster_table(r)
    return "\n".join(lines) + "\n"


def targets_table(r):
    """Issue 14's targets, each beside this run's figure: met / not met
    (or "not run" when --only left its section out).  Nothing asserts
    them: the machine is shared and the figures are indicative."""
    rows = []

    def target(what, goal, have, met):
        rows.append((what, goal, have, "not run" if met is None else
                     "met" if met else "not met"))

    h1, h2 = r.get("handoff1"), r.get("handoff2")
    if h1:
        target("same-broker handoff p50 / p99 us (8 on one broker)",
               "<= 40 / <= 250", "%d / %d" % (h1["same_p50_us"],
                                              h1["same_p99_us"]),
               h1["same_p50_us"] <= 40 and h1["same_p99_us"] <= 250)
        target("hot key acquisitions/s; longest ACQUIRE->OK wait ms",
               ">= 950; <= 12", "%s; %s" % (n0(h1["rate"]),
                                            ms(h1["max_wait_us"])),
               h1["rate"] >= 950 and h1["max_wait_us"] <= 12000)
    else:
        target("same-broker handoff p50 / p99 us", "<= 40 / <= 250", "-",
               None)
        target("hot key acquisitions/s; longest wait ms", ">= 950; <= 12",
               "-", None)
    if h2 and h2["cross_n"]:
        target("cross-broker handoff p50 us (4+4 on two brokers)", "<= 250",
               "%d" % h2["cross_p50_us"], h2["cross_p50_us"] <= 250)
    else:
        target("cross-broker handoff p50 us", "<= 250", "-", None)
    p = r.get("pairs")
    if p:
        b, d = p[("broker", 1)], p[("direct", 1)]
        x = b["acq_p50_us"] / d["acq_p50_us"] if d["acq_p50_us"] else 0
        target("ACQUIRE p50, 1 conn: broker / direct script call", "<= 2.0 x",
               "%d / %d us = %.2f x" % (b["acq_p50_us"], d["acq_p50_us"], x),
               0 < x <= 2.0)
        rb = per_k_ms(*r["cpu_redis_b"])
        rd = per_k_ms(*r["cpu_redis_d"])
        target("Redis CPU per 1,000 pairs (%d conns): broker / direct"
               % CPU_CONNS, "<= 0.3 x", "%.1f / %.1f ms = %.2f x" % (
                   rb, rd, rb / rd) if rb and rd else "-",
               bool(rb and rd) and rb / rd <= 0.3)
        cb = per_k_ms(*r["cpu_broker"])
        target("broker CPU ms per 1,000 pairs (%d conns)" % CPU_CONNS,
               "<= 15", "%.1f" % cb if cb else "-", bool(cb) and cb <= 15)
        b, d = p[("broker", CPU_CONNS)], p[("direct", CPU_CONNS)]
        x = b["rate"] / d["rate"] if d["rate"] else 0
        target("pairs/s, %d conns: broker / direct" % CPU_CONNS, ">= 1.2 x",
               "%s / %s = %.2f x" % (n0(b["rate"]), n0(d["rate"]), x),
               x >= 1.2)
    else:
        for what, goal in (("ACQUIRE p50, 1 conn: broker / direct",
                            "<= 2.0 x"),
                           ("Redis CPU per 1,000 pairs: broker / direct",
                            "<= 0.3 x"),
                           ("broker CPU ms per 1,000 pairs", "<= 15"),
                           ("pairs/s, 50 conns: broker / direct",
                            ">= 1.2 x")):
            target(what, goal, "-", None)
    return ["Issue 14 targets (this run):", ""] + render(
        ("target", "goal", "this run", ""), rows)


def pair_rows(r, row):
    p = r["pairs"]
    for n in PAIR_CONNS:
        b, d = p[("broker", n)], p[("direct", n)]
        row("acquire+release pairs/s, %d conn%s" % (n, "s" if n > 1 else ""),
            n0(b["rate"]), n0(d["rate"]),
            "%.2f" % (b["rate"] / d["rate"]) if d["rate"] else "-")
    for n in PAIR_CONNS:
        b, d = p[("broker", n)], p[("direct", n)]
        row("pair latency p50 / p99 ms, %d conn%s" % (n, "s" if n > 1 else ""),
            "%s / %s" % (ms(b["pair_p50_us"]), ms(b["pair_p99_us"])),
            "%s / %s" % (ms(d["pair_p50_us"]), ms(d["pair_p99_us"])))
    b, d = p[("broker", 1)], p[("direct", 1)]
    row("ACQUIRE alone (written -> OK read) p50 / p99 ms, 1 conn",
        "%s / %s" % (ms(b["acq_p50_us"]), ms(b["acq_p99_us"])),
        "%s / %s" % (ms(d["acq_p50_us"]), ms(d["acq_p99_us"])),
        "%.2f" % (b["acq_p50_us"] / d["acq_p50_us"])
        if d["acq_p50_us"] else "-")

    def per_k(t):
        ticks, pairs = t
        return "%.1f" % (ticks * 1000.0 / CLK_TCK / pairs * 1000.0) \
            if pairs else "-"
    row("CPU ms per 1,000 pairs (%d conns): lockbrokerd" % CPU_CONNS,
        per_k(r["cpu_broker"]), "")
    row("CPU ms per 1,000 pairs (%d conns): redis-server" % CPU_CONNS,
        per_k(r["cpu_redis_b"]), per_k(r["cpu_redis_d"]))
    # the same broker over TLS: the ratio column is TLS / plain
    t, b = p[("tls", CPU_CONNS)], p[("broker", CPU_CONNS)]
    row("acquire+release pairs/s, %d conns over TLS (plain: %s), and "
        "TLS/plain" % (CPU_CONNS, n0(b["rate"])), n0(t["rate"]), "",
        "%.2f" % (t["rate"] / b["rate"]) if b["rate"] else "-")
    row("CPU ms per 1,000 pairs (%d conns) over TLS: lockbrokerd"
        % CPU_CONNS, per_k(r["cpu_broker_tls"]), "")


def handoff_rows(r, row):
    h1, h2, sem = r["handoff1"], r["handoff2"], r["semaphore"]
    row("handoff RELEASE->next OK ms p50 / p99 / max, 8 on one broker",
        "%s / %s / %s" % (ms(h1["same_p50_us"]), ms(h1["same_p99_us"]),
                          ms(h1["same_max_us"])))
    row("handoff ms p50 / p99 / max, 4+4 on two brokers, to the other "
        "broker (%d of %d)" % (h2["cross_n"], h2["acquisitions"]),
        "%s / %s / %s" % (ms(h2["cross_p50_us"]), ms(h2["cross_p99_us"]),
                          ms(h2["cross_max_us"])))
    row("handoff ms p50 / p99 / max, 4+4 on two brokers, same broker",
        "%s / %s / %s" % (ms(h2["same_p50_us"]), ms(h2["same_p99_us"]),
                          ms(h2["same_max_us"])))
    row("hot-key acquisitions/s, 8 on one broker / 4+4 on two",
        "%s / %s" % (n0(h1["rate"]), n0(h2["rate"])))
    row("semaphore acquisitions/s, 8 on one broker, one LIMIT %d key "
        "(ideal ~%s)" % (SEM_PERMITS, n0(SEM_PERMITS * 1000)),
        n0(sem["rate"]))
    row("  its RELEASE->next OK ms p50 / p99 / max",
        "%s / %s / %s" % (ms(sem["same_p50_us"]), ms(sem["same_p99_us"]),
                          ms(sem["same_max_us"])))
    row("longest ACQUIRE->OK wait ms, 8 on one broker / 4+4 on two",
        "%s / %s" % (ms(h1["max_wait_us"]), ms(h2["max_wait_us"])))
    row("longest ACQUIRE->OK wait ms, 8 on the LIMIT %d key" % SEM_PERMITS,
        ms(sem["max_wait_us"]))
    row("contenders' 1 ms holds, OK read -> RELEASE written, ms p50 / max, "
        "8 on one broker", "%s / %s" % (ms(h1["hold_p50_us"]),
                                        ms(h1["hold_max_us"])))
    row("releaser re-granted at once / two holders at once (both runs)",
        "%d / %d" % (h1["self_again"] + h2["self_again"],
                     h1["overlaps"] + h2["overlaps"]))
    row("LIMIT %d key: most holders at once / more than %d at once / "
        "releaser re-granted at once" % (SEM_PERMITS, SEM_PERMITS),
        "%d / %d / %d" % (sem["max_holders"], sem["overlaps"],
                          sem["self_again"]))


def acks_rows(r, row):
    a0, a1 = r["acks0"], r["acks1"]
    for acks, x in ((0, a0), (1, a1)):
        row("acquire+release pairs/s, %d conns, Redis with 1 replica, "
            "redis_replica_acks %d" % (CPU_CONNS, acks), n0(x["rate"]))
    row("  acks 1 / acks 0", "%.2f" % (a1["rate"] / a0["rate"])
        if a0["rate"] else "-")
    for acks, x in ((0, a0), (1, a1)):
        row("pair latency p50 / p99 ms, %d conns, 1 replica, acks %d"
            % (CPU_CONNS, acks),
            "%s / %s" % (ms(x["pair_p50_us"]), ms(x["pair_p99_us"])))
    row("  WAIT calls per 1,000 grants, acks 1 (group commit)",
        "%.1f" % (r["wait_calls1"] * 1000.0 / a1["total"])
        if a1["total"] else "-")
    h = r["handoff_acks1"]
    if h:
        row("handoff ms p50 / p99 / max, 8 on one broker, acks 1",
            "%s / %s / %s" % (ms(h["same_p50_us"]), ms(h["same_p99_us"]),
                              ms(h["same_max_us"])))
        row("hot-key acquisitions/s, 8 on one broker, acks 1",
            n0(h["rate"]))
    else:
        row("handoff, 8 on one broker, acks 1", "failed")
    row("acks 1 runs: replica_acks_missed / pair errors / releaser "
        "re-granted / two holders", "%s / %d / %s / %s" % (
            r["acks_missed"], a1.get("errors", 0),
            h["self_again"] if h else "-", h["overlaps"] if h else "-"))


def memory_rows(r, row):
    base, idle = r["rss_base"], r["idle"]["rss_sessions"]
    row("broker RSS MiB: fresh / with %s idle sessions" % n0(IDLE_SESSIONS),
        "%.1f / %.1f" % (base / 2**20, idle / 2**20))
    row("  bytes per idle session over the fresh broker",
        n0((idle - base) / IDLE_SESSIONS))
    held = r["held"]
    nlocks = LOCK_SESSIONS * LOCKS_EACH
    row("broker RSS MiB: %d idle sessions / + %s locks held" % (
        LOCK_SESSIONS, n0(nlocks)),
        "%.1f / %.1f" % (held["rss_sessions"] / 2**20,
                         held["rss_locks"] / 2**20))
    row("  bytes per lock over the %d idle sessions" % LOCK_SESSIONS,
        n0((held["rss_locks"] - held["rss_sessions"]) / nlocks))


def render(head, rows):
    """A markdown table: the first column left-aligned, the rest right."""
    w = [max(len(x[i]) for x in rows + [head]) for i in range(4)]

    def fmt(x):
        return "| " + " | ".join(
            x[i].ljust(w[i]) if i == 0 else x[i].rjust(w[i])
            for i in range(4)) + " |"
    return [fmt(head),
            "|" + "|".join("-" * (w[i] + 1) + (":" if i else "-")
                           for i in range(4)) + "|"] + [fmt(x) for x in rows]


def per_k_ms(ticks, pairs):
    """CPU ms per 1,000 pairs from clock ticks."""
    return ticks * 1000.0 / CLK_TCK / pairs * 1000.0 if pairs else None


def derived_rates(x):
    """(broker, Redis) pairs/s per busy core at CPU_CONNS, from CPU per
    pair (Redis: summed over the masters), or None."""
    if not x:
        return None
    p = x["pairs"][CPU_CONNS]
    b = per_k_ms(p["cpu_broker"], p["total"])
    m = per_k_ms(p["cpu_masters"], p["total"])
    return (1e6 / b, 1e6 / m) if b and m else None


def cluster_table(r):
    """The Redis Cluster rows: 1 master against 3 masters."""
    c = r["cluster"]
    lo, hi = CLUSTER_MASTERS
    rows = []

    def row(what, x1="", x3="", ratio=""):
        rows.append((what, x1, x3, ratio))

    def both(f):
        """f(result of one cluster) for 1 and 3 masters ("-" if missing)."""
        return [f(c[m]) if m in c else "-" for m in CLUSTER_MASTERS]

    def ratio(f):
        if lo in c and hi in c and f(c[lo]):
            return "%.2f" % (f(c[hi]) / f(c[lo]))
        return "-"

    def conns(n):
        return "%d conn%s" % (n, "s" if n > 1 else "")

    for n in PAIR_CONNS:
        def rate(x, n=n):
            return x["pairs"][n]["rate"]
        row("acquire+release pairs/s, %s" % conns(n),
            *both(lambda x: n0(rate(x))), ratio(rate))
    for n in PAIR_CONNS:
        row("pair latency p50 / p99 ms, %s" % conns(n), *both(
            lambda x, n=n: "%s / %s" % (ms(x["pairs"][n]["pair_p50_us"]),
                                        ms(x["pairs"][n]["pair_p99_us"]))))
    for n in (CPU_CONNS, max(PAIR_CONNS)):
        for what, key in (("lockbrokerd", "cpu_broker"),
                          ("redis-server, sum over the masters",
                           "cpu_masters")):
            def cpu(x, n=n, key=key):
                return per_k_ms(x["pairs"][n][key], x["pairs"][n]["total"])
            row("CPU ms per 1,000 pairs (%d conns): %s" % (n, what),
                *both(lambda x, f=cpu: "%.1f" % f(x)), ratio(cpu))
    for n in (CPU_CONNS, max(PAIR_CONNS)):
        def busy(x, n=n):
            p = x["pairs"][n]
            return "%.2f + %.2f + %.2f" % (
                p["cpu_broker"] / CLK_TCK / p["wall_s"],
                p["cpu_masters"] / CLK_TCK / p["wall_s"],
                p["cpu_s"] / p["wall_s"])
        row("cores busy in the %d-conn run: lockbrokerd + masters + "
            "lbbench" % n, *both(busy))

    def core_rate(x):
        d = derived_rates(x)
        return "%s / %s" % (n0(d[0]), n0(d[1])) if d else "-"
    row("derived: pairs/s per busy core, lockbrokerd / Redis "
        "(%d conns, from CPU per pair)" % CPU_CONNS, *both(core_rate))
    big = max(PAIR_CONNS)

    def spread(d):
        v = sorted(d.values())
        return str(v[0]) if len(v) == 1 else "%d / %d" % (v[0], v[-1])
    row("lock keys per master, %d-conn run (min / max)" % big,
        *both(lambda x: spread(x["pairs"][big]["keys"])))

    def calls(x):
        d = x["pairs"][big]["calls"]
        tot = sum(d.values())
        return spread({k: round(100.0 * v / tot) for k, v in d.items()}) \
            + " %" if tot else "-"
    row("EVALSHA calls per master, %d-conn run, %% of all (min / max)" % big,
        *both(calls))
    for n in (CPU_CONNS, big):
        def batch(x, n=n):
            p = x["pairs"][n]
            return sum(p["calls"].values()) / p["reads"] if p["reads"] \
                else 0.0
        row("EVALSHA calls per socket read on a master, %d conns "
            "(pipeline batch)" % n, *both(lambda x, f=batch: "%.1f" % f(x)),
            ratio(batch))

    h = c.get(hi, {}).get("handoff2")
    if h:
        row("handoff ms p50 / p99 / max, 4+4 on two brokers, to the other "
            "broker (%d of %d)" % (h["cross_n"], h["acquisitions"]), "",
            "%s / %s / %s" % (ms(h["cross_p50_us"]), ms(h["cross_p99_us"]),
                              ms(h["cross_max_us"])))
        row("handoff ms p50 / p99 / max, 4+4 on two brokers, same broker",
            "", "%s / %s / %s" % (ms(h["same_p50_us"]),
                                  ms(h["same_p99_us"]),
                                  ms(h["same_max_us"])))
        row("hot-key acquisitions/s, 4+4 on two brokers", "", n0(h["rate"]))
        row("longest ACQUIRE->OK wait ms, 4+4 on two brokers", "",
            ms(h["max_wait_us"]))
        row("releaser re-granted at once / two holders at once", "",
            "%d / %d" % (h["self_again"], h["overlaps"]))
    row("pair errors (all runs) / broker redis_redirects", *both(
        lambda x: "%d / %d" % (sum(p.get("errors", 0)
                                   for p in x["pairs"].values()),
                               x["redirects"])))

    head = ("measurement (Redis Cluster, --redis_cluster)",
            "%d master" % lo, "%d masters" % hi,
            "%d masters / %d" % (hi, lo))
    ncpu = os.cpu_count()
    lines = [
        "Redis Cluster rows: %d master = one cluster-enabled redis-server "
        "given slots 0-16383 (CLUSTER ADDSLOTSRANGE);" % lo,
        "%d masters = topology.ClusterTopology(masters=%d, replicas=0) "
        "(redis-cli --cluster create); no replicas in either," % (hi, hi),
        "cluster-node-timeout 1000, no persistence; one cluster at a time, "
        "each with fresh brokers (seeds: its masters).",
        "The same lbbench runs as the pairs and 4+4 handoff rows above; "
        "these rows took %.0f s of the run." % r.get("cluster_s", 0),
    ]
    if r.get("cluster_error"):
        lines.append("CLUSTER ROWS INCOMPLETE: %s" % r["cluster_error"])
    if not c:
        return lines
    lines += [""] + render(head, rows)
    if h:
        lines.append("hot key of the handoff run on master %s; "
                     "the handoff rows are for %d masters only."
                     % (c[hi]["hot_master"], hi))
    lines += [""] + textwrap.wrap(
        "note: the masters, the broker and lbbench all share these %d cores "
        "(the 'cores busy' rows), so 1 vs %d masters cannot show capacity "
        "growth here: more masters add processes, not cores. Splitting the "
        "broker's pipelined script calls over %d masters also gives each "
        "master smaller batches per wake-up (the 'calls per socket read' "
        "rows), so the Redis CPU per pair summed over the masters goes up, "
        "not down: per-wake-up overhead, not script work. On real hosts, "
        "each master with its own core(s), each master does 1/%d of the "
        "script work, so the Redis side's capacity should grow about "
        "linearly with the masters until the broker's single thread (the "
        "lockbrokerd figure of the 'derived' row: pairs/s one busy broker "
        "core can drive) or the network is the limit."
        % (ncpu, hi, hi, hi), 118)
    d = derived_rates(c.get(lo))
    if d:
        lines += textwrap.wrap(
            "In this run one broker core drives %s pairs/s and one 1-master "
            "Redis core serves %s: %s" % (n0(d[0]), n0(d[1]), (
                "a single broker is the limit before Redis even with one "
                "master, so more masters raise capacity only for several "
                "brokers together (every broker spreads its keys over all "
                "masters)." if d[0] < d[1] else
                "Redis is the limit before a single broker here, so more "
                "masters help even one broker, up to its %s pairs/s."
                % n0(d[0]))), 118)
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", default="build/lockbrokerd")
    ap.add_argument("--tool", default="build/lbbench")
    ap.add_argument("--scripts", default="scripts")
    ap.add_argument("--out", default="build/bench/results.txt")
    ap.add_argument("--seconds", type=float, default=4.0,
                    help="measured seconds per point (default 4)")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--no-cluster", action="store_true",
                    help="skip the Redis Cluster rows (about 45 s)")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help="run these sections only, comma-separated, of: %s "
                    "(default: all)" % ", ".join(SECTIONS))
    args = ap.parse_args()
    args.only = args.only.split(",")
    for x in args.only:
        if x not in SECTIONS:
            ap.error("--only: no section %r (%s)" % (x, ", ".join(SECTIONS)))
    if args.no_cluster and "cluster" in args.only:
        args.only.remove("cluster")
    for path in (args.broker, args.tool):
        if not os.access(path, os.X_OK):
            sys.exit("run.py: %s is not built (make bench)" % path)
    if shutil.which("redis-server") is None:
        sys.exit("run.py: redis-server not found (make deps)")

    # SIGTERM (and SIGHUP) unwind like Ctrl-C, so the finally below stops
    # every process this run started, by pid
    def terminate(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGHUP, terminate)
    b = Bench(args)
    try:
        r = b.run()
    finally:
        b.close()
    text = table(r, args)
    sys.stdout.write(text)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print("(written to %s)" % args.out)
    if r.get("cluster_error"):
        sys.exit("run.py: the Redis Cluster rows are incomplete: %s"
                 % r["cluster_error"])


if __name__ == "__main__":
    main()
