"""
topology.py - a real Redis Sentinel set-up for the integration tests.

  SentinelTopology  1 master + N replicas (default 2) + 3 Sentinels, each a
                    redis-server this test started on a free 127.0.0.1 port,
                    in one temp dir, stopped by pid (SIGKILL) at close().
  FreezableProxy    a loopback TCP proxy (a Python thread) that can be
                    frozen: put between a replica and its master, it makes
                    the master's writes deterministically miss the replica
                    (a frozen replica process would not do: the kernel still
                    queues the replication stream into its socket, and it
                    applies it when resumed).
  cli(addr, ...)    one Redis command on a fresh connection to "ip:port".
  ClusterTopology   (at the end) a Redis Cluster, 3 masters + 3 replicas
                    (ClusterNode each, own dir and bus port), made with
                    redis-cli --cluster create; slot map lookups, kill,
                    pause, restart, wait_failover, slot migration in steps
                    (begin_migration / migrate_keys / move_keys /
                    finish_migration); hash_slot() computes slots locally.

Typical use in a test:

    topo = SentinelTopology()            # waits until Sentinel sees it all
    self.addCleanup(topo.close)
    old = topo.kill_master()
    new, secs = topo.wait_new_master(old, timeout=10)

Nodes are harness.Redis objects (so .cli, .addr, .pid, .alive(), .log()
work); node arguments to the helpers may be a node or its "ip:port".
"""

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import harness
from harness import RedisError, _kill_wait, _resp_encode, _RespReader

MASTER_NAME = "mymaster"

NODE_ARGS = ("--save", "", "--appendonly", "no",
             "--repl-diskless-sync-delay", "0", "--loglevel", "notice")


# ------------------------------------------------------------------ cli --

def split_addr(addr):
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def cli(addr, *args, timeout=2.0):
    """Send one command to addr ("ip:port") on a fresh connection; return
    the decoded reply (RESP2: str, int, None, list).  Error replies raise
    RedisError, connection problems OSError/EOFError."""
    host, port = split_addr(addr)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(_resp_encode(args))
        r = _RespReader(s).reply()
    if isinstance(r, RedisError):
        raise r
    return r


def pairs_to_dict(flat):
    """A RESP2 field/value list (SENTINEL MASTER, ...) as a dict."""
    return dict(zip(flat[0::2], flat[1::2]))


def info(addr, section="replication", timeout=2.0):
    """INFO <section> as a dict of strings."""
    text = cli(addr, "INFO", section, timeout=timeout)
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def role_of(addr, timeout=1.0):
    """'master', 'slave', or None if it does not answer."""
    try:
        return info(addr, timeout=timeout).get("role")
    except (OSError, EOFError, RedisError):
        return None


def _quiet(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except (OSError, EOFError, RedisError):
        return None


# ---------------------------------------------------------------- proxy --

class FreezableProxy:
    """Forwards every connection made to 127.0.0.1:<port> to target.
    freeze(): from the moment it returns, no byte is forwarded either way
    (they pile up in the kernel; the peers see a silent link).  close():
    drops every connection and the listener, discarding whatever was
    queued, as if the proxy host died."""

    def __init__(self, target):
        self.target = split_addr(target)
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.peer = {}          # socket -> the socket it forwards to
        self.frozen = False
        self.closed = False
        self.forwarded = 0      # bytes, both directions
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name="proxy-%d" % self.port)
        self.thread.start()

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def _drop(self, s):
        other = self.peer.pop(s, None)
        for x in (s, other):
            if x is not None:
                self.peer.pop(x, None)
                try:
                    x.close()
                except OSError:
                    pass

    def _run(self):
        while True:
            with self.lock:
                if self.closed:
                    return
                socks = [self.lsock]
                if not self.frozen:
                    socks += list(self.peer)
            try:
                ready, _, _ = select.select(socks, [], [], 0.05)
            except (OSError, ValueError):
                continue        # a socket was closed meanwhile
            with self.lock:
                if self.closed:
                    return
                for s in ready:
                    if s is self.lsock:
                        try:
                            down, _ = self.lsock.accept()
                            up = socket.create_connection(self.target,
                                                          timeout=2.0)
                        except OSError:
                            continue
                        for x in (down, up):
                            x.settimeout(2.0)
                            x.setsockopt(socket.IPPROTO_TCP,
                                         socket.TCP_NODELAY, 1)
                        self.peer[down] = up
                        self.peer[up] = down
                    elif not self.frozen and s in self.peer:
                        try:
                            data = s.recv(65536)
                        except OSError:
                            data = b""
                        if not data:
                            self._drop(s)
                            continue
                        try:
                            self.peer[s].sendall(data)
                            self.forwarded += len(data)
                        except OSError:
                            self._drop(s)

    def freeze(self):
        with self.lock:
            self.frozen = True

    def thaw(self):
        with self.lock:
            self.frozen = False

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            for s in list(self.peer):
                self._drop(s)
            try:
                self.lsock.close()
            except OSError:
                pass
        self.thread.join(2.0)


# ------------------------------------------------------------- sentinel --

# Sentinel's own timers a topology sets at run time (SENTINEL DEBUG, Redis
# 7.0 and later; ignored where it is refused).  ask-period: how often a
# Sentinel that sees the master down asks the others (default 1000 ms).  A
# Sentinel drops another's "master is down" vote 5 ask-periods after its
# last answer, so after a failover every Sentinel lists the others with
# master_down for 5 s: SentinelTopology.wait_ready() waits for that to
# clear (a stale vote turns the next blip of the new master into an
# instant objective down: seen here at the default, a new master slow to
# answer its first pings right after the switch was failed over again at
# once, and the topology took 20+ s to settle).  At 100 ms the votes
# clear 0.5 s after the failover instead of 5 s.  Subjective down
# (down-after-milliseconds) is unchanged; objective down may come a
# little sooner (asked every 100 ms): kill -9 to agreed new master
# measured 1.7-1.8 s either way.
SENTINEL_DEBUG = (("ask-period", 100),)


class SentinelProc:
    """One Sentinel (redis-server --sentinel) with its own writable conf
    file (Sentinel rewrites it); restart() reuses port and conf and sets
    the same SENTINEL DEBUG timers again (they are not kept in the
    conf)."""

    bind = "127.0.0.1"          # netpart's sentinels bind their host's

    def __init__(self, dirpath, index, master_addr, down_after_ms,
                 failover_timeout_ms, quorum, master_name, debug=None):
        self._paths(dirpath, index, debug)
        for _ in range(5):
            self.port = harness.free_port()
            self.write_conf(master_addr, down_after_ms, failover_timeout_ms,
                            quorum, master_name)
            if self.start():
                return
        raise RuntimeError("sentinel %d did not start; see %s"
                           % (index, self.logpath))

    def _paths(self, dirpath, index, debug):
        self.debug = tuple(SENTINEL_DEBUG if debug is None else debug)
        self.dir = dirpath
        self.index = index
        self.conf = os.path.join(dirpath, "sentinel%d.conf" % index)
        self.logpath = os.path.join(dirpath, "sentinel%d.log" % index)
        self.proc = None

    def write_conf(self, master_addr, down_after_ms, failover_timeout_ms,
                   quorum, master_name):
        mhost, mport = split_addr(master_addr)
        with open(self.conf, "w") as f:
            f.write("port %d\n" % self.port)
            f.write("bind %s\n" % self.bind)
            f.write("daemonize no\n")
            f.write("dir %s\n" % self.dir)
            f.write("loglevel notice\n")
            f.write("sentinel monitor %s %s %d %d\n"
                    % (master_name, mhost, mport, quorum))
            f.write("sentinel down-after-milliseconds %s %d\n"
                    % (master_name, down_after_ms))
            f.write("sentinel failover-timeout %s %d\n"
                    % (master_name, failover_timeout_ms))
            f.write("sentinel parallel-syncs %s 1\n" % master_name)

    @property
    def addr(self):
        return "%s:%d" % (self.bind, self.port)

    def argv(self):
        return [harness.REDIS_BIN, self.conf, "--sentinel"]

    def start(self, timeout=5.0):
        log = open(self.logpath, "ab")
        self.proc = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if _quiet(cli, self.addr, "PING", timeout=0.5) == "PONG":
                self.set_debug()
                return True
            time.sleep(0.01)
        _kill_wait(self.proc)
        return False

    def set_debug(self):
        for name, value in self.debug:
            try:
                cli(self.addr, "SENTINEL", "DEBUG", name, value)
            except RedisError:
                pass            # before Redis 7.0: Sentinel's defaults

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is not None:
            self.resume()
            _kill_wait(self.proc, signal.SIGKILL)

    def restart(self):
        self.stop()
        for _ in range(20):
            if self.start():
                return
            time.sleep(0.1)
        raise RuntimeError("sentinel %d did not restart on port %d"
                           % (self.index, self.port))

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGCONT)

    def log(self):
        try:
            with open(self.logpath, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


# ------------------------------------------------------------- topology --

class FailoverNudge:
    """SENTINEL FAILOVER asked for once, at the first poll() past at
    (time.monotonic()), by a caller that still sees no new master:
    Sentinel's own election can fail and is tried again only after twice
    the failover-timeout (SentinelTopology.wait_new_master says more)."""

    def __init__(self, topo, old, at):
        self.topo = topo
        self.old = old
        self.at = at

    def poll(self):
        """True the one time the failover is asked for."""
        if self.at is None or time.monotonic() <= self.at:
            return False
        self.at = None
        self.topo.nudge_failover(self.old)
        return True


class SentinelTopology:
    """1 master + `replicas` replicas + `sentinels` Sentinels on loopback.
    The constructor returns once every replica has master_link_status:up
    and every Sentinel sees the master, all replicas and the other
    Sentinels.  close() is idempotent; register it with addCleanup."""

    def __init__(self, replicas=2, sentinels=3, quorum=2,
                 down_after_ms=500, failover_timeout_ms=10000,
                 master_name=MASTER_NAME, redis_args=(), ready_timeout=20.0):
        self.master_name = master_name
        self.redis_args = [str(a) for a in redis_args]
        self.dir = tempfile.mkdtemp(prefix="lbt-sentinel-")
        self.nodes = []
        self.sentinels = []
        self.proxies = []
        self.closed = False
        self.fault_t0 = None
        self.dead = set()       # nodes the test killed and did not restart
        try:
            master = self._new_node([])
            mhost, mport = split_addr(master.addr)
            for _ in range(replicas):
                self._new_node(["--replicaof", mhost, str(mport)])
            harness.wait_until(self.replicas_linked, ready_timeout,
                               what="replicas master_link_status:up")
            for i in range(sentinels):
                self.sentinels.append(self._new_sentinel(
                    i, master.addr, down_after_ms, failover_timeout_ms,
                    quorum, master_name))
            self.wait_ready(ready_timeout)
        except BaseException:
            self.close()
            raise

    def _new_node(self, replicaof):
        node = harness.Redis(*(list(NODE_ARGS) + self.redis_args +
                               replicaof))
        node.base_extra = list(NODE_ARGS) + self.redis_args
        self.nodes.append(node)
        return node

    def _new_sentinel(self, i, master_addr, down_after_ms,
                      failover_timeout_ms, quorum, master_name):
        return SentinelProc(self.dir, i, master_addr, down_after_ms,
                            failover_timeout_ms, quorum, master_name)

    # -------------------------------------------------------- lookup --

    def node(self, which):
        """A node from a node, its "ip:port", or its index."""
        if isinstance(which, harness.Redis):
            return which
        if isinstance(which, int):
            return self.nodes[which]
        for n in self.nodes:
            if n.addr == which:
                return n
        raise KeyError("no node %r in this topology" % (which,))

    def sentinel_addrs(self):
        """"ip:port,ip:port,ip:port" for --redis_sentinels."""
        return ",".join(s.addr for s in self.sentinels)

    def master_addrs(self):
        """What each Sentinel reports as the master now (None for a
        Sentinel that does not answer)."""
        out = []
        for s in self.sentinels:
            r = None
            if s.alive():
                r = _quiet(cli, s.addr, "SENTINEL",
                           "GET-MASTER-ADDR-BY-NAME", self.master_name,
                           timeout=1.0)
            out.append("%s:%s" % tuple(r) if r else None)
        return out

    def master_addr(self):
        """The master as the Sentinels report it (the first one that
        answers)."""
        for a in self.master_addrs():
            if a:
                return a
        raise AssertionError("no Sentinel reports a master")

    def master(self):
        return self.node(self.master_addr())

    def replicas(self):
        """Live nodes other than the reported master."""
        m = self.master_addr()
        return [n for n in self.nodes if n.addr != m and n.alive()]

    # ------------------------------------------------------ readiness --

    def replicas_linked(self):
        """True if every live replica reports master_link_status:up to the
        current master (not through a proxy)."""
        m = self.nodes[0] if not self.sentinels else self.master()
        for n in self.nodes:
            if n is m or not n.alive() or n in self.dead:
                continue
            i = info(n.addr, timeout=1.0)
            if (i.get("role") != "slave" or
                    i.get("master_link_status") != "up" or
                    "%s:%s" % (i.get("master_host"), i.get("master_port"))
                    != m.addr):
                return False
        return True

    def _sentinels_agree(self):
        m = self.master_addr()
        if role_of(m) != "master":
            return False
        want = sorted(n.addr for n in self.nodes
                      if n.addr != m and n.alive() and n not in self.dead)
        live = [s for s in self.sentinels if s.alive()]
        for s in live:
            r = cli(s.addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                    self.master_name, timeout=1.0)
            if not r or "%s:%s" % tuple(r) != m:
                return False
            mi = pairs_to_dict(cli(s.addr, "SENTINEL", "MASTER",
                                   self.master_name, timeout=1.0))
            if mi.get("flags") != "master":
                return False
            seen = sorted("%s:%s" % (d["ip"], d["port"]) for d in
                          map(pairs_to_dict,
                              cli(s.addr, "SENTINEL", "REPLICAS",
                                  self.master_name, timeout=1.0))
                          if d.get("flags") == "slave" and
                          d.get("master-link-status") == "ok")
            if [a for a in want if a not in seen]:
                return False
            others = [pairs_to_dict(d) for d in
                      cli(s.addr, "SENTINEL", "SENTINELS",
                          self.master_name, timeout=1.0)]
            ok = [d for d in others if d.get("flags") == "sentinel"]
            if len(ok) < len(live) - 1:
                return False
        return True

    def wait_ready(self, timeout=20.0):
        """Every live replica linked to the master, every live Sentinel
        agreeing on it and seeing every live replica and the other live
        Sentinels (no s_down flags)."""
        try:
            harness.wait_until(lambda: self.replicas_linked() and
                               self._sentinels_agree(), timeout,
                               interval=0.05, what="Sentinel topology ready")
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.describe())) from None

    def describe(self, tail=25):
        """One line per node and Sentinel, then each Sentinel's last log
        lines (its view of the failover: +odown, votes, +elected-leader,
        -failover-abort-*): for failure messages."""
        lines = []
        for n in self.nodes:
            lines.append("  node %s alive=%s role=%s" %
                         (n.addr, n.alive(), role_of(n.addr, 0.3)))
        for s in self.sentinels:
            lines.append("  sentinel %s alive=%s" % (s.addr, s.alive()))
        for s in self.sentinels if tail else ():
            lines.append("  --- log of sentinel %s (last %d lines)"
                         % (s.addr, tail))
            lines += ["    " + ln for ln in s.log().splitlines()[-tail:]]
        return "\n".join(lines)

    # --------------------------------------------------------- faults --

    def kill_master(self):
        """SIGKILL the current master; returns its address."""
        m = self.master()
        self.fault_t0 = time.monotonic()
        m.stop()
        self.dead.add(m)
        return m.addr

    def wait_new_master(self, old, timeout=10.0, nudge_after=6.0):
        """Wait until every live Sentinel reports a master other than old
        and that node says role:master.  Returns (addr, seconds) where
        seconds count from the last kill_master()/pause()/failover()
        (else from this call).

        Sentinel's own election can fail (three Sentinels that see the
        master down in the same instant each vote for themselves, or the
        leader aborts): it tries again only after twice the
        failover-timeout (20 s here), longer than a test waits.  Measured
        here, kill -9 to new master takes 1.7-1.8 s (60 of 60 runs on a
        loaded machine); so after nudge_after s without a new master the
        failover is asked for (SENTINEL FAILOVER, as an operator would)
        and said so on stderr with the Sentinels' logs: what is tested is
        the brokers following the new master, not Sentinel's vote."""
        t0 = self.fault_t0 if self.fault_t0 is not None else \
            time.monotonic()
        holder = []
        nudge = FailoverNudge(self, old, t0 + min(nudge_after, timeout * 0.6)
                              if nudge_after else None)

        def switched():
            addrs = [a for s, a in zip(self.sentinels, self.master_addrs())
                     if s.alive()]
            if not addrs or None in addrs or len(set(addrs)) != 1:
                return False
            if addrs[0] == old or role_of(addrs[0]) != "master":
                nudge.poll()
                return False
            holder.append(addrs[0])
            return True
        try:
            harness.wait_until(switched, timeout, interval=0.02,
                               what="Sentinels to report a new master "
                               "(was %s)" % old)
        except AssertionError as e:
            raise AssertionError("%s\n%s\n  Sentinels say %s" % (
                e, self.describe(), self.master_addrs())) from None
        return holder[-1], time.monotonic() - t0

    def nudge_failover(self, old):
        """SENTINEL FAILOVER on the first live Sentinel that takes it (one
        in a failover already answers INPROG: that one goes on)."""
        said = []
        for s in self.sentinels:
            if not s.alive():
                continue
            try:
                said.append("%s: %s" % (s.addr, cli(
                    s.addr, "SENTINEL", "FAILOVER", self.master_name)))
                break
            except RedisError as e:
                said.append("%s: %s" % (s.addr, e))
        sys.stderr.write("\nSentinels had not replaced master %s: asked "
                         "for a failover (%s)\n%s\n" % (
                             old, "; ".join(said), self.describe()))
        sys.stderr.flush()

    def wait_failover_done(self, timeout=10.0):
        """Wait until no live Sentinel flags the master
        failover_in_progress: the failover's leader raises the epoch at
        the promotion but moves its own view (and resets its links) only
        once it has moved the replicas."""
        def done():
            for s in self.sentinels:
                if not s.alive():
                    continue
                r = _quiet(cli, s.addr, "SENTINEL", "MASTER",
                           self.master_name, timeout=1.0)
                if not r:
                    return False
                f = dict(zip(r[0::2], r[1::2])).get("flags", "")
                if "failover_in_progress" in f.split(","):
                    return False
            return True
        harness.wait_until(done, timeout, interval=0.05,
                           what="the Sentinels' failover to end")

    def pause(self, node):
        n = self.node(node)
        self.fault_t0 = time.monotonic()
        n.pause()

    def resume(self, node):
        self.node(node).resume()

    def failover(self):
        """SENTINEL FAILOVER on the first live Sentinel; returns the old
        master's address (use wait_new_master)."""
        old = self.master_addr()
        s = [s for s in self.sentinels if s.alive()][0]
        self.fault_t0 = time.monotonic()
        cli(s.addr, "SENTINEL", "FAILOVER", self.master_name)
        return old

    def restart(self, node, replicaof=None):
        """Start a node again on its port with an empty data set: as a
        master (as after a crash; Sentinel turns a stale master into a
        replica), or as a replica of replicaof ("ip:port")."""
        n = self.node(node)
        n.extra = list(n.base_extra)
        if replicaof:
            n.extra += ["--replicaof"] + list(map(str, split_addr(replicaof)))
        n.restart()
        self.dead.discard(n)
        return n

    def wait_role(self, node, role, master=None, timeout=20.0):
        """Wait until node reports role ('master'/'slave'); for a replica
        also linked (master_link_status:up) to master if given."""
        n = self.node(node)

        def ok():
            i = info(n.addr, timeout=1.0)
            if i.get("role") != role:
                return False
            if role == "slave":
                if i.get("master_link_status") != "up":
                    return False
                if master and "%s:%s" % (i.get("master_host"),
                                         i.get("master_port")) != master:
                    return False
            return True
        harness.wait_until(ok, timeout, interval=0.05,
                           what="%s to be %s%s" % (
                               n.addr, role,
                               " of " + master if master else ""))

    def stop_sentinel(self, i):
        self.sentinels[i].stop()

    def start_sentinel(self, i):
        """Start a stopped Sentinel again (same port, its rewritten conf)."""
        self.sentinels[i].restart()

    def pause_sentinel(self, i):
        self.sentinels[i].pause()

    def resume_sentinel(self, i):
        self.sentinels[i].resume()

    def proxy_replicas(self, timeout=10.0):
        """Re-point every live replica at the master through its own
        FreezableProxy and wait until each is linked through it.  Returns
        the proxies (closed by close()).  Sentinel would re-point such a
        replica itself, but only after seeing it in two INFO rounds
        (10 s apart) with a healthy master: use them at once."""
        m = self.master()
        out = []
        for n in self.replicas():
            p = FreezableProxy(m.addr)
            self.proxies.append(p)
            out.append((n, p))
            n.cli("REPLICAOF", "127.0.0.1", p.port)

        def linked():
            for n, p in out:
                i = info(n.addr, timeout=1.0)
                if (i.get("master_port") != str(p.port) or
                        i.get("master_link_status") != "up"):
                    return False
            return True
        harness.wait_until(linked, timeout, interval=0.02,
                           what="replicas linked through proxies")
        return [p for _, p in out]

    def logs(self):
        """Every node's and Sentinel's log, for failure messages."""
        parts = []
        for n in self.nodes:
            parts.append("=== redis %s\n%s" % (n.addr, n.log()))
        for s in self.sentinels:
            parts.append("=== sentinel %s\n%s" % (s.addr, s.log()))
        return "\n".join(parts)

    # ---------------------------------------------------------- close --

    def close(self):
        """SIGKILL everything this topology started (resuming stopped
        processes first) and remove the temp dir.  Idempotent."""
        if self.closed:
            return
        self.closed = True
        for p in self.proxies:
            try:
                p.close()
            except Exception:
                pass
        for s in self.sentinels:
            try:
                s.stop()
            except Exception:
                pass
        for n in self.nodes:
            try:
                n.close()
            except Exception:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


# -------------------------------------------------------------- cluster --
#
# Redis Cluster: 3 masters + 3 replicas on loopback (notes, sections 3 and
# 7.2).  Helpers first, shared by ClusterTopology and the tests.

CLUSTER_NODE_ARGS = ("--cluster-enabled", "yes",
                     "--cluster-node-timeout", "1000",
                     "--cluster-require-full-coverage", "no",
                     "--save", "", "--appendonly", "no",
                     "--repl-diskless-sync-delay", "0",
                     "--loglevel", "notice")
SLOT_COUNT = 16384


def _crc16_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xffff)
    return table


_CRC16 = _crc16_table()


def crc16(data):
    """CRC16-CCITT (XMODEM), as Redis Cluster hashes keys."""
    if isinstance(data, str):
        data = data.encode("latin-1")
    crc = 0
    t = _CRC16
    for b in data:
        crc = ((crc << 8) & 0xffff) ^ t[((crc >> 8) ^ b) & 0xff]
    return crc


def hash_slot(key):
    """The cluster slot of key, hash tags included (cluster-spec.md).  The
    tests check it against CLUSTER KEYSLOT; use it to search many names,
    CLUSTER KEYSLOT (ClusterTopology.keyslot) to ask about a few."""
    if isinstance(key, str):
        key = key.encode("latin-1")
    s = key.find(b"{")
    if s >= 0:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc16(key) % SLOT_COUNT


def cli_readonly(addr, *args, timeout=2.0):
    """One command after READONLY on the same fresh connection: a cluster
    replica answers reads of its master's keys instead of -MOVED."""
    host, port = split_addr(addr)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(_resp_encode(["READONLY"]) + _resp_encode(args))
        reader = _RespReader(s)
        r = reader.reply()
        if isinstance(r, RedisError):
            raise r
        r = reader.reply()
    if isinstance(r, RedisError):
        raise r
    return r


def cluster_info(addr, timeout=2.0):
    """CLUSTER INFO as a dict of strings."""
    out = {}
    for line in cli(addr, "CLUSTER", "INFO", timeout=timeout).splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def cluster_nodes(addr, timeout=2.0):
    """CLUSTER NODES as a list of dicts: id, addr ("ip:port"), flags (a
    set), master (id or "-"), slots (list of (start, end); importing and
    migrating markers dropped), link."""
    out = []
    for line in cli(addr, "CLUSTER", "NODES", timeout=timeout).splitlines():
        f = line.split()
        if len(f) < 8:
            continue
        slots = []
        for s in f[8:]:
            if s.startswith("["):
                continue
            a, _, b = s.partition("-")
            slots.append((int(a), int(b or a)))
        out.append({"id": f[0], "addr": f[1].split("@")[0],
                    "flags": set(f[2].split(",")), "master": f[3],
                    "link": f[7], "slots": slots})
    return out


def cluster_slots(addr, timeout=2.0):
    """CLUSTER SLOTS as a sorted list of (start, end, master "ip:port",
    tuple of replica "ip:port" sorted)."""
    out = []
    for r in cli(addr, "CLUSTER", "SLOTS", timeout=timeout):
        start, end, master = int(r[0]), int(r[1]), r[2]
        reps = tuple(sorted("%s:%s" % (n[0], n[1]) for n in r[3:]))
        out.append((start, end, "%s:%s" % (master[0], master[1]), reps))
    return sorted(out)


def slot_owners(slots_reply):
    """From cluster_slots(): a list of (start, end, master) ranges, the
    slot -> master map without replicas (replica lists legitimately differ
    between nodes for a moment after a failure)."""
    return [(a, b, m) for a, b, m, _ in slots_reply]


def owner_in(ranges, slot):
    for a, b, m in ranges:
        if a <= slot <= b:
            return m
    return None


class ClusterNode:
    """One cluster-enabled redis-server in its own directory
    <topdir>/<port> (nodes.conf, redis.log), client port and cluster bus
    port both free ports of 127.0.0.1 (the bus port is given with
    --cluster-port: port + 10000 may not exist).  stop()/restart() by pid;
    restart() reuses port, bus port and nodes.conf, so the node comes back
    with its node id and epochs but no data.  Same interface as
    harness.Redis where it matters (.addr, .port, .pid, .cli, .alive(),
    .log())."""

    def __init__(self, topdir, extra=()):
        self.topdir = topdir
        self.extra = [str(a) for a in extra]
        self.proc = None
        self.paused = False
        for _ in range(5):
            self.port = harness.free_port()
            self.bus_port = harness.free_port()
            if self.bus_port == self.port:
                continue
            self.dir = os.path.join(topdir, str(self.port))
            os.makedirs(self.dir, exist_ok=True)
            if self.start():
                self.id = self.cli("CLUSTER", "MYID")
                return
            shutil.rmtree(self.dir, ignore_errors=True)
        raise RuntimeError("cluster node did not start (last dir %s)"
                           % self.dir)

    bind = "127.0.0.1"          # netpart's nodes bind their host's

    @property
    def addr(self):
        return "%s:%d" % (self.bind, self.port)

    @property
    def pid(self):
        return self.proc.pid

    @property
    def logpath(self):
        return os.path.join(self.dir, "redis.log")

    def argv(self):
        return [harness.REDIS_BIN, "--port", str(self.port),
                "--bind", self.bind, "--cluster-port", str(self.bus_port),
                "--cluster-config-file",
                os.path.join(self.dir, "nodes.conf"),
                "--dir", self.dir, "--daemonize", "no"] + \
            list(CLUSTER_NODE_ARGS) + self.extra

    def start(self, timeout=5.0):
        log = open(self.logpath, "ab")
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.paused = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if _quiet(cli, self.addr, "PING", timeout=0.5) == "PONG":
                return True
            time.sleep(0.01)
        _kill_wait(self.proc)
        return False

    def cli(self, *args, timeout=2.0):
        return cli(self.addr, *args, timeout=timeout)

    def cli_ro(self, *args, timeout=2.0):
        """cli() after READONLY: reads on a replica."""
        return cli_readonly(self.addr, *args, timeout=timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def up(self):
        """Running and not SIGSTOPped: worth asking."""
        return self.alive() and not self.paused

    def stop(self):
        """SIGKILL and reap (a stopped process dies of SIGKILL too)."""
        if self.proc is not None:
            _kill_wait(self.proc, signal.SIGKILL)
        self.paused = False

    def restart(self, timeout=5.0):
        self.stop()
        deadline = time.monotonic() + timeout
        while True:
            if self.start(timeout=max(0.5, deadline - time.monotonic())):
                return
            if time.monotonic() >= deadline:
                raise RuntimeError("cluster node did not restart on port %d"
                                   % self.port)
            time.sleep(0.1)

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def log(self, tail=None):
        try:
            with open(self.logpath, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        if tail:
            text = "\n".join(text.splitlines()[-tail:])
        return text


class ClusterTopology:
    """A Redis Cluster of `masters` masters with `replicas` replicas each
    (default 3 + 3), every node a ClusterNode this test started, in one
    temp dir, made with `redis-cli --cluster create`.  The constructor
    returns once the cluster is ready (wait_ready).  Nodes are stopped by
    pid; close() is idempotent: register it with addCleanup.

    Node arguments to the helpers may be a ClusterNode, its "ip:port" or
    its index in .nodes.  Addresses returned are "ip:port" strings as
    CLUSTER SLOTS gives them (127.0.0.1:<port>)."""

    def __init__(self, masters=3, replicas=1, redis_args=(),
                 ready_timeout=30.0):
        self.dir = tempfile.mkdtemp(prefix="lbt-cluster-")
        self.nodes = []
        self.closed = False
        self.dead = set()       # killed and not restarted
        self.owned = {}         # addr -> slot ranges when last faulted
        self.fault_t0 = None
        self.create_output = ""
        try:
            for i in range(masters * (1 + replicas)):
                self.nodes.append(self._new_node(i, redis_args))
            argv = ["redis-cli", "--cluster", "create"] + \
                [n.addr for n in self.nodes] + \
                ["--cluster-replicas", str(replicas), "--cluster-yes"]
            r = subprocess.run(argv, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT,
                               universal_newlines=True, timeout=60)
            self.create_output = r.stdout
            if r.returncode != 0:
                raise RuntimeError("redis-cli --cluster create exited %d:\n%s"
                                   % (r.returncode, r.stdout))
            self.wait_ready(ready_timeout)
        except BaseException:
            self.close()
            raise

    def _new_node(self, i, redis_args):
        return ClusterNode(self.dir, redis_args)

    # -------------------------------------------------------- lookup --

    def node(self, which):
        """A node from a ClusterNode, its "ip:port", its port or index."""
        if isinstance(which, ClusterNode):
            return which
        if isinstance(which, int):
            if 0 <= which < len(self.nodes):
                return self.nodes[which]
            for n in self.nodes:
                if n.port == which:
                    return n
        for n in self.nodes:
            if n.addr == which:
                return n
        raise KeyError("no node %r in this cluster" % (which,))

    def live(self):
        """Nodes running and not paused."""
        return [n for n in self.nodes if n.up()]

    def any_live(self):
        """An address that answers CLUSTER commands now."""
        for n in self.live():
            if _quiet(cli, n.addr, "PING", timeout=0.5) == "PONG":
                return n.addr
        raise AssertionError("no cluster node answers\n" + self.describe())

    def seeds(self, masters_only=False):
        """"ip:port,ip:port,..." for --redis_cluster: every node, or only
        the nodes serving slots now."""
        addrs = self.masters() if masters_only else \
            [n.addr for n in self.nodes]
        return ",".join(addrs)

    def slot_map(self, addr=None):
        """(start, end, master) ranges from CLUSTER SLOTS on addr (default:
        a live node)."""
        return slot_owners(cluster_slots(addr or self.any_live()))

    def masters(self, addr=None):
        """Sorted addresses serving slots, per CLUSTER SLOTS of a live
        node."""
        return sorted(set(m for _, _, m in self.slot_map(addr)))

    def slots_of(self, master, addr=None):
        """The (start, end) ranges master serves, per a live node."""
        m = self.node(master).addr
        return [(a, b) for a, b, o in self.slot_map(addr) if o == m]

    def keyslot(self, key):
        """CLUSTER KEYSLOT key, asked of a live node."""
        return int(cli(self.any_live(), "CLUSTER", "KEYSLOT", key))

    def master_of_slot(self, slot, addr=None):
        """The address serving slot, per CLUSTER SLOTS of a live node (None
        if no node serves it)."""
        return owner_in(self.slot_map(addr), slot)

    def master_of_key(self, key):
        return self.master_of_slot(self.keyslot(key))

    def get(self, key, timeout=2.0):
        """GET key on the master that serves its slot now (no redirect
        following: the map is read first)."""
        return cli(self.master_of_key(key), "GET", key, timeout=timeout)

    def keys_in_slot(self, slot):
        """{master: CLUSTER COUNTKEYSINSLOT slot} over the nodes serving
        slots: a node counts its own keys whoever owns the slot, so a slot
        migrated away must count 0 on its old master."""
        return {m: int(cli(m, "CLUSTER", "COUNTKEYSINSLOT", slot))
                for m in self.masters()}

    def replicas_of(self, master):
        """Live nodes that CLUSTER NODES (of a live node) lists as replicas
        of master."""
        mid = self.node(master).id
        addrs = [d["addr"] for d in cluster_nodes(self.any_live())
                 if "slave" in d["flags"] and d["master"] == mid]
        return [n for n in self.nodes if n.addr in addrs and n.alive()]

    def role(self, node):
        return role_of(self.node(node).addr)

    # ------------------------------------------------------ readiness --

    def maps(self):
        """{addr: slot ranges} of every live node (None where a node does
        not answer)."""
        return {n.addr: _quiet(lambda a: slot_owners(cluster_slots(
            a, timeout=1.0)), n.addr) for n in self.live()}

    def map_agreed(self):
        """The agreed (start, end, master) ranges if every live node
        answers CLUSTER SLOTS with the same slot -> master map, else
        None."""
        maps = list(self.maps().values())
        if not maps or None in maps:
            return None
        if any(m != maps[0] for m in maps[1:]):
            return None
        return maps[0]

    def wait_map_agreed(self, timeout=10.0):
        """Wait until every live node reports the same slot map; return
        it."""
        try:
            return harness.wait_until(self.map_agreed, timeout,
                                      interval=0.05,
                                      what="cluster nodes to agree on the "
                                      "slot map")
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.describe())) from None

    def _ready(self, full_coverage):
        agreed = self.map_agreed()
        if not agreed:
            return False
        live = self.live()
        live_addrs = set(n.addr for n in live)
        for a, b, m in agreed:
            if m not in live_addrs:
                return False
        if full_coverage and \
                sum(b - a + 1 for a, b, _ in agreed) != SLOT_COUNT:
            return False
        for n in live:
            if cluster_info(n.addr, timeout=1.0).get("cluster_state") != "ok":
                return False
            i = info(n.addr, timeout=1.0)
            if i.get("role") == "slave" and \
                    i.get("master_link_status") != "up":
                return False
            # Nobody sees a live node as failing (gossip settled).
            for d in cluster_nodes(n.addr, timeout=1.0):
                if d["addr"] in live_addrs and \
                        d["flags"] & {"fail", "fail?", "handshake",
                                      "noaddr"}:
                    return False
        return True

    def wait_ready(self, timeout=30.0, full_coverage=True):
        """Every live node says cluster_state:ok, reports the same slot
        map, and sees no live node as failing; every live replica has
        master_link_status:up; every slot is served by a live master
        (full_coverage) or at least every served slot is."""
        try:
            harness.wait_until(lambda: self._ready(full_coverage), timeout,
                               interval=0.05, what="Redis Cluster ready")
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.describe())) from None

    def wait_state(self, state, nodes=None, timeout=10.0):
        """Wait until every given (default: every live) node reports
        cluster_state:<state> ('ok' or 'fail')."""
        ns = [self.node(n) for n in nodes] if nodes else self.live()

        def ok():
            return all(cluster_info(n.addr, timeout=1.0)
                       .get("cluster_state") == state for n in ns)
        try:
            harness.wait_until(ok, timeout, interval=0.05,
                               what="cluster_state:%s on %s" % (
                                   state, [n.addr for n in ns]))
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.describe())) from None

    # --------------------------------------------------------- faults --

    def _remember_slots(self, n):
        try:
            self.owned[n.addr] = [(a, b) for a, b, m in self.slot_map()
                                  if m == n.addr]
        except AssertionError:
            pass

    def kill(self, node):
        """SIGKILL node (a crash); returns its address.  Its slots are
        remembered for wait_failover()."""
        n = self.node(node)
        self._remember_slots(n)
        self.fault_t0 = time.monotonic()
        n.stop()
        self.dead.add(n)
        return n.addr

    def pause(self, node):
        """SIGSTOP node (a hung process: connections stay open, silent)."""
        n = self.node(node)
        self._remember_slots(n)
        self.fault_t0 = time.monotonic()
        n.pause()
        return n.addr

    def resume(self, node):
        self.node(node).resume()

    def restart(self, node):
        """Start a killed node again on its port with its nodes.conf (same
        node id, no data)."""
        n = self.node(node)
        n.restart()
        self.dead.discard(n)
        return n

    def wait_failover(self, old, timeout=10.0):
        """Wait until every live node agrees that a live node other than
        old serves old's slots (as they were at kill()/pause(), else now),
        and that node says role:master and cluster_state:ok.  Returns its
        address; self.last_failover_s is the time from the fault (or from
        this call)."""
        old = self.node(old).addr
        t0 = self.fault_t0 if self.fault_t0 is not None else \
            time.monotonic()
        ranges = self.owned.get(old) or self.slots_of(old)
        if not ranges:
            raise AssertionError("%s served no slots" % old)
        slot = ranges[0][0]
        found = []

        def switched():
            agreed = self.map_agreed()
            if not agreed:
                return False
            new = owner_in(agreed, slot)
            if new is None or new == old or not self.node(new).up():
                return False
            if any(owner_in(agreed, a) != new for a, _ in ranges):
                return False
            if role_of(new) != "master" or \
                    cluster_info(new, timeout=1.0).get("cluster_state") \
                    != "ok":
                return False
            found.append(new)
            return True
        try:
            harness.wait_until(switched, timeout, interval=0.02,
                               what="a replica of %s to take its slots"
                               % old)
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.describe())) from None
        self.last_failover_s = time.monotonic() - t0
        return found[-1]

    # ----------------------------------------------------- resharding --

    def begin_migration(self, slot, src, dst):
        """CLUSTER SETSLOT slot IMPORTING on dst, then MIGRATING on src.
        From here until finish_migration() the slot is split: keys still
        on src are served there, others get -ASK to dst (and multi-key
        commands over a split set get -TRYAGAIN)."""
        s, d = self.node(src), self.node(dst)
        d.cli("CLUSTER", "SETSLOT", slot, "IMPORTING", s.id)
        s.cli("CLUSTER", "SETSLOT", slot, "MIGRATING", d.id)

    def move_keys(self, slot, src, dst, batch=100, limit=None,
                  timeout=30.0):
        """MIGRATE the keys of slot from src to dst, `batch` at a time
        (CLUSTER GETKEYSINSLOT, then MIGRATE ... KEYS, timeout 5000), until
        src has none (or `limit` keys moved).  Returns how many keys were
        moved."""
        s, d = self.node(src), self.node(dst)
        moved = 0
        deadline = time.monotonic() + timeout
        while limit is None or moved < limit:
            n = batch if limit is None else min(batch, limit - moved)
            keys = s.cli("CLUSTER", "GETKEYSINSLOT", slot, n)
            if not keys:
                break
            self.migrate_keys(s, d, keys)
            moved += len(keys)
            if time.monotonic() > deadline:
                raise AssertionError("slot %d: keys still on %s after %.0f s"
                                     % (slot, s.addr, timeout))
        return moved

    def migrate_keys(self, src, dst, keys):
        """MIGRATE these keys (of a slot being migrated) from src to dst,
        timeout 5000; a key already gone is no error."""
        s, d = self.node(src), self.node(dst)
        r = s.cli("MIGRATE", "127.0.0.1", d.port, "", 0, 5000,
                  "KEYS", *keys, timeout=10.0)
        if r not in ("OK", "NOKEY"):
            raise AssertionError("MIGRATE %s: %r" % (keys, r))

    def finish_migration(self, slot, src, dst, timeout=10.0):
        """Move what is left, then CLUSTER SETSLOT slot NODE dst on dst,
        on src and on every other live master; wait until every live node
        agrees on the map."""
        s, d = self.node(src), self.node(dst)
        self.move_keys(slot, s, d)
        d.cli("CLUSTER", "SETSLOT", slot, "NODE", d.id)
        for _ in range(20):
            try:
                s.cli("CLUSTER", "SETSLOT", slot, "NODE", d.id)
                break
            except RedisError as e:
                # A key arrived on src after the last GETKEYSINSLOT.
                if "hold keys" not in str(e):
                    raise
                self.move_keys(slot, s, d)
        else:
            raise AssertionError("slot %d: %s keeps holding keys" %
                                 (slot, s.addr))
        for m in self.masters(d.addr):
            n = self.node(m)
            if n not in (s, d) and n.up():
                _quiet(n.cli, "CLUSTER", "SETSLOT", slot, "NODE", d.id)
        agreed = self.wait_map_agreed(timeout)
        if owner_in(agreed, slot) != d.addr:
            raise AssertionError("slot %d ended on %s, not %s"
                                 % (slot, owner_in(agreed, slot), d.addr))

    def migrate_slot(self, slot, src, dst, timeout=10.0):
        """The whole manual reshard of one slot, src to dst."""
        self.begin_migration(slot, src, dst)
        self.finish_migration(slot, src, dst, timeout)

    # ------------------------------------------------------ reporting --

    def describe(self, tail=15):
        """One line per node (address, id, process state, role,
        cluster_state), one node's CLUSTER NODES, and each node's last log
        lines: for failure messages."""
        lines = []
        for n in self.nodes:
            state = "paused" if n.paused else \
                ("alive" if n.alive() else "dead")
            ci = _quiet(cluster_info, n.addr, timeout=0.3) if n.up() else None
            lines.append("  node %s id=%s %s role=%s cluster_state=%s" % (
                n.addr, n.id[:8], state,
                role_of(n.addr, 0.3) if n.up() else "-",
                ci.get("cluster_state") if ci else "-"))
        for n in self.live():
            text = _quiet(cli, n.addr, "CLUSTER", "NODES", timeout=0.5)
            if text:
                lines.append("  CLUSTER NODES of %s:" % n.addr)
                lines += ["    " + ln for ln in text.splitlines()]
                break
        if tail:
            for n in self.nodes:
                lines.append("  --- log %s (last %d lines)" % (n.addr, tail))
                lines += ["    " + ln for ln in n.log(tail).splitlines()]
        return "\n".join(lines)

    def logs(self):
        return "\n".join("=== redis %s\n%s" % (n.addr, n.log())
                         for n in self.nodes)

    # ---------------------------------------------------------- close --

    def close(self):
        """SIGKILL every node (stopped ones too) by pid and remove the temp
        dir.  Idempotent."""
        if self.closed:
            return
        self.closed = True
        for n in self.nodes:
            try:
                n.stop()
            except Exception:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
