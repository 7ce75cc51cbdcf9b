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

class SentinelProc:
    """One Sentinel (redis-server --sentinel) with its own writable conf
    file (Sentinel rewrites it); restart() reuses port and conf."""

    def __init__(self, dirpath, index, master_addr, down_after_ms,
                 failover_timeout_ms, quorum, master_name):
        self.dir = dirpath
        self.index = index
        self.conf = os.path.join(dirpath, "sentinel%d.conf" % index)
        self.logpath = os.path.join(dirpath, "sentinel%d.log" % index)
        self.proc = None
        mhost, mport = split_addr(master_addr)
        for _ in range(5):
            self.port = harness.free_port()
            with open(self.conf, "w") as f:
                f.write("port %d\n" % self.port)
                f.write("bind 127.0.0.1\n")
                f.write("daemonize no\n")
                f.write("dir %s\n" % dirpath)
                f.write("loglevel notice\n")
                f.write("sentinel monitor %s %s %d %d\n"
                        % (master_name, mhost, mport, quorum))
                f.write("sentinel down-after-milliseconds %s %d\n"
                        % (master_name, down_after_ms))
                f.write("sentinel failover-timeout %s %d\n"
                        % (master_name, failover_timeout_ms))
                f.write("sentinel parallel-syncs %s 1\n" % master_name)
            if self.start():
                return
        raise RuntimeError("sentinel %d did not start; see %s"
                           % (index, self.logpath))

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def start(self, timeout=5.0):
        log = open(self.logpath, "ab")
        self.proc = subprocess.Popen(
            [harness.REDIS_BIN, self.conf, "--sentinel"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if _quiet(cli, self.addr, "PING", timeout=0.5) == "PONG":
                return True
            time.sleep(0.01)
        _kill_wait(self.proc)
        return False

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
            for _ in range(replicas):
                self._new_node(["--replicaof", "127.0.0.1",
                                str(master.port)])
            harness.wait_until(self.replicas_linked, ready_timeout,
                               what="replicas master_link_status:up")
            for i in range(sentinels):
                self.sentinels.append(SentinelProc(
                    self.dir, i, master.addr, down_after_ms,
                    failover_timeout_ms, quorum, master_name))
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
                    i.get("master_port") != str(m.port)):
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

    def describe(self):
        lines = []
        for n in self.nodes:
            lines.append("  node %s alive=%s role=%s" %
                         (n.addr, n.alive(), role_of(n.addr, 0.3)))
        for s in self.sentinels:
            lines.append("  sentinel %s alive=%s" % (s.addr, s.alive()))
        return "\n".join(lines)

    # --------------------------------------------------------- faults --

    def kill_master(self):
        """SIGKILL the current master; returns its address."""
        m = self.master()
        self.fault_t0 = time.monotonic()
        m.stop()
        self.dead.add(m)
        return m.addr

    def wait_new_master(self, old, timeout=10.0):
        """Wait until every live Sentinel reports a master other than old
        and that node says role:master.  Returns (addr, seconds) where
        seconds count from the last kill_master()/pause()/failover()
        (else from this call)."""
        t0 = self.fault_t0 if self.fault_t0 is not None else \
            time.monotonic()
        holder = []

        def switched():
            addrs = [a for s, a in zip(self.sentinels, self.master_addrs())
                     if s.alive()]
            if not addrs or None in addrs or len(set(addrs)) != 1:
                return False
            if addrs[0] == old or role_of(addrs[0]) != "master":
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
