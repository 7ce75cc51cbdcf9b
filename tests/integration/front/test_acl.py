"""
test_acl.py - per-app access (issue 15, items 2 and 3): acl_file, AUTH as
an app, ERR DENIED, what OWNER hides, reloads, STATS and /metrics.

Two apps share one broker: "alpha" may use alpha:* and common:*, "beta"
beta:* and common:*.

  - Each app can ACQUIRE, RELEASE (LINGER too), RENEW and ask OWNER of its
    own keys only; any other key answers ERR DENIED.
  - A denied ACQUIRE ... WAIT is answered at once, never waits (STATS
    waiters stays 0) and never reaches Redis (MONITOR sees nothing of it).
  - OWNER shows a holder's client-id only when the broker knows the holder
    is a session of the asking app: other apps' holders and holders on
    another broker show "?".
  - A token of no app is refused as a wrong token is, and counted.
  - auth_token alone works as in version 1; beside acl_file it is the app
    "default" with every key.
  - SIGHUP: a changed file binds new AUTHs, live sessions keep the patterns
    they authenticated with; a broken file keeps the old list, logged.
  - A bad file stops the broker from starting (and -t says why).
  - STATS and /metrics count sessions per app and denials.
"""

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import harness
from harness import BrokerTestCase, free_port, wait_until, UUID_RE
from test_metrics import http_req, parse_metrics

TOK_A = "alpha-" + "1" * 40
TOK_B = "beta-" + "2" * 40
TOK_C = "gamma-" + "3" * 40
ADMIN = "admin-token"


def sha(tok):
    return hashlib.sha256(tok.encode()).hexdigest()


ACL = ("# two apps\n"
       "app alpha token-sha256 %s keys alpha:*,common:*\n"
       "\n"
       "app beta token-sha256 %s keys beta:*,common:*\n"
       % (sha(TOK_A), sha(TOK_B)))


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class AclCase(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="lbt-acl-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.acl_path = os.path.join(self.dir, "acl")

    def write_acl(self, text):
        tmp = self.acl_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.acl_path)

    def start_acl_broker(self, *extra, text=ACL, auth=TOK_A, **kw):
        self.write_acl(text)
        return self.start_broker("--acl_file", self.acl_path, *extra,
                                 auth=auth, **kw)

    def app(self, b, token):
        c = self.connect(b)
        self.assertEqual(c.req("AUTH " + token), "OK")
        return c

    def reload(self, b):
        """SIGHUP; returns the log lines it wrote."""
        mark = len(b.log())
        os.kill(b.pid, signal.SIGHUP)
        wait_until(lambda: re.search(r"configuration reloaded|reload failed",
                                     b.log()[mark:]), 5.0, what="reload")
        return b.log()[mark:]


class TestDenied(AclCase):
    def setUp(self):
        super().setUp()
        self.b = self.start_acl_broker()
        self.a = self.app(self.b, TOK_A)
        self.c = self.app(self.b, TOK_B)

    def test_each_app_locks_only_its_own_keys(self):
        a, c = self.a, self.c
        ta = self.assertToken(a.req("ACQUIRE alpha:1"))
        tb = self.assertToken(c.req("ACQUIRE beta:1"))
        self.assertToken(a.req("ACQUIRE common:x SHARED"))
        self.assertToken(c.req("ACQUIRE common:x SHARED"))
        for cl, key in ((a, "beta:1"), (a, "beta:new"), (c, "alpha:1"),
                        (c, "other"), (a, "Alpha:1"), (a, "xalpha:1")):
            for line in ("ACQUIRE %s", "ACQUIRE %s WAIT 100",
                         "ACQUIRE %s SHARED", "ACQUIRE %s LIMIT 2",
                         "RELEASE %s", "RELEASE %s LINGER 100",
                         "RENEW %s", "RENEW %s TTL 5000", "OWNER %s"):
                self.assertErr(cl.req(line % key), "DENIED")
        # the holders were not touched
        self.assertEqual(a.req("ACQUIRE alpha:1"), "OK %d" % ta)
        self.assertEqual(a.req("RENEW alpha:1 TTL 9000"), "OK 9000")
        self.assertEqual(a.req("RELEASE alpha:1"), "OK 1")
        self.assertEqual(a.req("RELEASE alpha:1"), "OK 0")
        self.assertRegex(c.req("OWNER beta:1"), r"\AOK %s [0-9]+ %d\Z"
                         % (UUID_RE, tb))
        self.assertEqual(c.req("RELEASE beta:1 LINGER 200"), "OK 0")
        self.assertEqual(a.req("HELD"), "OK 1 common:x")
        st = self.stats(a)
        self.assertEqual(st["denials"], str(6 * 9))
        self.assertEqual(st["app_denials"], "alpha:36,beta:18")
        # bad arguments are still BADARG, not DENIED
        self.assertErr(a.req("ACQUIRE beta:1 TTL 0"), "BADARG")

    def test_denied_wait_never_queues_nor_reaches_redis(self):
        a, c = self.a, self.c
        aid = a.hello("alpha-worker")
        self.assertToken(c.req("ACQUIRE beta:held TTL 600000"))
        mon = socket.create_connection(("127.0.0.1", self.redis.port),
                                       timeout=5)
        self.addCleanup(mon.close)
        mon.sendall(b"MONITOR\r\n")
        seen = b""
        while b"+OK\r\n" not in seen:
            seen += mon.recv(4096)
        t0 = time.monotonic()
        self.assertErr(a.req("ACQUIRE beta:held WAIT 5000"), "DENIED")
        self.assertErr(a.req("ACQUIRE beta:free WAIT 5000"), "DENIED")
        self.assertLess(time.monotonic() - t0, 1.0, "a denied WAIT waited")
        self.assertEqual(self.stats(a)["waiters"], "0")
        self.assertEqual(self.redis.cli("ECHO", "acl-marker"), "acl-marker")
        out = b""
        while b"acl-marker" not in out:
            out += mon.recv(65536)
        out = out.decode("latin-1")
        self.assertNotIn(aid, out, "the denied session reached Redis")
        self.assertNotIn("beta:free", out)
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("beta:free")),
                         0)
        # the session goes on: its own keys still work
        self.assertToken(a.req("ACQUIRE alpha:after"))

    def test_a_session_never_changes_app(self):
        self.assertEqual(self.a.req("AUTH " + TOK_A), "OK")
        self.assertErr(self.a.req("AUTH " + TOK_B), "BADARG")
        self.assertErr(self.a.req("ACQUIRE beta:1"), "DENIED")
        self.assertToken(self.a.req("ACQUIRE alpha:1"))


class TestOwnerHides(AclCase):
    def test_other_apps_holders_show_no_client_id(self):
        b = self.start_acl_broker()
        a, a2 = self.app(b, TOK_A), self.app(b, TOK_A)
        c = self.app(b, TOK_B)
        aid, a2id, cid = a.hello(), a2.hello(), c.hello()
        tc = self.assertToken(c.req("ACQUIRE common:1"))
        ta = self.assertToken(a.req("ACQUIRE common:2"))
        # another app's holder: "?" for its client-id, TTL and token shown
        self.assertRegex(a.req("OWNER common:1"), r"\AOK \? [0-9]+ %d\Z" % tc)
        self.assertNotIn(cid, a.req("OWNER common:1"))
        # the same app's holder (another session of this broker): shown
        self.assertRegex(a2.req("OWNER common:2"), r"\AOK %s [0-9]+ %d\Z"
                         % (aid, ta))
        self.assertRegex(a.req("OWNER common:2"), r"\AOK %s " % aid)
        self.assertRegex(c.req("OWNER common:2"), r"\AOK \? [0-9]+ %d\Z" % ta)
        self.assertEqual(a.req("OWNER common:free"), "OK -")
        # shared holds: each holder shown or hidden on its own
        self.assertToken(a.req("ACQUIRE common:r SHARED"))
        self.assertToken(c.req("ACQUIRE common:r SHARED"))
        self.assertToken(a2.req("ACQUIRE common:r SHARED"))
        r = a.req("OWNER common:r").split()
        self.assertEqual(r[:3], ["OK", "SHARED", "3"])
        owners = r[3::3]
        self.assertEqual(sorted(owners), sorted([aid, a2id, "?"]))
        r = c.req("OWNER common:r").split()
        self.assertEqual(sorted(r[3::3]), sorted([cid, "?", "?"]))
        # a lingering release keeps the releaser's id, shown to its app
        self.assertEqual(a.req("RELEASE common:2 LINGER 5000"), "OK 0")
        self.assertRegex(a2.req("OWNER common:2"), r"\AOK %s " % aid)
        self.assertRegex(c.req("OWNER common:2"), r"\AOK \? ")

    def test_holder_on_another_broker_is_hidden_even_of_the_same_app(self):
        b1 = self.start_acl_broker()
        b2 = self.start_broker("--acl_file", self.acl_path, auth=TOK_A)
        a1, a2 = self.app(b1, TOK_A), self.app(b2, TOK_A)
        a2.hello()
        t = self.assertToken(a2.req("ACQUIRE alpha:x"))
        self.assertRegex(a1.req("OWNER alpha:x"), r"\AOK \? [0-9]+ %d\Z" % t)


class TestAuth(AclCase):
    def test_a_token_of_no_app_is_refused_and_counted(self):
        b = self.start_acl_broker()
        x = self.connect(b)
        for tok in (TOK_C, sha(TOK_A), TOK_A + "x", TOK_A[:-1], ADMIN):
            self.assertErr(x.req("AUTH " + tok), "NOAUTH")
        self.assertErr(x.req("ACQUIRE alpha:1"), "NOAUTH")
        self.assertErr(x.req("OWNER alpha:1"), "NOAUTH")
        self.assertErr(x.req("STATS"), "NOAUTH")
        a = self.app(b, TOK_A)
        self.assertEqual(self.stats(a)["auth_failures"], "5")
        self.assertIn("wrong AUTH token", b.log())
        # AUTH is needed even though no auth_token is set
        self.assertErr(self.connect(b).req("HELD"), "NOAUTH")

    def test_auth_token_alone_works_as_before(self):
        b = self.start_broker("--auth_token", ADMIN)
        x = self.connect(b)
        self.assertErr(x.req("ACQUIRE anything"), "NOAUTH")
        self.assertErr(x.req("AUTH " + TOK_A), "NOAUTH")
        self.assertEqual(x.req("AUTH " + ADMIN), "OK")
        for key in ("alpha:1", "beta:1", "anything"):
            self.assertToken(x.req("ACQUIRE " + key))
            self.assertEqual(x.req("RELEASE " + key), "OK 0")
        # OWNER shows every session's client-id, as in version 1
        c = self.app(b, ADMIN)
        cid = c.hello()
        self.assertToken(c.req("ACQUIRE beta:1"))
        self.assertRegex(x.req("OWNER beta:1"), r"\AOK %s " % cid)
        st = self.stats(x)
        self.assertEqual((st["denials"], st["app_sessions"],
                          st["app_denials"]), ("0", "-", "-"))
        self.assertEqual(st["auth_failures"], "1")

    def test_auth_token_beside_acl_file_is_app_default_with_every_key(self):
        b = self.start_acl_broker("--auth_token", ADMIN)
        d, a = self.app(b, ADMIN), self.app(b, TOK_A)
        for key in ("alpha:1", "beta:1", "common:1", "anything"):
            self.assertToken(d.req("ACQUIRE " + key))
        self.assertErr(a.req("ACQUIRE anything"), "DENIED")
        wait_until(lambda: self.stats(d)["app_sessions"] ==
                   "alpha:1,beta:0,default:1", 3.0, what="app_sessions")
        # default is an app too: other apps' holders are hidden from it
        a.hello()
        self.assertToken(a.req("ACQUIRE alpha:2"))
        self.assertRegex(d.req("OWNER alpha:2"), r"\AOK \? ")

    def test_no_auth_when_neither_is_set(self):
        b = self.start_broker()
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE anything"))
        self.assertErr(c.req("AUTH x"), "BADARG")
        self.assertEqual(self.stats(c)["app_sessions"], "-")


class TestResume(AclCase):
    def test_only_a_session_of_the_same_app_resumes(self):
        """The record keeps its session's app: a session of another app
        that knows the secret is refused (review of issue 15: it took the
        other app's locks over and could hold them for ever), and the
        old session is left as it was, for its own app to resume."""
        b = self.start_acl_broker()
        a = self.app(b, TOK_A)
        r = a.req("HELLO w GRACE 10000").split()
        cid, secret = r[1], r[3]
        self.assertToken(a.req("ACQUIRE alpha:g"))
        a.close()
        c = self.app(b, TOK_B)
        self.assertEqual(c.req("RESUME %s %s" % (cid, secret)),
                         "ERR DENIED the session is another app's")
        self.assertErr(self.app(b, TOK_B).req("RESUME %s x" % cid),
                       "NOAUTH")            # the secret is checked first
        d = self.app(b, TOK_A)
        self.assertEqual(d.req("RESUME %s %s" % (cid, secret)),
                         "OK 1 alpha:g")
        self.assertRegex(d.req("RENEW alpha:g TTL 5000"), r"\AOK 5000\Z")
        self.assertEqual(d.req("RELEASE alpha:g"), "OK 0")


class TestReload(AclCase):
    def test_sighup_binds_new_auths_live_sessions_keep_their_patterns(self):
        b = self.start_acl_broker()
        old = self.app(b, TOK_A)
        self.write_acl(
            "app alpha token-sha256 %s keys alpha2:*\n"
            "app gamma token-sha256 %s keys gamma:*\n"
            % (sha(TOK_A), sha(TOK_C)))
        self.assertIn("configuration reloaded", self.reload(b))
        new = self.app(b, TOK_A)
        self.assertToken(new.req("ACQUIRE alpha2:1"))
        self.assertErr(new.req("ACQUIRE alpha:1"), "DENIED")
        self.assertToken(old.req("ACQUIRE alpha:1"))
        self.assertErr(old.req("ACQUIRE alpha2:1"), "DENIED")
        g = self.app(b, TOK_C)
        self.assertToken(g.req("ACQUIRE gamma:1"))
        self.assertErr(self.connect(b).req("AUTH " + TOK_B), "NOAUTH")
        # a live session of a removed app keeps going too
        # AUTH again with its token: the current file's patterns
        self.assertEqual(old.req("AUTH " + TOK_A), "OK")
        self.assertErr(old.req("ACQUIRE alpha:2"), "DENIED")
        self.assertEqual(old.req("RELEASE alpha:1"), "OK 0")
        wait_until(lambda: self.stats(g)["app_sessions"] ==
                   "alpha:2,beta:0,gamma:1", 3.0, what="app_sessions")

    def test_a_broken_file_keeps_the_old_list_and_says_why(self):
        b = self.start_acl_broker()
        live = self.app(b, TOK_B)
        self.write_acl(ACL + "app gamma token-sha256 %s keys [g]*\n"
                       % sha(TOK_C))
        log = self.reload(b)
        failed = [l for l in log.splitlines() if "reload failed" in l]
        self.assertEqual(len(failed), 1, log)
        self.assertIn("%s:5:" % self.acl_path, failed[0])
        self.assertIn("character classes", failed[0])
        self.assertTrue(b.alive())
        self.assertErr(self.connect(b).req("AUTH " + TOK_C), "NOAUTH")
        self.assertToken(self.app(b, TOK_A).req("ACQUIRE alpha:1"))
        self.assertToken(live.req("ACQUIRE beta:1"))
        # a missing file fails the reload the same way
        os.unlink(self.acl_path)
        log = self.reload(b)
        self.assertRegex(log, r"reload failed.*%s: No such file"
                         % re.escape(self.acl_path))
        self.assertToken(self.app(b, TOK_B).req("ACQUIRE beta:2"))


class TestStart(AclCase):
    def run_broker(self, *args):
        return subprocess.run(
            [harness.BROKER_BIN, "-b", "127.0.0.1", "-p", str(free_port()),
             "-r", self.redis.addr, "--prefix", self.prefix] + list(args),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, universal_newlines=True, timeout=30)

    def test_a_bad_file_stops_the_start_and_t_says_why(self):
        cases = [
            ("app alpha token-sha256 %s keys a:*\nbogus\n" % sha(TOK_A),
             ":2: 'bogus' is not a known line"),
            ("\napp a token-sha256 abc keys a:*\n", ":2: the token hash"),
            (ACL + "app alpha token-sha256 %s keys x\n" % sha(TOK_C),
             ":5: app 'alpha' is defined twice (first on line 2)"),
        ]
        for text, why in cases:
            self.write_acl(text)
            for extra in ([], ["-t"]):
                r = self.run_broker("--acl_file", self.acl_path, *extra)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(self.acl_path + why, r.stderr)
        r = self.run_broker("--acl_file", os.path.join(self.dir, "none"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("No such file", r.stderr)
        # auth_token must not clash with the file
        self.write_acl("app default token-sha256 %s keys x\n" % sha(TOK_A))
        r = self.run_broker("--acl_file", self.acl_path, "--auth_token",
                            ADMIN, "-t")
        self.assertEqual(r.returncode, 2)
        self.assertIn("'default' is taken by auth_token", r.stderr)
        self.write_acl(ACL)
        r = self.run_broker("--acl_file", self.acl_path, "--auth_token",
                            TOK_B, "-t")
        self.assertEqual(r.returncode, 2)
        self.assertIn("app 'beta' has auth_token's token", r.stderr)
        r = self.run_broker("--acl_file", self.acl_path, "-t")
        self.assertEqual(r.returncode, 0, r.stderr)


class TestCounters(AclCase):
    def test_stats_and_metrics_count_sessions_and_denials_per_app(self):
        for attempt in range(3):
            mport = free_port()
            try:
                b = self.start_acl_broker("--metrics_port", mport)
                break
            except AssertionError as e:
                if attempt == 2 or "metrics" not in str(e):
                    raise
        a1, a2, c = (self.app(b, TOK_A), self.app(b, TOK_A),
                     self.app(b, TOK_B))
        self.assertErr(a1.req("ACQUIRE beta:1"), "DENIED")
        self.assertErr(a2.req("OWNER beta:1"), "DENIED")
        self.assertErr(c.req("RELEASE alpha:1"), "DENIED")
        wait_until(lambda: self.stats(c)["app_sessions"] == "alpha:2,beta:1",
                   3.0, what="app_sessions")
        st = self.stats(c)
        self.assertEqual(st["denials"], "3")
        self.assertEqual(st["app_denials"], "alpha:2,beta:1")
        names = list(st)
        i = names.index("denials")      # new fields come after the old
        self.assertEqual(names[i:i + 3], ["denials", "app_sessions",
                                          "app_denials"])
        self.assertGreater(i, names.index("grace_expired"))
        st_, _, body = http_req(mport)
        self.assertEqual(st_, 200)
        m = parse_metrics(body)
        self.assertEqual(m["lockbroker_denials_total"], 3)
        self.assertEqual(m['lockbroker_app_sessions{app="alpha"}'], 2)
        self.assertEqual(m['lockbroker_app_sessions{app="beta"}'], 1)
        self.assertEqual(m['lockbroker_app_denials_total{app="alpha"}'], 2)
        self.assertEqual(m['lockbroker_app_denials_total{app="beta"}'], 1)
        self.assertIn("# TYPE lockbroker_app_sessions gauge", body)
        self.assertIn("# TYPE lockbroker_app_denials_total counter", body)
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=body,
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT,
                               universal_newlines=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout)
        a1.close()
        wait_until(lambda: self.stats(c)["app_sessions"] == "alpha:1,beta:1",
                   3.0, what="a closed session uncounted")


if __name__ == "__main__":
    unittest.main()
