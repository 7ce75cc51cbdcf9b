"""
test_fenced.py - writes fenced by a hold (protocol 1.2): SETIF <datakey>
<value> HOLDING <key> <token> [PX <ms>|KEEPTTL] and DELIF <datakey>
HOLDING <key> <token> write (or delete) a Redis string only if that hold
is alive, in one script call.  Real Redis, real brokers; the data is read
back with plain Redis commands, as an app's own client would.

  - A holder cut off past its TTL (its broker paused until the key
    expired, or its key deleted) while another session took the key is
    refused ERR NOTHELD, and the data is left as it was.
  - The current holder writes: a string with no TTL, PX honoured, KEEPTTL
    keeping the TTL the key has; DELIF deletes (OK for an absent key too).
  - Any session, on another broker and holding nothing, writes with a
    live hold's token; shared holders and permits each write with their
    own; a lingering release has ended its hold.
  - Off by default (ERR DENIED, nothing written); the broker's own
    "<prefix>:" names are refused even with fenced_write_keys "*"; with
    an acl_file an app writes its own patterns' keys only; SIGHUP applies
    a new fenced_write_keys to live sessions, a bad one fails the reload
    (and the start: -t exits 2).
  - A full Redis (maxmemory) refuses SETIF as it refuses a grant, and
    still runs DELIF, with the function library and without (EVALSHA).
  - Bad input gets a clear ERR, and the session goes on.
"""

import re
import signal
import subprocess
import unittest

import harness
from harness import BrokerTestCase, wait_until
from test_acl import TOK_A, TOK_B, AclCase
from test_ops import ConfBroker

KEYS = "fw:*,orders:*"          # fenced_write_keys of most tests


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class FencedCase(BrokerTestCase):

    def fenced_broker(self, *extra, keys=KEYS, **kw):
        return self.start_broker("--fenced_write_keys", keys, *extra, **kw)

    def get(self, key, redis=None):
        return (redis or self.redis).cli("GET", key)

    def pttl(self, key, redis=None):
        return (redis or self.redis).cli("PTTL", key)


class TestFencedWrites(FencedCase):

    def setUp(self):
        super().setUp()
        self.b1 = self.fenced_broker()
        self.b2 = self.fenced_broker()

    def test_holder_cut_off_past_its_ttl_is_refused(self):
        """Its broker stopped (a pause past the TTL: the key expires in
        Redis) while another session takes the key: when it goes on, the
        old holder's write is refused and the data stays."""
        holder = self.connect(self.b1)
        t1 = self.assertToken(holder.req("ACQUIRE job TTL 600"))
        self.assertEqual(holder.req("SETIF fw:job v1 HOLDING job %d" % t1),
                         "OK")
        self.b1.pause()
        try:
            wait_until(lambda: self.redis.cli(
                "EXISTS", self.lock_key("job")) == 0, 5.0,
                what="the paused holder's key to expire")
            thief = self.connect(self.b2)
            t2 = self.assertToken(thief.req("ACQUIRE job"))
            self.assertGreater(t2, t1)
            self.assertEqual(thief.req("SETIF fw:job v2 HOLDING job %d"
                                       % t2), "OK")
        finally:
            self.b1.resume()
        self.assertErr(holder.req("SETIF fw:job stale HOLDING job %d" % t1),
                       "NOTHELD")
        self.assertErr(holder.req("DELIF fw:job HOLDING job %d" % t1),
                       "NOTHELD")
        self.assertEqual(self.get("fw:job"), "v2")

    def test_holder_whose_key_was_deleted_and_taken_is_refused(self):
        """redis-cli DEL of the lock key (or its expiry set short), then
        another session's grant: the first holder writes nothing."""
        for how in ("DEL", "PEXPIRE"):
            with self.subTest(how=how):
                key = "k" + how.lower()
                holder = self.connect(self.b1)
                t1 = self.assertToken(holder.req("ACQUIRE %s" % key))
                self.assertEqual(holder.req("SETIF fw:%s before HOLDING "
                                            "%s %d" % (key, key, t1)), "OK")
                if how == "DEL":
                    self.redis.cli("DEL", self.lock_key(key))
                else:
                    self.redis.cli("PEXPIRE", self.lock_key(key), 1)
                    wait_until(lambda: self.redis.cli(
                        "EXISTS", self.lock_key(key)) == 0, 2.0,
                        what="the key to expire")
                thief = self.connect(self.b2)
                t2 = self.assertToken(thief.req("ACQUIRE %s" % key))
                self.assertErr(holder.req("SETIF fw:%s after HOLDING %s %d"
                                          % (key, key, t1)), "NOTHELD")
                self.assertEqual(self.get("fw:" + key), "before")
                self.assertEqual(thief.req("SETIF fw:%s new HOLDING %s %d"
                                           % (key, key, t2)), "OK")
                self.assertEqual(self.get("fw:" + key), "new")

    def test_current_holder_writes_with_or_without_a_ttl(self):
        c = self.connect(self.b1)
        t = self.assertToken(c.req("ACQUIRE orders:7"))
        fence = "HOLDING orders:7 %d" % t
        self.assertEqual(c.req("SETIF orders:7:state paid %s" % fence), "OK")
        self.assertEqual(self.get("orders:7:state"), "paid")
        self.assertEqual(self.pttl("orders:7:state"), -1)
        self.assertEqual(c.req("SETIF orders:7:state shipped %s PX 5000"
                               % fence), "OK")
        self.assertEqual(self.get("orders:7:state"), "shipped")
        self.assertTrue(0 < self.pttl("orders:7:state") <= 5000)
        self.assertEqual(c.req("SETIF orders:7:state done %s KEEPTTL"
                               % fence), "OK")
        self.assertEqual(self.get("orders:7:state"), "done")
        self.assertTrue(0 < self.pttl("orders:7:state") <= 5000)
        # without PX or KEEPTTL, as SET: the TTL goes
        self.assertEqual(c.req("SETIF orders:7:state again %s" % fence),
                         "OK")
        self.assertEqual(self.pttl("orders:7:state"), -1)
        # PX is honoured: the key expires
        self.assertEqual(c.req("SETIF fw:short x %s PX 100" % fence), "OK")
        wait_until(lambda: self.redis.cli("EXISTS", "fw:short") == 0, 3.0,
                   what="fw:short to expire")
        # the longest value; a data key of another type is replaced
        big = "~" * 1024
        self.redis.cli("RPUSH", "fw:list", "a")
        self.assertEqual(c.req("SETIF fw:list %s %s" % (big, fence)), "OK")
        self.assertEqual(self.get("fw:list"), big)
        self.assertEqual(c.req("PING"), "OK PONG")

    def test_delif(self):
        c = self.connect(self.b1)
        t = self.assertToken(c.req("ACQUIRE d"))
        self.redis.cli("SET", "fw:gone", "x")
        self.assertEqual(c.req("DELIF fw:gone HOLDING d %d" % t), "OK")
        self.assertEqual(self.redis.cli("EXISTS", "fw:gone"), 0)
        self.assertEqual(c.req("DELIF fw:gone HOLDING d %d" % t), "OK")
        self.redis.cli("SET", "fw:kept", "x")
        self.assertErr(c.req("DELIF fw:kept HOLDING d %d" % (t - 1)),
                       "NOTHELD")
        self.assertEqual(c.req("RELEASE d"), "OK 0")
        self.assertErr(c.req("DELIF fw:kept HOLDING d %d" % t), "NOTHELD")
        self.assertEqual(self.get("fw:kept"), "x")

    def test_any_session_on_another_broker_writes_with_the_token(self):
        holder = self.connect(self.b1)
        other = self.connect(self.b2)           # holds nothing
        t = self.assertToken(holder.req("ACQUIRE res"))
        self.assertEqual(other.req("SETIF fw:res by-other HOLDING res %d"
                                   % t), "OK")
        self.assertEqual(self.get("fw:res"), "by-other")
        self.assertEqual(other.req("HELD"), "OK 0")
        self.assertEqual(holder.req("RELEASE res"), "OK 0")
        self.assertErr(other.req("SETIF fw:res late HOLDING res %d" % t),
                       "NOTHELD")
        self.assertEqual(self.get("fw:res"), "by-other")

    def test_shared_holders_and_permits(self):
        a, b = self.connect(self.b1), self.connect(self.b2)
        for line in ("ACQUIRE cat SHARED", "ACQUIRE quota LIMIT 2"):
            key = line.split()[1]
            with self.subTest(kind=line):
                ta = self.assertToken(a.req(line))
                tb = self.assertToken(b.req(line))
                for who, t in (("a", ta), ("b", tb)):
                    self.assertEqual(a.req("SETIF fw:%s %s HOLDING %s %d"
                                           % (key, who, key, t)), "OK")
                    self.assertEqual(self.get("fw:" + key), who)
                self.assertEqual(b.req("RELEASE %s" % key), "OK 0")
                self.assertErr(a.req("SETIF fw:%s b2 HOLDING %s %d"
                                     % (key, key, tb)), "NOTHELD")
                self.assertEqual(self.get("fw:" + key), "b")
                self.assertEqual(b.req("SETIF fw:%s a2 HOLDING %s %d"
                                       % (key, key, ta)), "OK")
                self.assertEqual(self.get("fw:" + key), "a2")
                self.assertEqual(a.req("RELEASE %s" % key), "OK 0")

    def test_a_lingering_release_has_ended_its_hold(self):
        """RELEASE ... LINGER keeps the key taken but ends the hold, as
        CHECK answers STALE: its token writes nothing."""
        c = self.connect(self.b1)
        t = self.assertToken(c.req("ACQUIRE nightly"))
        self.assertEqual(c.req("RELEASE nightly LINGER 5000"), "OK 0")
        self.assertEqual(c.req("CHECK nightly %d" % t), "OK STALE -")
        self.assertErr(c.req("SETIF fw:n v HOLDING nightly %d" % t),
                       "NOTHELD")
        self.assertErr(c.req("DELIF fw:n HOLDING nightly %d" % t),
                       "NOTHELD")
        self.assertIsNone(self.get("fw:n"))
        # a lingering permit, beside a live one
        a, b = self.connect(self.b1), self.connect(self.b2)
        pa = self.assertToken(a.req("ACQUIRE sem LIMIT 2"))
        pb = self.assertToken(b.req("ACQUIRE sem LIMIT 2"))
        self.assertEqual(b.req("RELEASE sem LINGER 5000"), "OK 0")
        self.assertErr(a.req("SETIF fw:s b HOLDING sem %d" % pb), "NOTHELD")
        self.assertEqual(a.req("SETIF fw:s a HOLDING sem %d" % pa), "OK")
        self.assertEqual(self.get("fw:s"), "a")

    def test_right_after_an_early_hand_off(self):
        """A waiter of the same broker granted at once (before Redis heard
        of it: early hand-off) writes at once: the broker's update of
        Redis goes first on its connection; the holder before it writes
        nothing."""
        a, w1, w2 = (self.connect(self.b1) for _ in range(3))
        self.assertToken(a.req("ACQUIRE ho"))
        for i, w in enumerate((w1, w2)):
            w.send("ACQUIRE ho WAIT 5000")
            wait_until(lambda: self.stats(a)["waiters"] == str(i + 1), 2.0,
                       what="%d waiters" % (i + 1))
        # through Redis (handoff.lua), tokens set aside as w2 still waits
        self.assertEqual(a.req("RELEASE ho"), "OK 0")
        t1 = self.assertToken(w1.readline())
        w1.send("RELEASE ho")
        t2 = self.assertToken(w2.readline())
        self.assertEqual(w1.readline(), "OK 0")
        self.assertEqual(self.stats(a)["early_handoffs"], "1")
        self.assertGreater(t2, t1)
        self.assertEqual(w2.req("SETIF fw:ho next HOLDING ho %d" % t2), "OK")
        self.assertErr(w1.req("SETIF fw:ho prev HOLDING ho %d" % t1),
                       "NOTHELD")
        self.assertEqual(self.get("fw:ho"), "next")

    def test_bad_input_answers_err_and_the_session_goes_on(self):
        c = self.connect(self.b1)
        t = self.assertToken(c.req("ACQUIRE k"))
        for line in ("SETIF fw:a %s HOLDING k %d" % ("v" * 1025, t),
                     "SETIF fw:a v HOLDING k 0",
                     "SETIF fw:a v HOLDING k x1",
                     "SETIF fw:a v HOLDING k 9007199254740992",
                     "SETIF fw:a v k %d" % t,
                     "SETIF fw:a v OWNING k %d" % t,
                     "SETIF fw:a HOLDING k %d" % t,
                     "SETIF fw:a v HOLDING k %d PX 5 KEEPTTL" % t,
                     "SETIF fw:a v HOLDING k %d KEEPTTL PX 5" % t,
                     "SETIF fw:a v HOLDING k %d PX 0" % t,
                     "SETIF fw:a v HOLDING k %d TTL 5" % t,
                     "DELIF fw:a HOLDING k",
                     "DELIF fw:a HOLDING k %d KEEPTTL" % t,
                     "SETIF", "DELIF"):
            with self.subTest(line=line[:60]):
                self.assertErr(c.req(line), "BADARG")
        # a key not held: nothing written
        self.assertErr(c.req("SETIF fw:a v HOLDING nobody %d" % t),
                       "NOTHELD")
        self.assertIsNone(self.get("fw:a"))
        self.assertEqual(c.req("PING"), "OK PONG")
        self.assertEqual(c.req("SETIF fw:a v HOLDING k %d" % t), "OK")
        self.assertEqual(c.req("RELEASE k"), "OK 0")


class TestWhichDataKeys(FencedCase):

    def test_off_by_default(self):
        b = self.start_broker()
        c = self.connect(b)
        t = self.assertToken(c.req("ACQUIRE k"))
        for line in ("SETIF fw:x v HOLDING k %d" % t,
                     "SETIF x v HOLDING k %d PX 100" % t,
                     "DELIF fw:x HOLDING k %d" % t):
            self.assertErr(c.req(line), "DENIED")
        self.assertIn("fenced_write_keys", c.req("DELIF x HOLDING k %d" % t))
        self.assertEqual(self.redis.cli("EXISTS", "fw:x", "x"), 0)
        self.assertEqual(self.stats(c)["denials"], "4")
        self.assertEqual(c.req("RELEASE k"), "OK 0")

    def test_outside_the_globs_is_denied(self):
        b = self.fenced_broker(keys="fw:*,lit\\*,o?")
        c = self.connect(b)
        t = self.assertToken(c.req("ACQUIRE k"))
        for key in ("fw:1", "fw:a/b:c", "lit*", "o1"):
            self.assertEqual(c.req("SETIF %s v HOLDING k %d" % (key, t)),
                             "OK", key)
        for key in ("fw", "xfw:1", "FW:1", "litx", "o12", "k"):
            self.assertErr(c.req("SETIF %s v HOLDING k %d" % (key, t)),
                           "DENIED")
            self.assertIsNone(self.get(key))

    def test_the_broker_namespace_is_never_a_data_key(self):
        b = self.fenced_broker(keys="*")
        c = self.connect(b)
        t = self.assertToken(c.req("ACQUIRE k"))
        lock = self.lock_key("k")
        for key in (lock, self.prefix + ":fence", self.prefix + ":x"):
            self.assertErr(c.req("SETIF %s forged:1 HOLDING k %d"
                                 % (key, t)), "DENIED")
            self.assertErr(c.req("DELIF %s HOLDING k %d" % (key, t)),
                           "DENIED")
        self.assertRegex(self.get(lock), r":%d\Z" % t)
        # the same letters without the colon are an app's name
        self.assertEqual(c.req("SETIF %sdata v HOLDING k %d"
                               % (self.prefix, t)), "OK")
        self.assertEqual(c.req("RELEASE k"), "OK 0")

    def test_bad_globs_refused_at_start(self):
        for bad in ("a,,b", "x[1]", "a,", "a b"):
            with self.subTest(globs=bad):
                r = subprocess.run([harness.BROKER_BIN, "-t",
                                    "--fenced_write_keys", bad],
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=10,
                                   universal_newlines=True)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("fenced_write_keys: ", r.stderr)
        r = subprocess.run([harness.BROKER_BIN, "-t", "--fenced_write_keys",
                            "fw:*,o\\,k"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=10,
                           universal_newlines=True)
        self.assertEqual(r.returncode, 0, r.stderr)


class TestReload(FencedCase):

    def test_sighup_applies_a_new_list_to_live_sessions(self):
        b = ConfBroker(self.redis.addr, self.prefix,
                       settings={"fenced_write_keys": "a:*"})
        self.addCleanup(b.close)
        c = self.connect(b)
        t = self.assertToken(c.req("ACQUIRE k"))
        self.assertEqual(c.req("SETIF a:1 v HOLDING k %d" % t), "OK")
        self.assertErr(c.req("SETIF b:1 v HOLDING k %d" % t), "DENIED")

        def reload():
            mark = len(b.log())
            b.signal(signal.SIGHUP)
            wait_until(lambda: re.search(
                r"configuration reloaded|reload failed", b.log()[mark:]),
                5.0, what="reload")
            return b.log()[mark:]

        b.rewrite(fenced_write_keys="b:*")
        self.assertIn("configuration reloaded", reload())
        self.assertEqual(c.req("SETIF b:1 v HOLDING k %d" % t), "OK")
        self.assertErr(c.req("SETIF a:1 w HOLDING k %d" % t), "DENIED")
        # a bad list fails the reload: the one in force stays
        b.rewrite(fenced_write_keys="b:[0-9]")
        self.assertIn("fenced_write_keys", reload())
        self.assertEqual(c.req("SETIF b:2 v HOLDING k %d" % t), "OK")
        # empty: off again
        b.rewrite(fenced_write_keys="")
        self.assertIn("configuration reloaded", reload())
        self.assertErr(c.req("SETIF b:3 v HOLDING k %d" % t), "DENIED")
        self.assertEqual(self.redis.cli("EXISTS", "a:1", "b:1", "b:2"), 3)
        self.assertEqual(self.get("a:1"), "v")


class TestAppGlobs(AclCase):
    """With an acl_file, an app's session writes the keys of its app's
    patterns (fenced_write_keys is for sessions of no app), never the
    broker's own names; the lock key is checked as CHECK's is."""

    def test_app_patterns_decide(self):
        b = self.start_acl_broker("--fenced_write_keys", "beta:*")
        a = self.app(b, TOK_A)
        beta = self.app(b, TOK_B)
        t = self.assertToken(a.req("ACQUIRE alpha:lock"))
        self.assertEqual(a.req("SETIF alpha:data v HOLDING alpha:lock %d"
                               % t), "OK")
        self.assertEqual(a.req("SETIF common:data v HOLDING alpha:lock %d"
                               % t), "OK")
        self.assertRegex(a.req("SETIF beta:data v HOLDING alpha:lock %d"
                               % t), r"\AERR DENIED app alpha ")
        # the lock key outside the app's patterns: as CHECK
        tb = self.assertToken(beta.req("ACQUIRE beta:lock"))
        self.assertErr(a.req("CHECK beta:lock %d" % tb), "DENIED")
        self.assertErr(a.req("SETIF alpha:data w HOLDING beta:lock %d"
                             % tb), "DENIED")
        self.assertErr(beta.req("DELIF alpha:data HOLDING alpha:lock %d"
                                % t), "DENIED")
        self.assertEqual(self.redis.cli("GET", "alpha:data"), "v")
        self.assertEqual(self.redis.cli("EXISTS", "beta:data"), 0)

    def test_an_app_with_every_key_still_not_the_broker_namespace(self):
        b = self.start_acl_broker("--auth_token", "dflt-token",
                                  auth="dflt-token")
        c = self.app(b, "dflt-token")       # the app "default": "*"
        t = self.assertToken(c.req("ACQUIRE any"))
        self.assertEqual(c.req("SETIF any:data v HOLDING any %d" % t), "OK")
        self.assertErr(c.req("SETIF %s:lock:any x HOLDING any %d"
                             % (self.prefix, t)), "DENIED")
        self.assertRegex(self.redis.cli("GET", self.lock_key("any")),
                         r":%d\Z" % t)


class TestUnderMaxmemory(FencedCase):
    """A Redis at maxmemory with noeviction refuses SETIF as it refuses
    a grant (ERR UNAVAILABLE, nothing written), and still runs DELIF, as it
    runs a release."""

    EXTRA = ()

    def test_setif_refused_delif_runs(self):
        own = self.start_redis(*self.EXTRA)
        self.addCleanup(lambda: own.cli("CONFIG", "SET", "maxmemory", "0"))
        b = self.fenced_broker(redis=own)
        c = self.connect(b)
        t = self.assertToken(c.req("ACQUIRE m"))
        self.assertEqual(c.req("SETIF fw:m before HOLDING m %d" % t), "OK")
        self.assertEqual(c.req("SETIF fw:d x HOLDING m %d" % t), "OK")
        own.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        own.cli("CONFIG", "SET", "maxmemory", "1")
        self.assertErr(c.req("ACQUIRE m2"), "UNAVAILABLE")   # a write
        self.assertErr(c.req("SETIF fw:m after HOLDING m %d" % t),
                       "UNAVAILABLE")
        self.assertEqual(own.cli("GET", "fw:m"), "before")
        self.assertEqual(c.req("DELIF fw:d HOLDING m %d" % t), "OK")
        self.assertEqual(own.cli("EXISTS", "fw:d"), 0)
        self.assertErr(c.req("DELIF fw:m HOLDING m %d" % (t + 1)),
                       "NOTHELD")
        self.assertEqual(own.cli("GET", "fw:m"), "before")
        own.cli("CONFIG", "SET", "maxmemory", "0")
        self.assertEqual(c.req("SETIF fw:m after HOLDING m %d" % t), "OK")
        self.assertEqual(own.cli("GET", "fw:m"), "after")


class TestUnderMaxmemoryEvalsha(TestUnderMaxmemory):
    """The same on a Redis without functions (as before Redis 7)."""

    EXTRA = ("--rename-command", "FUNCTION", "")


if __name__ == "__main__":
    unittest.main()
