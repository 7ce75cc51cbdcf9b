"""
test_protocol.py - the wire protocol, byte for byte: framing, line limits,
argument grammar, reply shapes, HELLO/PING/QUIT/HELD/STATS/OWNER.
"""

import re
import time
import unittest

import harness
from harness import UUID_RE, BrokerTestCase

ERR_CODES = ("BADCMD", "BADARG", "TOOLONG", "NOAUTH", "NOTHELD", "LOST",
             "UNAVAILABLE", "LIMIT")


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class ProtoCase(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.b = self.start_broker()
        self.c = self.connect(self.b)


class TestFraming(ProtoCase):
    def test_ping(self):
        self.assertEqual(self.c.req("PING"), "OK PONG")

    def test_crlf_line_end_is_accepted_and_cr_dropped(self):
        self.c.sendraw(b"PING\r\n")
        self.assertEqual(self.c.readline(), "OK PONG")
        self.c.sendraw(b"ACQUIRE crkey\r\n")
        self.assertToken(self.c.readline())
        # The key is "crkey", not "crkey\r".
        self.assertEqual(self.c.req("HELD"), "OK 1 crkey")
        self.assertIsNotNone(self.redis.cli("GET", self.lock_key("crkey")))

    def test_cr_not_before_lf_is_badarg(self):
        self.assertErr(self.c.req(b"PI\rNG"), "BADARG")
        # Only the one CR right before the LF is dropped.
        self.c.sendraw(b"PING\r\r\n")
        self.assertErr(self.c.readline(), "BADARG")
        self.assertEqual(self.c.req("PING"), "OK PONG")

    def test_empty_and_blank_lines_get_no_reply(self):
        self.c.sendraw(b"\n\r\n   \n\t \t\r\n")
        self.assertTrue(self.c.no_reply(0.3), "a blank line got a reply")
        self.assertEqual(self.c.req("PING"), "OK PONG")
        self.assertTrue(self.c.no_reply(0.1))

    def test_verbs_and_options_are_case_insensitive(self):
        self.assertEqual(self.c.req("ping"), "OK PONG")
        self.assertEqual(self.c.req("PiNg"), "OK PONG")
        self.assertToken(self.c.req("acquire k1 ttl 4000 wait 0"))
        ttl = int(self.c.req("owner k1").split(" ")[2])
        self.assertTrue(3000 < ttl <= 4000, ttl)
        self.assertEqual(self.c.req("Held"), "OK 1 k1")
        self.assertEqual(self.c.req("rElEaSe k1"), "OK 0")

    def test_keys_are_case_sensitive(self):
        other = self.connect(self.b)
        self.assertToken(self.c.req("ACQUIRE Key"))
        self.assertToken(other.req("ACQUIRE key"))
        self.assertEqual(other.req("ACQUIRE Key"), "BUSY")
        self.assertEqual(self.c.req("HELD"), "OK 1 Key")
        self.assertEqual(other.req("HELD"), "OK 1 key")
        self.assertIsNotNone(self.redis.cli("GET", self.lock_key("Key")))
        self.assertIsNotNone(self.redis.cli("GET", self.lock_key("key")))

    def test_spaces_and_tabs_separate_words(self):
        self.assertToken(self.c.req("\t ACQUIRE \t k1\t\tTTL  5000 \t"))
        ttl = int(self.c.req("OWNER\tk1").split(" ")[2])
        self.assertTrue(4000 < ttl <= 5000, ttl)
        self.assertEqual(self.c.req("  HELD  "), "OK 1 k1")

    def test_pipelined_requests_answered_in_order(self):
        self.c.sendraw(b"PING\nHELD\nACQUIRE pk\nHELD\nRELEASE pk\n")
        r = [self.c.readline() for _ in range(5)]
        self.assertEqual(r[0], "OK PONG")
        self.assertEqual(r[1], "OK 0")
        self.assertToken(r[2])
        self.assertEqual(r[3], "OK 1 pk")
        self.assertEqual(r[4], "OK 0")
        self.assertTrue(self.c.no_reply(0.1))

    def test_pipelined_errors_and_blank_lines_keep_order(self):
        self.c.sendraw(b"PING\nFROB\n\nACQUIRE\r\nPING \x01\nHELD\n")
        self.assertEqual(self.c.readline(), "OK PONG")
        self.assertErr(self.c.readline(), "BADCMD")
        self.assertErr(self.c.readline(), "BADARG")
        self.assertErr(self.c.readline(), "BADARG")
        self.assertEqual(self.c.readline(), "OK 0")
        self.assertTrue(self.c.no_reply(0.1))

    def test_long_pipeline_keeps_order(self):
        lines = []
        for i in range(300):
            lines.append("ACQUIRE p%d" % (i % 7))
            lines.append("RELEASE p%d" % (i % 7))
            lines.append("PING")
        self.c.sendraw("".join(l + "\n" for l in lines))
        for l in lines:
            r = self.c.readline()
            if l.startswith("ACQUIRE"):
                self.assertToken(r)
            elif l.startswith("RELEASE"):
                self.assertEqual(r, "OK 0", l)
            else:
                self.assertEqual(r, "OK PONG")
        self.assertEqual(self.c.req("HELD"), "OK 0")

    def test_request_split_across_writes(self):
        for part in (b"ACQ", b"UIRE s", b"plit", b"key TT", b"L 3000\r", b"\n"):
            self.c.sendraw(part)
            time.sleep(0.03)
        self.assertToken(self.c.readline())
        for ch in b"HELD\n":
            self.c.sendraw(bytes([ch]))
            time.sleep(0.01)
        self.assertEqual(self.c.readline(), "OK 1 splitkey")

    def test_bytes_outside_printable_ascii_are_badarg(self):
        for line in (b"PING\x00", b"PING\x00garbage", b"\x00", b"PI\x7fNG",
                     b"PING \xff", b"ACQUIRE k\x1b", b"ACQUIRE \xc3\xa9t\xc3\xa9",
                     b"HELLO na\x08me", b"\x80"):
            self.assertErr(self.c.req(line), "BADARG")
        # The session goes on and nothing was acquired.
        self.assertEqual(self.c.req("PING"), "OK PONG")
        self.assertEqual(self.c.req("HELD"), "OK 0")
        self.assertEqual(self.redis.cli("KEYS", self.prefix + ":lock:*"), [])

    def test_unknown_verb_is_badcmd(self):
        for line in ("FROB", "frob a b c", "PINGX", "ACQUIREk", "GET k",
                     "LOCK k"):
            self.assertErr(self.c.req(line), "BADCMD")
        self.assertEqual(self.c.req("PING"), "OK PONG")

    def test_error_replies_have_code_and_text(self):
        for line in ("FROB", "ACQUIRE", "RELEASE nothere", "PING x"):
            r = self.c.req(line)
            m = re.fullmatch(r"ERR ([A-Z]+) ([ -~]+)", r)
            self.assertIsNotNone(m, r)
            self.assertIn(m.group(1), ERR_CODES)


class TestLineLimit(ProtoCase):
    def test_line_of_4096_bytes_is_accepted(self):
        line = b"PING" + b" " * 4092
        self.assertEqual(len(line), 4096)
        self.assertEqual(self.c.req(line), "OK PONG")
        key = b"k" * 256
        line = b"ACQUIRE " + key + b" " * (4096 - 8 - 256)
        self.assertToken(self.c.req(line))

    def test_line_over_4096_bytes_gets_toolong_and_close(self):
        other = self.connect(self.b)
        cid = self.c.hello()
        tok = self.assertToken(self.c.req("ACQUIRE held"))
        self.assertRegex(other.req("OWNER held"),
                         r"\AOK %s [0-9]+ %d\Z" % (cid, tok))
        line = b"PING" + b" " * 4093
        self.assertEqual(len(line), 4097)
        self.c.sendraw(line + b"\n")
        self.assertErr(self.c.readline(), "TOOLONG")
        self.assertTrue(self.c.closed_by_peer(2.0), "connection not closed")
        # Other connections are unaffected; the closed session's lock is free.
        self.assertEqual(other.req("PING"), "OK PONG")
        harness.wait_until(lambda: other.req("OWNER held") == "OK -", 1.0,
                           what="lock of the closed session freed")
        self.assertToken(other.req("ACQUIRE held"))

    def test_nothing_after_a_too_long_line_is_answered(self):
        self.c.sendraw(b"ACQUIRE " + b"x" * 5000 + b"\n" + b"PING\n" * 50)
        self.assertErr(self.c.readline(), "TOOLONG")
        self.assertTrue(self.c.closed_by_peer(2.0),
                        "not closed, or answered requests after TOOLONG")
        other = self.connect(self.b)
        self.assertEqual(other.req("PING"), "OK PONG")

    def test_4096_bytes_without_lf_are_still_fine(self):
        self.c.sendraw(b"PING" + b" " * 4092)
        self.assertTrue(self.c.no_reply(0.3), "answered before the LF")
        self.c.sendraw(b"\n")
        self.assertEqual(self.c.readline(), "OK PONG")

    def test_more_than_4096_bytes_without_lf_gets_toolong_and_close(self):
        other = self.connect(self.b)
        self.c.sendraw(b"A" * 4097)
        self.assertErr(self.c.readline(2.0), "TOOLONG")
        self.assertTrue(self.c.closed_by_peer(2.0), "connection not closed")
        self.assertEqual(other.req("PING"), "OK PONG")

    def test_endless_line_is_cut_off(self):
        # A client streaming bytes with no LF must be closed, not buffered.
        other = self.connect(self.b)
        sent = 0
        try:
            for _ in range(256):
                self.c.sendraw(b"x" * 4096)
                sent += 4096
        except OSError:
            pass
        self.assertTrue(self.c.wait_closed(3.0), "still open after %d "
                        "bytes without LF" % sent)
        if self.c.buf:
            self.assertErr(self.c.readline(), "TOOLONG")
        self.assertEqual(self.c.buf, b"")
        self.assertEqual(other.req("PING"), "OK PONG")
        harness.wait_until(lambda: self.stats(other)["sessions"] == "1", 2.0,
                           what="sessions=1")


class TestArguments(ProtoCase):
    def test_key_length_1_to_256(self):
        self.assertToken(self.c.req("ACQUIRE x"))
        k256 = "k" * 255 + "Z"
        self.assertToken(self.c.req("ACQUIRE " + k256))
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key(k256)), 1)
        k257 = "k" * 257
        for verb in ("ACQUIRE", "RELEASE", "RENEW", "OWNER"):
            self.assertErr(self.c.req("%s %s" % (verb, k257)), "BADARG")
        self.assertErr(self.c.req("ACQUIRE %s WAIT 10" % k257), "BADARG")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key(k257)), 0)
        self.assertEqual(self.c.req("RELEASE " + k256), "OK 0")

    def test_key_may_use_every_printable_byte(self):
        key = "".join(chr(c) for c in range(0x21, 0x7f))
        tok = self.assertToken(self.c.req("ACQUIRE " + key))
        self.assertEqual(self.c.req("HELD"), "OK 1 " + key)
        cid = self.c.hello()
        self.assertEqual(self.redis.cli("GET", self.lock_key(key)),
                         "%s:%d" % (cid, tok))
        self.assertEqual(self.c.req("RELEASE " + key), "OK 0")

    def test_bad_ms_values_are_badarg(self):
        for opts in ("WAIT -1", "WAIT 1.5", "WAIT 2147483648",
                     "WAIT 99999999999", "WAIT +5", "WAIT 0x10", "WAIT 1e3",
                     "WAIT", "WAIT ten", "TTL 0", "TTL -5", "TTL",
                     "TTL 2147483648", "TTL 00", "TTL 1000 WAIT",
                     "FOO 1", "TTL 1000 1000", "WAIT 5 x"):
            self.assertErr(self.c.req("ACQUIRE badms " + opts), "BADARG")
        for opts in ("TTL 0", "TTL -1", "TTL x", "WAIT 10", "TTL"):
            self.assertErr(self.c.req("RENEW badms " + opts), "BADARG")
        self.assertEqual(self.c.req("HELD"), "OK 0")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("badms")), 0)

    def test_extreme_valid_ms_values(self):
        self.assertToken(self.c.req("ACQUIRE e1 WAIT 2147483647 TTL 2147483647"))
        self.assertToken(self.c.req("ACQUIRE e2 WAIT 0"))
        self.assertToken(self.c.req("ACQUIRE e3 TTL 0000001000"))
        ttl = int(self.c.req("OWNER e3").split(" ")[2])
        self.assertTrue(0 < ttl <= 1000, ttl)
        self.assertEqual(self.c.req("HELD").split(" ")[1], "3")

    def test_leading_zeros_are_allowed(self):
        self.assertToken(self.c.req("ACQUIRE lz TTL 00000000000000005000"))
        ttl = int(self.c.req("OWNER lz").split(" ")[2])
        self.assertTrue(4000 < ttl <= 5000, ttl)
        self.assertEqual(self.c.req("RENEW lz TTL 000000000000007000"),
                         "OK 7000")
        self.assertErr(self.c.req("ACQUIRE lz2 WAIT 0002147483648"),
                       "BADARG")
        self.assertErr(self.c.req("ACQUIRE lz2 TTL 0000"), "BADARG")
        self.assertToken(self.c.req("ACQUIRE lz2 WAIT 0000"))

    def test_options_in_any_order(self):
        self.assertToken(self.c.req("ACQUIRE o1 TTL 4000 WAIT 10"))
        self.assertToken(self.c.req("ACQUIRE o2 WAIT 10 TTL 4000"))
        for k in ("o1", "o2"):
            ttl = int(self.c.req("OWNER " + k).split(" ")[2])
            self.assertTrue(3000 < ttl <= 4000, (k, ttl))

    def test_wrong_arity_is_badarg(self):
        for line in ("ACQUIRE", "RELEASE", "RELEASE a b", "RENEW", "OWNER",
                     "OWNER a b", "PING x", "HELD x", "STATS x", "QUIT now",
                     "HELLO a b"):
            self.assertErr(self.c.req(line), "BADARG")
        # "QUIT now" was refused, so the session is still open.
        self.assertEqual(self.c.req("PING"), "OK PONG")


class TestHello(ProtoCase):
    def test_hello_reply(self):
        r = self.c.req("HELLO")
        self.assertRegex(r, r"\AOK %s lockbroker/[0-9]+\.[0-9]+\.[0-9]+\S*\Z"
                         % UUID_RE)
        r2 = self.c.req("HELLO my-app_1")
        self.assertEqual(r2, r, "client-id changed within one session")

    def test_hello_name_up_to_64_bytes(self):
        cid = self.c.hello("n" * 64)
        self.assertErr(self.c.req("HELLO " + "n" * 65), "BADARG")
        self.assertEqual(self.c.hello("x"), cid)

    def test_client_id_distinct_per_connection(self):
        ids = {self.c.hello()}
        for _ in range(4):
            c = self.connect(self.b)
            ids.add(c.hello("x"))
        self.assertEqual(len(ids), 5)

    def test_client_id_is_the_owner_id_in_redis(self):
        # The id exists before HELLO; HELLO afterwards reports the same one.
        tok = self.assertToken(self.c.req("ACQUIRE idk"))
        cid = self.c.hello()
        self.assertEqual(self.redis.cli("GET", self.lock_key("idk")),
                         "%s:%d" % (cid, tok))
        other = self.connect(self.b)
        self.assertEqual(other.req("OWNER idk").split(" ")[1], cid)


class TestAuth(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.b = self.start_broker("--auth_token", "s3cret-Tok")

    def test_commands_need_auth(self):
        c = self.connect(self.b)
        self.assertEqual(c.req("PING"), "OK PONG")
        for line in ("ACQUIRE k", "RELEASE k", "RENEW k", "OWNER k", "HELD",
                     "STATS", "HELLO", "EVENTS ON"):
            self.assertErr(c.req(line), "NOAUTH")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("k")), 0)
        # A wrong token (case matters) does not close the session.
        self.assertErr(c.req("AUTH s3cret-tok"), "NOAUTH")
        self.assertErr(c.req("AUTH wrong"), "NOAUTH")
        self.assertErr(c.req("ACQUIRE k"), "NOAUTH")
        self.assertEqual(c.req("auth s3cret-Tok"), "OK")
        self.assertToken(c.req("ACQUIRE k"))
        self.assertEqual(c.req("HELD"), "OK 1 k")
        st = self.stats(c)
        self.assertEqual(int(st["auth_failures"]), 2)

    def test_auth_is_per_session(self):
        c1, c2 = self.connect(self.b), self.connect(self.b)
        self.assertEqual(c1.req("AUTH s3cret-Tok"), "OK")
        self.assertErr(c2.req("HELD"), "NOAUTH")
        self.assertEqual(c1.req("HELD"), "OK 0")

    def test_quit_works_before_auth(self):
        c = self.connect(self.b)
        self.assertEqual(c.req("QUIT"), "OK")
        self.assertTrue(c.closed_by_peer(2.0))

    def test_auth_without_configured_token_is_badarg(self):
        b = self.start_broker()
        c = self.connect(b)
        self.assertErr(c.req("AUTH anything"), "BADARG")
        self.assertToken(c.req("ACQUIRE k"))


class TestSimpleCommands(ProtoCase):
    def test_quit_answers_ok_then_closes(self):
        self.c.sendraw(b"QUIT\nPING\n")
        self.assertEqual(self.c.readline(), "OK")
        self.assertTrue(self.c.closed_by_peer(2.0),
                        "not closed after QUIT, or answered past it")

    def test_quit_case_insensitive_and_releases_locks(self):
        other = self.connect(self.b)
        self.assertToken(self.c.req("ACQUIRE q"))
        self.assertEqual(self.c.req("quit"), "OK")
        self.assertTrue(self.c.closed_by_peer(2.0))
        harness.wait_until(lambda: other.req("OWNER q") == "OK -", 1.0,
                           what="lock freed after QUIT")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("q")), 0)

    def test_held(self):
        self.assertEqual(self.c.req("HELD"), "OK 0")
        self.assertToken(self.c.req("ACQUIRE h1"))
        self.assertToken(self.c.req("ACQUIRE h2"))
        self.assertToken(self.c.req("ACQUIRE h1"))
        words = self.c.req("HELD").split(" ")
        self.assertEqual(words[:2], ["OK", "2"])
        self.assertEqual(sorted(words[2:]), ["h1", "h2"])
        self.assertEqual(self.c.req("RELEASE h2"), "OK 0")
        self.assertEqual(self.c.req("HELD"), "OK 1 h1")
        # Keys held by another session are not listed.
        other = self.connect(self.b)
        self.assertEqual(other.req("HELD"), "OK 0")

    def test_owner_free_and_held(self):
        self.assertEqual(self.c.req("OWNER ok1"), "OK -")
        other = self.connect(self.b)
        cid = other.hello()
        tok = self.assertToken(other.req("ACQUIRE ok1 TTL 5000"))
        r = self.c.req("OWNER ok1")
        m = re.fullmatch(r"OK (%s) ([0-9]+) ([0-9]+)" % UUID_RE, r)
        self.assertIsNotNone(m, r)
        self.assertEqual(m.group(1), cid)
        self.assertTrue(4000 < int(m.group(2)) <= 5000, r)
        self.assertEqual(int(m.group(3)), tok)
        # ttl-ms-left is the PTTL in Redis.
        self.redis.cli("PEXPIRE", self.lock_key("ok1"), 60000)
        ttl = int(self.c.req("OWNER ok1").split(" ")[2])
        self.assertTrue(59000 < ttl <= 60000, ttl)

    def test_owner_reads_redis_for_locks_of_other_brokers(self):
        self.redis.cli("SET", self.lock_key("ext"),
                       "11111111-2222-3333-4444-555555555555:42", "PX", 9000)
        r = self.c.req("OWNER ext")
        m = re.fullmatch(r"OK 11111111-2222-3333-4444-555555555555 ([0-9]+) 42",
                         r)
        self.assertIsNotNone(m, r)
        self.assertTrue(8000 < int(m.group(1)) <= 9000, r)
        self.assertEqual(self.c.req("ACQUIRE ext"), "BUSY")

    def test_stats_shape(self):
        st = self.stats(self.c)
        for name in ("sessions", "locks_held", "waiters", "acquires",
                     "releases"):
            self.assertIn(name, st)
            self.assertRegex(st[name], r"\A[0-9]+\Z", name)
        self.assertEqual(st["redis"], "up")

    def test_stats_counts(self):
        harness.wait_until(lambda: self.stats(self.c)["sessions"] == "1",
                           2.0, what="sessions=1")
        st0 = self.stats(self.c)
        self.assertEqual(st0["locks_held"], "0")
        self.assertEqual(st0["waiters"], "0")
        other = self.connect(self.b)
        self.assertEqual(other.req("PING"), "OK PONG")
        self.assertEqual(self.stats(self.c)["sessions"], "2")
        self.assertToken(self.c.req("ACQUIRE s1"))
        self.assertToken(self.c.req("ACQUIRE s2"))
        st = self.stats(self.c)
        self.assertEqual(st["locks_held"], "2")
        self.assertEqual(int(st["acquires"]) - int(st0["acquires"]), 2)
        other.send("ACQUIRE s1 WAIT 5000")
        harness.wait_until(lambda: self.stats(self.c)["waiters"] == "1",
                           2.0, what="waiters=1")
        self.assertEqual(self.c.req("RELEASE s2"), "OK 0")
        st = self.stats(self.c)
        self.assertEqual(int(st["releases"]) - int(st0["releases"]), 1)
        self.assertEqual(self.c.req("RELEASE s1"), "OK 0")
        self.assertToken(other.readline())
        st = self.stats(self.c)
        self.assertEqual(st["waiters"], "0")
        self.assertEqual(st["locks_held"], "1")
        other.close()
        harness.wait_until(lambda: self.stats(self.c)["sessions"] == "1",
                           2.0, what="sessions back to 1")
        self.assertEqual(self.stats(self.c)["locks_held"], "0")


if __name__ == "__main__":
    unittest.main()
