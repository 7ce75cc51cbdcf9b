"""Logging: journald priorities when stderr is the journal, timestamps
otherwise, and no line per request at the default level."""

import os
import re
import subprocess
import tempfile
import time
import unittest

from harness import (BROKER_BIN, BrokerTestCase, Client, free_port,
                     wait_until)


class TestLogging(BrokerTestCase):

    def run_broker(self, env_extra, *args):
        """Start a broker at the default log level with stderr to a file;
        env_extra(path) gives extra environment for that file."""
        d = tempfile.mkdtemp(prefix="lbt-log-")
        path = os.path.join(d, "stderr.log")
        open(path, "wb").close()
        env = dict(os.environ)
        env.update(env_extra(path))
        port = free_port()
        with open(path, "ab") as err:
            p = subprocess.Popen([BROKER_BIN, "-b", "127.0.0.1", "-p",
                                  str(port), "-r", self.redis.addr,
                                  "--prefix", self.prefix] + list(args),
                                 stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=err,
                                 env=env)

        def stop():
            if p.poll() is None:
                p.terminate()
                p.wait(10)
        self.addCleanup(stop)

        def ready():
            try:
                c = Client(port, timeout=1.0)
            except OSError:
                return False
            ok = "redis=up" in c.req("STATS")
            c.close()
            return ok
        wait_until(ready, 5.0, what="broker ready")
        return p, port, path

    @staticmethod
    def journal_of(path):
        st = os.stat(path)
        return {"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)}

    def test_journal_stream_gets_priorities(self):
        p, port, path = self.run_broker(self.journal_of)
        p.terminate()
        self.assertEqual(p.wait(10), 0)
        lines = open(path).read().splitlines()
        self.assertTrue(lines)
        for line in lines:
            self.assertRegex(line, r"\A<[0-7]>[a-z_]+: ", line)
        # info lines are <6>
        self.assertTrue(any(l.startswith("<6>") and "listening" in l
                            for l in lines), lines)

    def test_warning_is_priority_4(self):
        # A Redis nobody listens on: the connection failure is a warning.
        dead = free_port()
        d = tempfile.mkdtemp(prefix="lbt-log-")
        path = os.path.join(d, "stderr.log")
        open(path, "wb").close()
        e = dict(os.environ)
        e.update(self.journal_of(path))
        with open(path, "ab") as err:
            p = subprocess.Popen([BROKER_BIN, "-b", "127.0.0.1", "-p",
                                  str(free_port()), "-r",
                                  "127.0.0.1:%d" % dead, "--prefix",
                                  self.prefix], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=err,
                                 env=e)
        time.sleep(0.5)
        p.terminate()
        self.assertEqual(p.wait(10), 0)
        text = open(path).read()
        self.assertRegex(text, r"(?m)^<4>conn_lost: Redis command "
                         r"connection failed")

    def test_inherited_journal_stream_elsewhere_is_ignored(self):
        # JOURNAL_STREAM naming another stream: plain timestamped lines.
        p, port, path = self.run_broker(
            lambda path: {"JOURNAL_STREAM": "1:2"})
        p.terminate()
        self.assertEqual(p.wait(10), 0)
        for line in open(path).read().splitlines():
            self.assertRegex(line, r"\A\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} "
                             r"(error|warn|info|debug) ", line)

    def test_no_line_per_request_at_default_level(self):
        p, port, path = self.run_broker(lambda path: {})
        before = len(open(path).read().splitlines())
        c = Client(port)
        self.addCleanup(c.close)
        for i in range(200):
            self.assertRegex(c.req("ACQUIRE k%d" % (i % 5)), r"\AOK \d+\Z")
            self.assertEqual(c.req("RELEASE k%d" % (i % 5)), "OK 0")
        self.assertEqual(c.req("PING"), "OK PONG")
        c.close()
        time.sleep(0.1)
        after = len(open(path).read().splitlines())
        self.assertEqual(before, after, open(path).read())


if __name__ == "__main__":
    unittest.main()
