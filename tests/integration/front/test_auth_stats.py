"""
test_auth_stats.py - what an unauthenticated client can learn and cost
(issue 9, D11, D12), and the one table of counters behind STATS and
/metrics (issue 9, review 2).

  - Before AUTH, every line but AUTH, PING and QUIT gets ERR NOAUTH,
    whatever its arguments: no argument error reveals a limit.
  - Wrong AUTH tokens are all counted, but logged at most once per 10 s,
    with the number not logged since.
  - STATS and /metrics show the same counters, with the same values; both
    match the table in proto/PROTOCOL.md's STATS section; every name
    either side had before stays.
"""

import os
import re
import socket
import time
import unittest

import harness
from harness import BrokerTestCase, free_port, parse_stats, wait_until
from test_metrics import http_req, parse_metrics

TOKEN = "s3cret-Tok"


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


def wrong_auth_lines(log):
    return [l for l in log.splitlines() if "wrong AUTH token" in l]


class TestNoAuthFirst(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.b = self.start_broker("--auth_token", TOKEN,
                                   "--max_key_len", "40")

    def test_every_other_line_is_noauth_whatever_its_arguments(self):
        c = self.connect(self.b)
        lines = ["ACQUIRE " + "k" * 41, "acquire " + "k" * 300, "ACQUIRE",
                 "ACQUIRE k WAIT", "ACQUIRE k WAIT 99999999999",
                 "ACQUIRE k TTL 0", "ACQUIRE k BOGUS 1", "ACQUIRE k WAIT 1 "
                 "WAIT 2", "RELEASE", "RELEASE a b", "RENEW k WAIT 5",
                 "OWNER", "OWNER a b", "HELD x", "STATS x",
                 "HELLO " + "n" * 100, "HELLO a b", "EVENTS", "EVENTS maybe",
                 "FETCH k", "xyzzy", "  \tacquire k", "ACQUIRE k\x01",
                 "\x7fPING", "PINGX", "ACQUIRE k\xe9",
                 " ".join(["w"] * 200)]
        for line in lines:
            r = c.req(line)
            self.assertErr(r, "NOAUTH")
            self.assertNotRegex(r, r"[0-9]", "a number in %r for %r"
                                % (r, line))
        # Blank lines still get no reply; the open commands keep their
        # own argument checks.
        c.sendraw(b"   \t \n\n")
        self.assertEqual(c.req("PING"), "OK PONG")
        self.assertErr(c.req("PING x"), "BADARG")
        self.assertErr(c.req("AUTH"), "BADARG")
        self.assertErr(c.req("QUIT now"), "BADARG")
        self.assertEqual(int(self.auth_failures()), 0)
        # After AUTH the limits apply as usual.
        self.assertEqual(c.req("auth " + TOKEN), "OK")
        self.assertErr(c.req("ACQUIRE " + "k" * 41), "BADARG")
        self.assertErr(c.req("FETCH k"), "BADCMD")
        self.assertToken(c.req("ACQUIRE " + "k" * 40))
        # A line over max_line is still about the buffer: TOOLONG, closed.
        d = self.connect(self.b)
        d.sendraw(b"ACQUIRE " + b"k" * 5000 + b"\n")
        self.assertErr(d.readline(), "TOOLONG")
        self.assertTrue(d.wait_closed(3.0))

    def auth_failures(self):
        a = self.connect(self.b)
        self.assertEqual(a.req("AUTH " + TOKEN), "OK")
        return self.stats(a)["auth_failures"]


class TestAuthFailureLog(BrokerTestCase):
    def test_wrong_auth_flood_is_counted_not_logged(self):
        b = self.start_broker("--auth_token", TOKEN)
        c1, c2 = self.connect(b), self.connect(b)
        # 200 wrong tokens, pipelined from two sessions.
        c1.sendraw(b"".join(b"AUTH wrong%d\n" % i for i in range(100)))
        c2.sendraw(b"AUTH x\n" * 100)
        for c in (c1, c2):
            for _ in range(100):
                self.assertErr(c.readline(), "NOAUTH")
        a = self.connect(b)
        self.assertEqual(a.req("AUTH " + TOKEN), "OK")
        self.assertEqual(self.stats(a)["auth_failures"], "200")
        logged = wrong_auth_lines(b.log())
        self.assertGreaterEqual(len(logged), 1, "no failure logged at all")
        self.assertLessEqual(len(logged), 2, "\n".join(logged))

    def test_next_line_says_how_many_were_not_logged(self):
        # Waits out the 10 s between two lines.
        b = self.start_broker("--auth_token", TOKEN)
        c = self.connect(b)
        for _ in range(3):
            self.assertErr(c.req("AUTH nope"), "NOAUTH")
        self.assertEqual(len(wrong_auth_lines(b.log())), 1)
        time.sleep(10.3)
        self.assertErr(c.req("AUTH nope"), "NOAUTH")
        logged = wrong_auth_lines(b.log())
        self.assertEqual(len(logged), 2, logged)
        self.assertRegex(logged[1], r"\b2 more\b")


# --- one table of counters --------------------------------------------------

def doc_table():
    """[(name, type, metric or None)] from PROTOCOL.md's STATS section."""
    with open(os.path.join(harness.REPO, "proto", "PROTOCOL.md")) as f:
        text = f.read()
    sect = text.split("\n### STATS\n", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| (counter|gauge|text) \| "
                      r"(?:`([^`]+)`|-) \|", sect, re.M)
    return [(n, t, m or None) for n, t, m in rows]


# Names clients and dashboards used before the table: they must stay.
OLD_STATS = ("version", "uptime_s", "sessions", "locks_held", "waiters",
             "keys", "acquires", "busy", "acquire_errors", "releases",
             "renewals", "lost", "orphans", "handoffs", "fair_yields",
             "accepted", "refused", "toolong", "auth_failures", "redis",
             "redis_inflight", "redis_reconnects")
OLD_METRICS = ("lockbroker_sessions", "lockbroker_locks_held",
               "lockbroker_waiters",
               'lockbroker_acquires_total{outcome="ok"}',
               'lockbroker_acquires_total{outcome="busy"}',
               'lockbroker_acquires_total{outcome="error"}',
               "lockbroker_releases_total", "lockbroker_renewals_total",
               # by cause now (the family's name stays; sum() = the old)
               'lockbroker_lost_locks_total{cause="expired"}',
               "lockbroker_sessions_accepted_total",
               "lockbroker_sessions_refused_total",
               "lockbroker_auth_failures_total", "lockbroker_redis_up",
               "lockbroker_redis_reconnects_total")
HISTOGRAMS = ("lockbroker_acquire_wait_seconds", "lockbroker_handoff_seconds",
              "lockbroker_hold_seconds", "lockbroker_redis_rtt_seconds",
              "lockbroker_app_acquire_wait_seconds")
# One sample per Redis master (label node="ip:port"), beside the table.
PER_NODE = ("lockbroker_redis_node_up", "lockbroker_redis_node_inflight",
            "lockbroker_redis_node_redirects_total")


class TestOneTable(BrokerTestCase):
    def setUp(self):
        super().setUp()
        for attempt in range(3):
            self.mport = free_port()
            try:
                self.b = self.start_broker(
                    "--metrics_port", self.mport, "--auth_token", TOKEN,
                    "--max_locks_per_session", "2")
                break
            except AssertionError as e:
                if attempt == 2 or "metrics" not in str(e):
                    raise
        self.obs = self.client()
        self.table = doc_table()

    def client(self):
        c = self.connect(self.b)
        self.assertEqual(c.req("AUTH " + TOKEN), "OK")
        return c

    def metrics(self):
        st, _, body = http_req(self.mport)
        self.assertEqual(st, 200, body)
        return parse_metrics(body)

    def test_stats_names_are_the_documented_table_in_order(self):
        names = [n for n, _, _ in self.table]
        self.assertGreater(len(names), 20, "STATS table not found")
        for n in OLD_STATS + ("paused",):
            self.assertIn(n, names)
        metrics = {m for _, _, m in self.table if m}
        for m in OLD_METRICS + ("lockbroker_paused_total",):
            self.assertIn(m, metrics)
        st = self.obs.req("STATS")
        self.assertTrue(st.startswith("OK version="), st)
        self.assertEqual(list(parse_stats(st)), names)

    def test_metrics_are_the_table_plus_histograms(self):
        m = self.metrics()
        want = {mt for _, _, mt in self.table if mt}
        counters = {k for k in m if not k.startswith(HISTOGRAMS + PER_NODE)}
        self.assertEqual(counters, want)
        # single-address mode: one master, its command connection up
        node = 'node="%s"' % self.b.redis_addr
        self.assertEqual(m["lockbroker_redis_node_up{%s}" % node], 1)
        for fam in PER_NODE:
            self.assertEqual([k for k in m if k.startswith(fam + "{")],
                             ["%s{%s}" % (fam, node)])
        _, _, body = http_req(self.mport)
        types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M))
        for _, typ, mt in self.table:
            if mt:
                self.assertEqual(types[mt.split("{")[0]], typ, mt)

    def pause_one_session(self):
        """A client that pipelines PINGs and never reads: the broker pauses
        its session (STATS paused goes up)."""
        s = socket.create_connection(("127.0.0.1", self.b.port))
        self.addCleanup(s.close)
        s.sendall(b"AUTH " + TOKEN.encode() + b"\n")
        s.setblocking(False)
        data = b"PING\n" * 400000
        sent, deadline = 0, time.monotonic() + 20
        while self.stats(self.obs)["paused"] == "0":
            self.assertLess(time.monotonic(), deadline, "never paused")
            try:
                sent += s.send(data[sent:sent + 65536])
            except BlockingIOError:
                time.sleep(0.01)
            if sent >= len(data):
                sent = 0
        s.close()

    def test_stats_and_metrics_agree(self):
        a, c = self.client(), self.client()
        # Something in (nearly) every counter.
        tok = self.assertToken(a.req("ACQUIRE k1"))
        self.assertToken(a.req("ACQUIRE k2"))
        self.assertErr(a.req("ACQUIRE k3"), "LIMIT")        # acquire_errors
        self.assertEqual(c.req("ACQUIRE k1"), "BUSY")       # busy
        c.send("ACQUIRE k1 WAIT 5000")
        wait_until(lambda: self.stats(self.obs)["waiters"] == "1", 3.0,
                   what="waiters=1")
        self.assertEqual(a.req("RELEASE k1"), "OK 0")       # a handoff
        self.assertGreater(self.assertToken(c.readline()), tok)
        self.assertEqual(self.redis.cli("DEL", self.lock_key("k2")), 1)
        self.assertErr(a.req("RENEW k2"), "LOST")           # lost
        self.assertErr(self.connect(self.b).req("AUTH bad"), "NOAUTH")
        d = self.connect(self.b)
        d.sendraw(b"x" * 5000 + b"\n")                      # toolong
        self.assertErr(d.readline(), "TOOLONG")
        before = self.stats(self.obs)["sessions"]
        self.pause_one_session()                            # paused
        wait_until(lambda: self.stats(self.obs)["sessions"] == before, 5.0,
                   what="the paused session's end")

        # Compare at a quiet moment: STATS, /metrics, STATS again.
        for _ in range(20):
            s1 = self.stats(self.obs)
            m = self.metrics()
            s2 = self.stats(self.obs)
            up1, up2 = int(s1.pop("uptime_s")), int(s2.pop("uptime_s"))
            if s1 == s2:
                break
            time.sleep(0.1)
        else:
            self.fail("counters never quiet")
        for name, typ, metric in self.table:
            if metric is None:
                continue
            if name == "uptime_s":
                self.assertTrue(up1 <= m[metric] <= up2, (up1, m, up2))
                continue
            want = {"up": 1, "down": 0}[s2[name]] if name == "redis" \
                else int(s2[name])
            self.assertEqual(m[metric], want, "%s=%s but %s %s"
                             % (name, s2[name], metric, m[metric]))
        for name in ("paused", "toolong", "handoffs", "busy",
                     "acquire_errors", "lost", "auth_failures"):
            self.assertGreater(int(s2[name]), 0, name)


if __name__ == "__main__":
    unittest.main()
