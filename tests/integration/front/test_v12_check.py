"""
test_v12_check.py - CHECK (protocol 1.2) at the session's edge, beside
locks/test_check.py (current/stale, lost and taken, shared and permits,
bad tokens):

  - an access list's key globs apply: ERR DENIED outside them, an answer
    inside them;
  - a lock key holding bytes no broker wrote reads STALE -, never echoed.
"""

import hashlib
import os
import shutil
import tempfile
import unittest

import harness
from harness import BrokerTestCase


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class TestCheckEdge(BrokerTestCase):
    def test_foreign_value_is_stale_dash(self):
        c = self.connect(self.start_broker())
        self.redis.cli("SET", self.lock_key("f"), "not a broker's value")
        self.assertEqual(c.req("CHECK f 1"), "OK STALE -")
        self.assertEqual(c.req("PING"), "OK PONG")

    def test_key_globs_apply(self):
        tok = "alpha-" + "1" * 40
        d = tempfile.mkdtemp(prefix="lbt-chk-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "acl")
        with open(path, "w") as f:
            f.write("app alpha token-sha256 %s keys alpha:*\n"
                    % hashlib.sha256(tok.encode()).hexdigest())
        b = self.start_broker("--acl_file", path, auth=tok)
        c = self.connect(b)
        self.assertEqual(c.req("AUTH " + tok), "OK")
        self.assertErr(c.req("CHECK beta:1 1"), "DENIED")
        t = self.assertToken(c.req("ACQUIRE alpha:1"))
        self.assertEqual(c.req("CHECK alpha:1 %d" % t), "OK CURRENT")


if __name__ == "__main__":
    unittest.main()
