#!/usr/bin/env python3
"""
test_run.py - checks of run.py's pure pieces (no processes, no timing):
how INFO commandstats becomes Redis script us per pair, how `ss` output
becomes the second broker's pub/sub bytes, the size of a release message,
which form the broker's-scripts direct row takes, and the targets table's
verdicts.  Run: python3 tests/bench/test_run.py
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402


# What Redis 7.0 printed after one plain pair (CONFIG RESETSTAT first):
# the commands a script runs are counted under their own names too.
CMDSTATS = """# Commandstats
cmdstat_set:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0
cmdstat_get:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0
cmdstat_incr:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0
cmdstat_del:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0
cmdstat_evalsha:calls=2,usec=16,usec_per_call=8.00,rejected_calls=0,failed_calls=0
cmdstat_config|resetstat:calls=1,usec=29,usec_per_call=29.00,rejected_calls=0,failed_calls=0
cmdstat_publish:calls=1,usec=2,usec_per_call=2.00,rejected_calls=0,failed_calls=0
cmdstat_script|load:calls=2,usec=54,usec_per_call=27.00,rejected_calls=0,failed_calls=0
"""


class RedisWork(unittest.TestCase):
    def test_parse(self):
        st = run.parse_commandstats(CMDSTATS)
        self.assertEqual(st["evalsha"]["usec"], 16)
        self.assertEqual(st["config|resetstat"]["calls"], 1)
        self.assertNotIn("# Commandstats", st)

    def test_script_us_does_not_add_the_scripts_publishes(self):
        w = run.redis_work(run.parse_commandstats(CMDSTATS), 1)
        self.assertEqual(w["script_us"], 16)     # not 16 + 2
        self.assertEqual(w["script_calls"], 2)
        self.assertEqual(w["commands"], 6)       # the bench's own left out
        self.assertEqual((w["publish_calls"], w["publish_us"]), (1, 2))

    def test_every_script_command_counts(self):
        st = {"fcall": {"calls": 3, "usec": 30},
              "evalsha": {"calls": 1, "usec": 10},
              "eval_ro": {"calls": 1, "usec": 5},
              "spublish": {"calls": 2, "usec": 4}}
        w = run.redis_work(st, 5)
        self.assertEqual(w["script_us"], 9)
        self.assertEqual(w["script_calls"], 1)
        self.assertEqual(w["publish_calls"], 0.4)
        self.assertIsNone(run.redis_work(st, 0))


SS = """\
ESTAB 0      0      127.0.0.1:53814 127.0.0.1:7391 users:(("lockbrokerd",pid=41,fd=9))
\t cubic wscale:7,7 rto:204 bytes_sent:27 bytes_acked:28 bytes_received:670 segs_out:5
ESTAB 0      0      127.0.0.1:53816 127.0.0.1:7391 users:(("lockbrokerd",pid=42,fd=8))
\t cubic wscale:7,7 rto:204 bytes_sent:27 bytes_acked:28 segs_out:5
"""


class Fanout(unittest.TestCase):
    def test_parse_ss(self):
        self.assertEqual(run.parse_ss(SS), [(53814, [41], 670),
                                            (53816, [42], 0)])

    def test_release_message_bytes(self):
        # *3\r\n $7\r\nmessage\r\n $3\r\nch1\r\n $7\r\nr1:p1:0\r\n
        self.assertEqual(run.release_message_bytes("ch1", "r1", 1),
                         4 + 13 + 9 + 13)
        # names r1:p12:0 .. r1:p12:11: 10 of 8 bytes, 2 of 9
        self.assertAlmostEqual(run.release_message_bytes("ch1", "r1", 12),
                               4 + 13 + 9 + (10 * 14 + 2 * 15) / 12)


class ScriptsForm(unittest.TestCase):
    def test_library_beside_the_broker_that_carries_its_name(self):
        with tempfile.TemporaryDirectory() as d:
            broker = os.path.join(d, "lockbrokerd")
            lib = os.path.join(d, "library.lua")
            with open(lib, "w") as f:
                f.write("#!lua name=lockbroker_abc123\nreturn 1\n")
            with open(broker, "wb") as f:
                f.write(b"\0ELF...lockbroker_abc123\0")
            argv, what = run.broker_scripts_form(broker, "scripts")
            self.assertEqual(argv, ["--library", lib])
            self.assertIn("FCALL", what)
            # a stale library.lua (another build's) is not used
            with open(broker, "wb") as f:
                f.write(b"\0ELF...lockbroker_other\0")
            argv, what = run.broker_scripts_form(broker, "scripts")
            self.assertEqual(argv, ["--scripts", "scripts"])
            self.assertIn("EVALSHA", what)
            self.assertEqual(run.broker_scripts_form(
                broker, "scripts", "/x/l.lua")[0], ["--library", "/x/l.lua"])


def pairs_run(rate, script_us_total, redis_ticks, total=1000, broker=0):
    return {"rate": rate, "total": total, "acq_p50_us": 40,
            "cmdstats": {"evalsha": {"calls": 2 * total,
                                     "usec": script_us_total * total}},
            "cpu": {"redis": redis_ticks, "broker": broker, "broker2": 0}}


class Targets(unittest.TestCase):
    def verdicts(self, r):
        return {what.split(",")[0].split(" (")[0].split(":")[0]: met
                for what, _, _, _, met in run.targets(r)}

    def test_not_run(self):
        v = self.verdicts({})
        self.assertTrue(all(m is None for m in v.values()), v)

    def test_admin_rows_render(self):
        r = {"admin": {"pages": 1000, "entries": 100000, "p50_us": 2000,
                       "max_us": 39000, "total_us": 3e6,
                       "rss_grew": 200 * 1024}}
        v = self.verdicts(r)
        self.assertTrue(v["LOCKS page"])
        self.assertTrue(v["... the asking broker's RSS over the whole walk"])
        # the table renders every cell (strings only)
        self.assertTrue(any("LOCKS page" in line
                            for line in run.targets_table(r)))

    def test_pairs(self):
        hz = run.CLK_TCK
        # Redis 0.3 s against 1 s for 1,000 pairs; the broker 10 ms
        p = {("broker", 50): pairs_run(30000, 4.5, 0.3 * hz, broker=1),
             ("plain", 50): pairs_run(29000, 8, hz),
             ("scripts", 50): None,
             ("broker", 1): pairs_run(5000, 20, hz),
             ("plain", 1): pairs_run(10000, 8, hz),
             ("scripts", 1): None}
        v = self.verdicts({"pairs": p})
        self.assertTrue(v["Redis script us per pair"])
        self.assertTrue(v["Redis CPU us per pair"])     # 0.30 x
        self.assertEqual([m for w, _, _, _, m in run.targets({"pairs": p})
                          if w.startswith("pairs/s")], [True, False])
        self.assertIsNone(v["ACQUIRE p50"])             # no scripts run
        # no baseline ran: no verdict on the broker's CPU
        self.assertIsNone(v["broker CPU us per pair"])
        self.assertEqual(run.us_per_pair(1, 1000), 1000.0 / hz)
        p[("broker", 50)]["cmdstats"]["evalsha"]["usec"] = 5100
        self.assertFalse(self.verdicts({"pairs": p})[
            "Redis script us per pair"])

    def test_against_the_baseline(self):
        hz = run.CLK_TCK
        # three alternated rounds: the medians decide
        ab = {("new", 50): [pairs_run(30000, 4, 0, broker=b * hz / 1e3)
                            for b in (12, 11, 30)],
              ("base", 50): [pairs_run(25000, 15, 0, broker=b * hz / 1e3)
                             for b in (16, 17, 15)],
              ("plain", 50): [pairs_run(29000, 8, hz)] * 3}
        r = {"ab": ab}
        self.assertAlmostEqual(run.ab_med(r, "new", 50, "broker_us"), 12)
        self.assertAlmostEqual(run.ab_med(r, "base", 50, "broker_us"), 16)
        rows = {w.split(":")[0]: (have, base, met)
                for w, _, have, base, met in run.targets(r, "27629bd")}
        have, base, met = rows["broker CPU us per pair (utime+stime), 50 "
                               "conns"]
        self.assertTrue(met)                            # 12 / 16 = 0.75
        self.assertEqual((have, base), ("12.0 = 0.75 x", "16.0"))
        # with the kernel's part measured, the row says its share
        for x in ab[("new", 50)]:
            x["cpu_sys"] = {"broker": x["cpu"]["broker"] * 3 / 4}
        rows = {w.split(":")[0]: (have, base, met)
                for w, _, have, base, met in run.targets(r, "27629bd")}
        self.assertEqual(rows["broker CPU us per pair (utime+stime), 50 "
                              "conns"][0], "12.0 = 0.75 x, 75% in the kernel")
        self.assertTrue(rows["pairs/s, 50 conns, 2 brokers on the Redis"][2])
        # the pairs/s row says the CPU each pair cost, both ways
        self.assertEqual(rows["pairs/s, 50 conns, 2 brokers on the Redis"][0],
                         "30,000 / 29,000 = 1.03 x; CPU us per pair 12.0 + "
                         "0.0 (broker + Redis) / 1000.0 (Redis)")
        # memory: this build's figures against the baseline's
        mem = {"rss_base": 0, "idle": {"rss_sessions": 10000 * 1100},
               "held": {"rss_sessions": 0, "rss_locks": 100000 * 300}}
        r = dict(mem, mem_base={"rss_base": 0,
                                "idle": {"rss_sessions": 10000 * 1500},
                                "held": {"rss_sessions": 0,
                                         "rss_locks": 100000 * 470}})
        rows = {w.split(",")[0]: (have, base, met)
                for w, _, have, base, met in run.targets(r)}
        self.assertEqual(rows["memory per held lock"], ("300", "470", True))
        self.assertEqual(rows["memory per idle session"],
                         ("1,100", "1,500", True))

    def test_handoff_reference(self):
        h = {"same_p50_us": 60, "rate": 910, "max_wait_us": 11000,
             "cross_n": 0}
        r = {"handoff1": h, "handoff2": h,
             "handoff_base": {"same_p50_us": 45, "rate": 950,
                              "max_wait_us": 9000}}
        v = self.verdicts(r)
        self.assertFalse(v["same-broker hand-off p50 us"])  # 60 > 49.5
        self.assertFalse(v["hot-key acquisitions/s"])         # 910 < 921.5
        self.assertIsNone(v["cross-broker hand-off p50 us"])  # none crossed
        self.assertTrue(v["longest ACQUIRE->OK wait ms"])
        # alternated runs against the hand-off baseline win over it
        r["hab"] = {"new": [dict(h, same_p50_us=x) for x in (50, 48, 90)],
                    "base": [dict(h, same_p50_us=x, rate=900)
                             for x in (47, 46, 45)]}
        v = self.verdicts(r)
        self.assertTrue(v["same-broker hand-off p50 us"])   # 50 <= 50.6
        self.assertTrue(v["hot-key acquisitions/s"])        # 910 >= 873


if __name__ == "__main__":
    unittest.main()
