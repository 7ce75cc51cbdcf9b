"""
netpart.py - hosts on a private network of network namespaces, and
partitions between them, for tests that cut the network under the broker.

  Net        a set of named "hosts", one network namespace each, joined by
             veth pairs to a bridge that lives in a namespace of its own
             (the hub), on a private /24 that exists only inside these
             namespaces.  The hub has an address on the bridge too: it is
             the test's control host, never cut, from which the test sets
             up and watches the servers (Net.run).  Built with `ip -batch`
             (a dozen hosts in a fraction of a second).
  cuts       Net.cut(src, dst) drops every packet from the src hosts at
             the dst hosts (both=True: and back): iptables DROP rules in a
             chain of our own (LBPCUT) hooked into each receiving host's
             INPUT.  Packets are lost on the way, as on a real network: the
             sender's stack sees nothing (REJECT or a link down would give
             it errors at once, which real partitions don't).  heal()
             flushes the chains.
  servers    NsRedis, NsSentinel, NsClusterNode, NsBroker: harness /
             topology classes started inside a host with `ip netns exec`
             (which execs: the pid is the program's, and it is stopped by
             pid).  NsSentinelTopology and NsClusterTopology put a Sentinel
             set-up or a Redis Cluster on hosts, one process per host, every
             process on its host's address and the standard port.

Names are unique per run (lbp<pid>x<random>-<host>), every namespace of a
Net is deleted by close() (register it with addCleanup: it runs when a
test fails too), and Net() first deletes namespaces of this prefix left by
a run whose process is gone (a run killed halfway cannot clean up).

Threads: a socket belongs to the namespace of the thread that made it, and
setns(2) moves only the calling thread.  Netns.call(fn) runs fn in a short
thread inside the namespace; Netns.enter() moves the calling thread for
good (client threads do that first thing).  The topology helpers of
topology.py talk to "ip:port" from the calling thread, so a test that uses
them runs its body inside the hub: Net.run(fn).  Processes started from a
thread inherit its namespace.

skip_unless_usable() raises unittest.SkipTest without root, without ip(8)
(iproute2), without iptables, or where namespaces or iptables inside them
do not work.  Redis inside a namespace needs --protected-mode no (it is
reached from other hosts, without a password).
"""

import ctypes
import http.client
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import uuid

import harness
from harness import Client
import topology
from topology import (ClusterNode, ClusterTopology, SentinelProc,
                      SentinelTopology, cli)

IP = shutil.which("ip") or "/usr/sbin/ip"
IPTABLES = shutil.which("iptables") or "/usr/sbin/iptables"
IPTABLES_RESTORE = shutil.which("iptables-restore") or \
    "/usr/sbin/iptables-restore"
CLONE_NEWNET = 0x40000000

PREFIX = "lbp"              # every namespace this module makes
CHAIN = "LBPCUT"            # our iptables chain, hooked into INPUT
SUBNET = "10.213.77."       # a /24 that exists only inside our namespaces
HUB_OCTET = 254             # the hub's address on the bridge
REDIS_PORT = 6379           # a host per process: standard ports
SENTINEL_PORT = 26379
BROKER_PORT = 7711

_libc = ctypes.CDLL(None, use_errno=True)


# ------------------------------------------------------------ commands --

def ip_cmd(*args, stdin=None, timeout=20.0):
    return subprocess.run([IP] + [str(a) for a in args], input=stdin,
                          stdin=None if stdin is not None else
                          subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout)


def ip_ok(*args, stdin=None):
    r = ip_cmd(*args, stdin=stdin)
    if r.returncode != 0:
        raise AssertionError("ip %s: %s" % (" ".join(map(str, args)),
                                            (r.stderr or r.stdout).strip()))
    return r.stdout


def ip_batch(lines, ns=None):
    """Several ip(8) commands in one process (`ip [-n ns] -batch -`)."""
    args = (["-n", ns] if ns else []) + ["-batch", "-"]
    return ip_ok(*args, stdin="".join(line + "\n" for line in lines))


def skip_unless_usable():
    """Raise unittest.SkipTest unless namespaces, veth, bridges and
    iptables can be used here."""
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root (network namespaces)")
    if not os.access(IP, os.X_OK):
        raise unittest.SkipTest("no ip(8) (iproute2)")
    if not (os.access(IPTABLES, os.X_OK) and
            os.access(IPTABLES_RESTORE, os.X_OK)):
        raise unittest.SkipTest("no iptables (make deps installs it)")


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_pid(name):
    """The pid in lbp<pid>x<random>-<host>, or None if name is not ours."""
    if not name.startswith(PREFIX):
        return None
    digits = name[len(PREFIX):].split("x", 1)[0]
    return int(digits) if digits.isdigit() else None


def remove_stale():
    """Delete the namespaces of this prefix whose run is gone (its pid no
    longer exists), stopping what still runs in them (a killed run's
    servers).  Namespaces of live runs (another lane, another test
    process) are left alone."""
    r = ip_cmd("netns", "list")
    if r.returncode != 0:
        return
    for line in r.stdout.splitlines():
        name = line.split(" ", 1)[0].strip()
        pid = _owner_pid(name)
        if pid is None or _pid_alive(pid):
            continue
        pids = ip_cmd("netns", "pids", name)
        for p in pids.stdout.split() if pids.returncode == 0 else ():
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        ip_cmd("netns", "del", name)


def unique_tag():
    """lbp<pid>x<random>: the start of every name one run makes."""
    return "%s%dx%s" % (PREFIX, os.getpid(), uuid.uuid4().hex[:6])


# --------------------------------------------------------------- netns --

class Netns:
    """A network namespace (/run/netns/<name>).  create=True makes it
    (`ip netns add`, loopback up) and raises unittest.SkipTest if that is
    refused; delete() is up to the caller (addCleanup)."""

    def __init__(self, name, create=True):
        self.name = name
        if create:
            r = ip_cmd("netns", "add", name)
            if r.returncode != 0:
                raise unittest.SkipTest("ip netns add failed: %s"
                                        % r.stderr.strip())
            ip_ok("-n", name, "link", "set", "lo", "up")

    def delete(self):
        ip_cmd("netns", "del", self.name)

    def enter(self):
        """Move the calling thread into this namespace (for good)."""
        fd = os.open("/run/netns/" + self.name, os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                e = ctypes.get_errno()
                raise OSError(e, "setns %s: %s" % (self.name,
                                                   os.strerror(e)))
        finally:
            os.close(fd)

    def call(self, fn):
        """fn() run by a thread inside this namespace; its result (a
        socket made there stays there), or its exception raised here."""
        out = {}

        def run():
            try:
                self.enter()
                out["value"] = fn()
            except BaseException as e:      # handed to the caller
                out["error"] = e

        t = threading.Thread(target=run, daemon=True,
                             name="in-" + self.name)
        t.start()
        t.join()
        if "error" in out:
            raise out["error"]
        return out["value"]

    def exec_argv(self, argv):
        """argv run inside this namespace by `ip netns exec`, which execs
        it: the process keeps its pid."""
        return [IP, "netns", "exec", self.name] + [str(a) for a in argv]

    def popen(self, argv, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.exec_argv(argv), **kw)

    def run(self, argv, stdin=None, timeout=20.0):
        """A short command inside this namespace (a child of a thread
        there: no `ip netns exec`); returns CompletedProcess."""
        return self.call(lambda: subprocess.run(
            [str(a) for a in argv], input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout))

    def connect(self, host, port, timeout=5.0):
        """A harness Client made inside this namespace."""
        return self.call(lambda: Client(port, host=host, timeout=timeout))


class Host(Netns):
    """One host of a Net: a namespace with one address on the bridge."""

    def __init__(self, net, name, ns_name, ip):
        super().__init__(ns_name, create=False)
        self.net = net
        self.host = name            # short name in the test: "redis", "ba"
        self.ip = ip
        self.hooked = False         # our chain exists and INPUT jumps to it
        self.drops = set()          # source addresses dropped now

    def __repr__(self):
        return "<host %s %s>" % (self.host, self.ip)

    def set_drops(self, ips):
        """Make the chain drop exactly the packets from these addresses
        (one iptables-restore: declaring the chain flushes it)."""
        lines = ["*filter", ":%s - [0:0]" % CHAIN]
        if not self.hooked:
            lines.append("-I INPUT 1 -j %s" % CHAIN)
        lines += ["-A %s -s %s/32 -j DROP" % (CHAIN, a) for a in sorted(ips)]
        lines.append("COMMIT")
        r = self.run([IPTABLES_RESTORE, "-w", "--noflush"],
                     stdin="\n".join(lines) + "\n")
        if r.returncode != 0:
            raise AssertionError("iptables-restore in %s: %s"
                                 % (self.name, (r.stderr or r.stdout)
                                    .strip()))
        self.hooked = True
        self.drops = set(ips)

    def rules(self):
        """Our chain as iptables -S prints it (for failure messages)."""
        r = self.run([IPTABLES, "-w", "-S", CHAIN])
        return r.stdout if r.returncode == 0 else ""


class Cut:
    """One partition, as Net.cut made it: when its rules went in (t0: the
    first started, t1: the last in place) and came out (healed_t0/t1)."""

    def __init__(self, src, dst, both, t0, t1):
        self.src = src
        self.dst = dst
        self.both = both
        self.t0 = t0
        self.t1 = t1
        self.healed_t0 = None
        self.healed_t1 = None

    def severs(self, a, b):
        """Whether this cut drops packets from host a to host b (names)."""
        if a in self.src and b in self.dst:
            return True
        return self.both and a in self.dst and b in self.src

    def describe(self):
        arrow = "<->" if self.both else "->"
        return "{%s} %s {%s}" % (",".join(self.src), arrow,
                                 ",".join(self.dst))


def _parallel(fns):
    """Run the callables at once, each in a thread; raise the first
    error."""
    errors = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:     # re-raised below
            errors.append(e)
    threads = [threading.Thread(target=wrap, args=(fn,), daemon=True)
               for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


class Net:
    """Hosts (one namespace each) on a bridge in a hub namespace.  hosts:
    short names ("redis", "s1", "ba", "c1", ...), at most 250.  close()
    deletes everything; it is idempotent (addCleanup(net.close))."""

    def __init__(self, hosts, subnet=SUBNET):
        skip_unless_usable()
        if len(set(hosts)) != len(hosts) or len(hosts) > 250:
            raise ValueError("host names must be unique, at most 250")
        remove_stale()
        self.tag = unique_tag()
        self.subnet = subnet
        self.closed = False
        self.cuts = []
        self.procs = []             # started by Host.popen: a safety net
        self.hub = Host(self, "hub", self.tag + "-hub",
                        subnet + str(HUB_OCTET))
        self.hosts = {}
        for i, name in enumerate(hosts):
            self.hosts[name] = Host(self, name, "%s-%s" % (self.tag, name),
                                    subnet + str(i + 1))
        self._names = [self.hub.name] + [h.name for h in self.hosts.values()]
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self):
        r = ip_cmd("-batch", "-", stdin="".join(
            "netns add %s\n" % n for n in self._names))
        if r.returncode != 0:
            raise unittest.SkipTest("ip netns add failed: %s"
                                    % r.stderr.strip())
        hub = ["link set lo up", "link add br0 type bridge",
               "link set br0 up",
               "addr add %s/24 dev br0" % self.hub.ip]
        for i, h in enumerate(self.hosts.values()):
            hub += ["link add v%d type veth peer name eth0 netns %s"
                    % (i, h.name),
                    "link set v%d master br0" % i,
                    "link set v%d up" % i]
        try:
            ip_batch(hub, ns=self.hub.name)
        except AssertionError as e:
            raise unittest.SkipTest("cannot build the bridge: %s" % e)

        def host_side(h):
            ip_batch(["link set lo up", "addr add %s/24 dev eth0" % h.ip,
                      "link set eth0 up"], ns=h.name)
        _parallel([lambda h=h: host_side(h) for h in self.hosts.values()])
        r = self.hub.run([IPTABLES, "-w", "-S"])
        if r.returncode != 0:
            raise unittest.SkipTest("iptables does not work in a network "
                                    "namespace here: %s"
                                    % (r.stderr or r.stdout).strip())

    # -------------------------------------------------------- lookup --

    def __getitem__(self, name):
        return self.hub if name == "hub" else self.hosts[name]

    def ip(self, name):
        return self[name].ip

    def run(self, fn):
        """fn() run by a thread inside the hub (the control host), which
        reaches every host; exceptions come back to the caller."""
        return self.hub.call(fn)

    # ---------------------------------------------------------- cuts --

    @staticmethod
    def _apply(wanted):
        """{host: the addresses it must drop}, set on every host at once."""
        _parallel([lambda h=h, w=w: h.set_drops(w)
                   for h, w in wanted.items()])

    def cut(self, src, dst, both=True):
        """Drop every packet from the src hosts at the dst hosts, and with
        both also from dst at src; added to the cuts in force.  Returns a
        Cut with the time the first rule was started (t0) and the last
        one was in place (t1), time.monotonic()."""
        src = [src] if isinstance(src, str) else list(src)
        dst = [dst] if isinstance(dst, str) else list(dst)
        pairs = [(a, b) for a in src for b in dst]
        if both:
            pairs += [(b, a) for a, b in pairs]
        wanted = {}
        for a, b in pairs:
            wanted.setdefault(self[b], set(self[b].drops)).add(self[a].ip)
        t0 = time.monotonic()
        self._apply(wanted)
        c = Cut(src, dst, both, t0, time.monotonic())
        self.cuts.append(c)
        return c

    def heal(self):
        """Flush every cut; returns (t0, t1) as cut() does."""
        wanted = {h: set() for h in [self.hub] + list(self.hosts.values())
                  if h.drops}
        t0 = time.monotonic()
        self._apply(wanted)
        t1 = time.monotonic()
        for c in self.cuts:
            if c.healed_t0 is None:
                c.healed_t0, c.healed_t1 = t0, t1
        return t0, t1

    def severed(self, a, b, t):
        """Whether packets from host a to host b were dropped at time t
        (by a cut in force then: t0..healed_t1, generously)."""
        for c in self.cuts:
            end = c.healed_t1 if c.healed_t1 is not None else float("inf")
            if c.t0 <= t <= end and c.severs(a, b):
                return True
        return False

    def severed_during(self, a, b, t_from, t_to):
        """Whether a cut between a and b (either way) overlapped
        [t_from, t_to]."""
        for c in self.cuts:
            end = c.healed_t1 if c.healed_t1 is not None else float("inf")
            if c.t0 <= t_to and t_from <= end and \
                    (c.severs(a, b) or c.severs(b, a)):
                return True
        return False

    def describe_rules(self):
        out = []
        for h in self.hosts.values():
            if h.drops:
                out.append("  %s drops from %s" % (h.host, sorted(h.drops)))
        return "\n".join(out) or "  (no drops)"

    # --------------------------------------------------------- close --

    def track(self, proc):
        self.procs.append(proc)
        return proc

    def close(self):
        """Stop what still runs in our namespaces (by pid), then delete
        them (the veths and the bridge go with them).  Idempotent."""
        if self.closed:
            return
        self.closed = True
        for p in self.procs:
            if p.poll() is None:
                try:
                    harness._kill_wait(p, signal.SIGKILL)
                except Exception:
                    pass
        for name in getattr(self, "_names", []):
            r = ip_cmd("netns", "pids", name)
            for p in r.stdout.split() if r.returncode == 0 else ():
                try:
                    os.kill(int(p), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        r = ip_cmd("-batch", "-", stdin="".join(
            "netns del %s\n" % n for n in getattr(self, "_names", [])))
        if r.returncode != 0:       # one may be gone: delete one by one
            for n in getattr(self, "_names", []):
                ip_cmd("netns", "del", n)


# ------------------------------------------------------------- servers --

class NsRedis(harness.Redis):
    """redis-server on a host, at bind:port (default: the host's address
    and 6379; test_netns binds the host's loopback), no persistence,
    protected mode off.  Stopped, restarted, paused by pid as
    harness.Redis; cli() is made inside the host."""

    def __init__(self, host, *extra_args, bind=None, port=REDIS_PORT):
        self.host = host
        self.bind = bind or host.ip
        self.port = port
        self.extra = [str(a) for a in extra_args]
        self.dir = tempfile.mkdtemp(prefix="lbt-nsredis-")
        self.proc = None
        if not self._start():
            text = self.log()
            self.close()
            raise RuntimeError("redis-server did not start on %s:\n%s"
                               % (self.addr, text[-2000:]))

    def argv(self):
        return self.host.exec_argv(
            [harness.REDIS_BIN, "--port", self.port, "--bind", self.bind,
             "--protected-mode", "no", "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--dir", self.dir,
             "--loglevel", "notice"] + self.extra)

    @property
    def addr(self):
        return "%s:%d" % (self.bind, self.port)

    def cli(self, *args, timeout=5.0):
        return self.host.call(lambda: cli(self.addr, *args,
                                          timeout=timeout))


class NsSentinel(SentinelProc):
    """A Sentinel on a host (its address, port 26379)."""

    def __init__(self, host, dirpath, index, master_addr, down_after_ms,
                 failover_timeout_ms, quorum, master_name, debug=None):
        self.host = host
        self.bind = host.ip
        self.port = SENTINEL_PORT
        self._paths(dirpath, index, debug)
        self.write_conf(master_addr, down_after_ms, failover_timeout_ms,
                        quorum, master_name)
        if not self.start():
            raise RuntimeError("sentinel %d did not start on %s; see %s"
                               % (index, self.addr, self.logpath))

    def argv(self):
        return self.host.exec_argv(super().argv())


class NsSentinelTopology(SentinelTopology):
    """topology.SentinelTopology with every Redis node and every Sentinel
    on a host of its own: node_hosts[0] is the first master, the others
    its replicas.  Build and use it inside Net.run (its helpers talk to
    "ip:port" from the calling thread)."""

    def __init__(self, node_hosts, sentinel_hosts, **kw):
        self._node_hosts = list(node_hosts)
        self._sentinel_hosts = list(sentinel_hosts)
        super().__init__(replicas=len(self._node_hosts) - 1,
                         sentinels=len(self._sentinel_hosts), **kw)

    def _new_node(self, replicaof):
        host = self._node_hosts[len(self.nodes)]
        base = list(topology.NODE_ARGS) + self.redis_args
        node = NsRedis(host, *(base + replicaof))
        node.base_extra = base
        self.nodes.append(node)
        return node

    def _new_sentinel(self, i, master_addr, down_after_ms,
                      failover_timeout_ms, quorum, master_name):
        return NsSentinel(self._sentinel_hosts[i], self.dir, i, master_addr,
                          down_after_ms, failover_timeout_ms, quorum,
                          master_name)


class NsClusterNode(ClusterNode):
    """A cluster node on a host: its address, port 6379, bus port 16379,
    directory <topdir>/<host>."""

    def __init__(self, host, topdir, extra=()):
        self.host = host
        self.bind = host.ip
        self.topdir = topdir
        self.extra = [str(a) for a in extra]
        self.proc = None
        self.paused = False
        self.port = REDIS_PORT
        self.bus_port = REDIS_PORT + 10000
        self.dir = os.path.join(topdir, host.host)
        os.makedirs(self.dir, exist_ok=True)
        if not self.start():
            raise RuntimeError("cluster node did not start on %s:\n%s"
                               % (self.addr, self.log(20)))
        self.id = self.cli("CLUSTER", "MYID")

    def argv(self):
        return self.host.exec_argv(super().argv() +
                                   ["--protected-mode", "no"])


class NsClusterTopology(ClusterTopology):
    """topology.ClusterTopology with every node on a host of its own
    (len(hosts) = masters * (1 + replicas)); redis-cli --cluster create
    runs in the calling thread's namespace: build it inside Net.run."""

    def __init__(self, hosts, masters=3, replicas=1, **kw):
        self._hosts = list(hosts)
        if len(self._hosts) != masters * (1 + replicas):
            raise ValueError("need %d hosts" % (masters * (1 + replicas)))
        super().__init__(masters=masters, replicas=replicas, **kw)

    def _new_node(self, i, redis_args):
        return NsClusterNode(self._hosts[i], self.dir, redis_args)


class NsBroker(harness.Broker):
    """A lockbrokerd on a host, listening on 0.0.0.0:7711 there (its
    loopback and its address).  redis_addr None: no -r (Sentinel or
    cluster mode, given in extra).  Readiness, log, check_log, stop, kill
    and close are the harness's: client() is made inside the host."""

    bind = "0.0.0.0"

    def __init__(self, host, redis_addr, prefix, *extra_args,
                 port=BROKER_PORT, ready_timeout=10.0):
        if not os.access(harness.BROKER_BIN, os.X_OK):
            raise AssertionError("broker binary %s is missing (build it, or "
                                 "set LOCKBROKERD)" % harness.BROKER_BIN)
        self.host = host
        self.redis_addr = redis_addr
        self.prefix = prefix
        self.extra = [str(a) for a in extra_args]
        self.auth = None
        self.dir = tempfile.mkdtemp(prefix="lbt-broker-")
        self.logpath = os.path.join(self.dir, "stderr.log")
        self.proc = None
        self.rc = None
        self.checked = False
        self.port = port
        self._spawn()
        try:
            self.wait_ready(ready_timeout)
        except BaseException:
            self.kill(check=False)
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def launcher(self):
        return [IP, "netns", "exec", self.host.name]

    @property
    def ip(self):
        return getattr(self.host, "ip", "127.0.0.1")

    @property
    def addr(self):
        return "%s:%d" % (self.ip, self.port)

    def client(self, timeout=5.0, host="127.0.0.1", ns=None):
        """A Client made inside ns (default: the broker's own host, on its
        loopback)."""
        return (ns or self.host).connect(host, self.port, timeout)

    def stats(self):
        """STATS asked inside the broker's host, as a dict."""
        c = self.client(timeout=5.0)
        try:
            return harness.parse_stats(c.req("STATS"))
        finally:
            c.close()

    def metrics(self, metrics_port):
        """GET /metrics from the broker's host (its metrics_bind is the
        default 127.0.0.1); the body, or "" if it does not answer."""
        def get():
            conn = http.client.HTTPConnection("127.0.0.1", metrics_port,
                                              timeout=2.0)
            try:
                conn.request("GET", "/metrics")
                return conn.getresponse().read().decode("utf-8", "replace")
            finally:
                conn.close()
        try:
            return self.host.call(get)
        except OSError:
            return ""
