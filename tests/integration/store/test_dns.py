"""
test_dns.py - Redis by host name: the broker resolves the name with its own
asynchronous resolver (libevent's evdns), pointed by --dns_nameserver at a
DNS responder the test runs (dnsserver.py) on 127.0.0.1.

A name grants like a number; a name that moves to another Redis (same
port, another loopback address) is followed without a restart, after a
loss (every connect resolves again) and while the old Redis still answers
(redis_resolve_interval_ms); an unknown name gives ERR UNAVAILABLE and a
log line, not a hang and not a line per retry; the loop answers PING
while the responder holds its answers back for 2 s; AAAA answers and the
[::1] literal connect over IPv6; -t checks the spelling only.
"""

import os
import re
import socket
import subprocess
import time
import unittest
import urllib.request

import harness
import topology
from harness import BrokerTestCase, wait_until
from dnsserver import DnsServer

NAME = "redis.lbt.test"


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class RedisAt(harness.Redis):
    """A redis-server on host:port (a loopback address of 127/8, or ::1)
    rather than 127.0.0.1 on a port of its own choosing."""

    def __init__(self, host, port):
        self.host = host
        self.extra = []
        self.dir = __import__("tempfile").mkdtemp(prefix="lbt-redis-")
        self.proc = None
        self.port = port
        if not self._start():
            self.close()
            raise RuntimeError("redis-server did not start on %s:%d"
                               % (host, port))

    def argv(self):
        argv = super().argv()
        argv[argv.index("--bind") + 1] = self.host
        return argv

    def cli(self, *args, timeout=5.0):
        with socket.create_connection((self.host, self.port),
                                      timeout=timeout) as s:
            s.sendall(harness._resp_encode(args))
            r = harness._RespReader(s).reply()
        if isinstance(r, harness.RedisError):
            raise r
        return r


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class DnsCase(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.dns = DnsServer()
        self.addCleanup(self.dns.close)

    def start_named(self, port, *extra, **kw):
        """A broker given Redis as NAME:port, asking self.dns."""
        b = harness.Broker("%s:%d" % (NAME, port), self.prefix,
                           "--dns_nameserver", self.dns.addr, *extra, **kw)
        self.addCleanup(b.close)
        return b

    def sample(self, mport, prefix):
        """The value of the /metrics line that starts with prefix."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport,
                                    timeout=5.0) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith(prefix):
                return float(line[len(prefix):])
        self.fail("no %r on /metrics" % prefix)

    def redis_at(self, host, port):
        r = RedisAt(host, port)
        self.addCleanup(r.close)
        return r

    def holder(self, r, key):
        return r.cli("GET", self.lock_key(key))


class TestByName(DnsCase):
    def test_grants_through_a_name(self):
        self.dns.set(NAME, "127.0.0.1")
        b = self.start_named(self.redis.port)
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE k"))
        self.assertIsNotNone(self.holder(self.redis, "k"))
        self.assertGreaterEqual(self.dns.asked(NAME), 1)
        self.assertIn("at 127.0.0.1", b.log())
        self.assertEqual(self.stats(c)["redis_master"],
                         "%s:%d" % (NAME, self.redis.port))
        # the master's label (STATS, /metrics node=) is the address as
        # given, the name, as PROTOCOL.md says
        self.assertRegex(self.stats(c)["redis_node_stats"],
                         r"\A%s:%d/up/" % (re.escape(NAME), self.redis.port))

    def test_follows_a_moved_redis_after_a_loss(self):
        """Redis dies; a new one starts on the same port at another
        address and the name points there: the next reconnect finds it."""
        port = harness.free_port()
        old = self.redis_at("127.0.0.1", port)
        self.dns.set(NAME, "127.0.0.1")
        # interval 0: only the reconnect's lookup can find the new address
        mport = harness.free_port()
        b = self.start_named(port, "--failover_lock_delay_ms", "0",
                             "--redis_resolve_interval_ms", "0",
                             "--metrics_port", mport)
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE before"))
        for i in range(20):
            self.assertToken(c.req("ACQUIRE r%d" % i))
            self.assertEqual(c.req("RELEASE r%d" % i), "OK 0")
        rtt = 'lockbroker_redis_rtt_seconds_count{node="%s:%d"} ' % (NAME,
                                                                     port)
        self.assertGreaterEqual(self.sample(mport, rtt), 40)
        old.stop()
        new = self.redis_at("127.0.0.2", port)
        self.dns.set(NAME, "127.0.0.2")

        def granted():
            r = c.req("ACQUIRE after")
            return r.startswith("OK ")
        wait_until(granted, 10, interval=0.1, what="grant on the new Redis")
        self.assertIsNotNone(self.holder(new, "after"))
        self.assertIn("now resolves to 127.0.0.2 (was 127.0.0.1)", b.log())
        # same label (the name), another Redis: round trips from 0 again
        self.assertLess(self.sample(mport, rtt), 20)

    def test_interval_moves_a_live_connection(self):
        """The old Redis still answers, but the name now names another:
        within redis_resolve_interval_ms the broker is there."""
        port = harness.free_port()
        old = self.redis_at("127.0.0.1", port)
        new = self.redis_at("127.0.0.2", port)
        self.dns.set(NAME, "127.0.0.1")
        b = self.start_named(port, "--failover_lock_delay_ms", "0",
                             "--redis_resolve_interval_ms", "200")
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE a"))
        self.assertIsNotNone(self.holder(old, "a"))
        self.dns.set(NAME, "127.0.0.2")

        def moved():
            r = c.req("ACQUIRE b%d" % time.monotonic_ns())
            return r.startswith("OK ") and new.cli("DBSIZE") > 0
        wait_until(moved, 10, interval=0.1, what="grants on the new Redis")
        self.assertIn("reconnecting", b.log())
        # without the interval nothing would have moved it: old still up
        self.assertTrue(old.alive())

    def test_dns_failing_while_up_keeps_the_connection(self):
        """The look-ups while connected fail (SERVFAIL): the broker stays
        on the address it has, and says so once per connection."""
        self.dns.set(NAME, "127.0.0.1")
        b = self.start_named(self.redis.port,
                             "--redis_resolve_interval_ms", "100")
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE k1"))
        n = self.dns.asked(NAME)
        self.dns.servfail = True
        wait_until(lambda: self.dns.asked(NAME) >= n + 10, 10,
                   what="look-ups while connected")
        time.sleep(0.5)                     # a few more rounds of them
        self.assertToken(c.req("ACQUIRE k2"))
        self.assertEqual(self.stats(c)["redis"], "up")
        staying = [l for l in b.log().splitlines() if "staying on" in l]
        self.assertEqual(len([l for l in staying if "command conn" in l]),
                         1, "\n".join(staying))
        self.assertNotIn("reconnecting", b.log())

    @unittest.skipUnless(ipv6_loopback(), "no IPv6 loopback here")
    def test_aaaa_answer_connects_over_ipv6(self):
        port = harness.free_port()
        r6 = self.redis_at("::1", port)
        self.dns.set(NAME, "::1")
        b = self.start_named(port)
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE k6"))
        self.assertIsNotNone(self.holder(r6, "k6"))
        self.assertIn("at ::1", b.log())

    @unittest.skipUnless(ipv6_loopback(), "no IPv6 loopback here")
    def test_ipv6_literal_still_works(self):
        port = harness.free_port()
        r6 = self.redis_at("::1", port)
        b = harness.Broker("[::1]:%d" % port, self.prefix)
        self.addCleanup(b.close)
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE k6"))
        self.assertIsNotNone(self.holder(r6, "k6"))
        self.assertEqual(self.dns.questions, [])


class TestNameFails(DnsCase):
    def test_unknown_name_is_unavailable_and_logged_once(self):
        b = self.start_named(self.redis.port, wait_ready=False)
        wait_until(lambda: "cannot resolve" in b.log(), 5,
                   what="a log line naming the failed lookup")
        c = self.connect(b)
        r, ms = c.timed_req("ACQUIRE k", timeout=5)
        self.assertErr(r, "UNAVAILABLE")
        self.assertLess(ms, 2000)
        self.assertEqual(c.req("PING"), "OK PONG")
        # retried with the back-off, quietly: the responder is asked
        # again and again, the log says it once
        n = self.dns.asked(NAME)
        wait_until(lambda: self.dns.asked(NAME) >= n + 4, 10,
                   what="lookups retried")
        # (once per connection: the command link and the subscriber)
        warned = [l for l in b.log().splitlines()
                  if "cannot resolve" in l and " warn " in l]
        self.assertEqual(len([l for l in warned if "command conn" in l]), 1,
                         "\n".join(warned))
        self.assertEqual(len(warned), 2, "\n".join(warned))
        # the name appears: the broker connects without a restart
        self.dns.set(NAME, "127.0.0.1")
        b.wait_ready(timeout=10)
        self.assertToken(c.req("ACQUIRE k"))

    def test_loop_answers_while_the_resolver_waits(self):
        """Every answer held back 2 s: the lookup is in flight, the loop
        is not waiting for it; a request waits for it (being made)."""
        self.dns.set(NAME, "127.0.0.1")
        self.dns.delay = 2.0
        b = self.start_named(self.redis.port, wait_ready=False)
        wait_until(lambda: self.dns.asked(NAME) >= 1, 5,
                   what="the broker's first question")
        c = self.connect(b)
        worst = 0.0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            r, ms = c.timed_req("PING", timeout=2)
            self.assertEqual(r, "OK PONG")
            worst = max(worst, ms)
            time.sleep(0.05)
        self.assertLess(worst, 200, "PING took %.0f ms" % worst)
        # a one-try ACQUIRE sent while the lookup is in flight (its answer
        # 0.5 s away) waits for the connection being made, at most
        # redis_timeout_ms, instead of being refused
        r, ms = c.timed_req("ACQUIRE k", timeout=5)
        self.assertToken(r)
        self.assertGreater(ms, 100, "granted before the lookup answered?")
        b.wait_ready(timeout=15)
        self.assertToken(c.req("ACQUIRE k"))


class NamedSentinel(topology.SentinelProc):
    """A Sentinel that monitors its master by host name and announces
    host names (Redis 7: resolve-hostnames, announce-hostnames), so what
    it hands the broker is a name."""

    def write_conf(self, *args):
        super().write_conf(*args)
        with open(self.conf) as f:
            text = f.read()
        with open(self.conf, "w") as f:
            f.write("sentinel resolve-hostnames yes\n"
                    "sentinel announce-hostnames yes\n" + text)


class TestSentinelByName(DnsCase):
    """The sentinels given by name (asked of the test's DNS responder) and
    the master they hand back a name too ("localhost", which the
    Sentinel resolves with the system resolver and the broker finds in
    /etc/hosts): the broker grants through names only."""

    def test_grants_through_sentinel_names(self):
        master = self.start_redis()
        sdir = __import__("tempfile").mkdtemp(prefix="lbt-sentinel-")
        self.addCleanup(__import__("shutil").rmtree, sdir, True)
        sent = NamedSentinel(sdir, 0, "localhost:%d" % master.port, 5000,
                             10000, 1, "mymaster")
        self.addCleanup(sent.stop)
        wait_until(lambda: topology._quiet(
            topology.cli, sent.addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME",
            "mymaster") == ["localhost", str(master.port)], 10,
            what="the sentinel naming its master by host name")
        self.dns.set("sentinel.lbt.test", "127.0.0.1")
        b = harness.Broker(None, self.prefix, "--redis_sentinels",
                           "sentinel.lbt.test:%d" % sent.port,
                           "--redis_master_name", "mymaster",
                           "--dns_nameserver", self.dns.addr,
                           "--failover_lock_delay_ms", "0",
                           ready_timeout=15)
        self.addCleanup(b.close)
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE ks"))
        self.assertIsNotNone(master.cli("GET", self.lock_key("ks")))
        self.assertGreaterEqual(self.dns.asked("sentinel.lbt.test"), 1)
        self.assertIn("localhost:%d at 127.0.0.1" % master.port, b.log())


class TestClusterByName(DnsCase):
    """A cluster whose nodes announce host names and give them in the slot
    map (cluster-announce-hostname, cluster-preferred-endpoint-type
    hostname), the seeds given by name too: the broker maps, grants and
    subscribes its shards through names only."""

    def test_grants_and_subscribes_through_names(self):
        cl = topology.ClusterTopology(masters=3, replicas=0)
        self.addCleanup(cl.close)
        names = {}
        for i, n in enumerate(cl.nodes):
            name = "node%d.lbt.test" % i
            names[n.port] = name
            self.dns.set(name, "127.0.0.1")
            n.cli("CONFIG", "SET", "cluster-announce-hostname", name)
            n.cli("CONFIG", "SET", "cluster-preferred-endpoint-type",
                  "hostname")

        def map_by_name():
            for n in cl.nodes:
                for e in n.cli("CLUSTER", "SLOTS"):
                    if e[2][0] != names[e[2][1]]:
                        return False
            return True
        wait_until(map_by_name, 10, what="slot maps naming hosts")
        seeds = ",".join("%s:%d" % (names[n.port], n.port)
                         for n in cl.nodes)
        b1 = harness.Broker(None, self.prefix, "--redis_cluster", seeds,
                            "--dns_nameserver", self.dns.addr,
                            "--failover_lock_delay_ms", "0",
                            ready_timeout=15)
        self.addCleanup(b1.close)
        b2 = harness.Broker(None, self.prefix, "--redis_cluster", seeds,
                            "--dns_nameserver", self.dns.addr,
                            "--failover_lock_delay_ms", "0",
                            ready_timeout=15)
        self.addCleanup(b2.close)
        c1, c2 = self.connect(b1), self.connect(b2)
        for k in range(12):                 # keys over every master
            self.assertToken(c1.req("ACQUIRE k%d" % k))
        # a waiter on the other broker wakes through the shard channel
        c2.send("ACQUIRE k0 WAIT 5000")
        time.sleep(0.2)
        self.assertTrue(c1.req("RELEASE k0").startswith("OK"))
        self.assertTrue(c2.readline(timeout=5).startswith("OK "))
        log = b1.log()
        for name in names.values():
            self.assertIn("%s:" % name, log)
            self.assertIn("Redis shard subscriber %s:" % name, log)
        self.assertNotIn("cannot resolve", log)


class TestConfig(unittest.TestCase):
    def run_t(self, *args):
        return subprocess.run([harness.BROKER_BIN, "-t"] + list(args),
                              capture_output=True, text=True, timeout=10)

    def test_t_checks_spelling_only(self):
        # nothing answers for this name anywhere: -t does not ask
        r = self.run_t("-r", "redis.nowhere.invalid:6379")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("resolved when the broker connects", r.stdout)

    def test_bad_names_and_nameservers_refused(self):
        for args in (("-r", "bad_name:6379"),
                     ("--dns_nameserver", "ns.example"),
                     ("--dns_nameserver", "127.0.0.1:0"),
                     ("--redis_resolve_interval_ms", "-1")):
            r = self.run_t(*args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
        for ns in ("127.0.0.1", "127.0.0.1:5353", "::1", "[::1]:5353"):
            r = self.run_t("--dns_nameserver", ns)
            self.assertEqual(r.returncode, 0, (ns, r.stderr))


if __name__ == "__main__":
    unittest.main()
