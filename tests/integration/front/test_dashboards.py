"""
test_dashboards.py - what contrib/ ships for operators works against the
broker's real /metrics page:

  - contrib/grafana/lockbroker.json is valid JSON, a Grafana dashboard
    whose panels cover sessions, holds, grant rate, wait p50/p99,
    hand-offs, Redis up and round trips, and lost locks by cause;
  - every panel's expression, made a recording rule (Grafana's variables
    replaced), passes `promtool check rules`; so do the alert rules
    (contrib/prometheus/alerts.yml), and their unit tests
    (alerts_test.yml) pass `promtool test rules`;
  - every metric the dashboard and the alerts name is on a live scrape of
    a broker after some load (with an access list, so the per-app
    families are there), and every label they group by is on one of the
    metrics of that expression;
  - that scrape passes `promtool check metrics`.

promtool comes from Debian's prometheus package (make deps); without it
the promtool checks are skipped with a message, the others still run.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import harness
from harness import wait_until
from test_metrics import MetricsCase, http_req, sha256_hex

PROMTOOL = shutil.which("promtool")
CONTRIB = os.path.join(harness.REPO, "contrib")
DASHBOARD = os.path.join(CONTRIB, "grafana", "lockbroker.json")
ALERTS = os.path.join(CONTRIB, "prometheus", "alerts.yml")
ALERTS_TEST = os.path.join(CONTRIB, "prometheus", "alerts_test.yml")

# Grafana's variables, as a rules file can take them.
GRAFANA_VARS = (("$__rate_interval", "5m"), ("$__interval", "1m"),
                ("$__range", "1h"), ("$instance", ".*"))
METRIC_RE = re.compile(r"\blockbroker_[a-z0-9_]+\b")
BY_RE = re.compile(r"\bby\s*\(([^)]*)\)")
# PromQL words that are not labels (by (...) holds labels only).
NOT_LABELS = {"le", "instance", "job"}
# Sample line: name and labels.
SAMPLE_RE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? \S+")

TOK_A, TOK_B = "dash-alpha-token-1", "dash-beta-token-22"


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


def need_promtool(case):
    if PROMTOOL is None:
        case.skipTest("promtool not installed (Debian package prometheus, "
                      "make deps): rules and page not checked by promtool")


def promtool(*args, cwd=None):
    p = subprocess.run([PROMTOOL] + list(args), capture_output=True,
                       text=True, timeout=60, cwd=cwd)
    return p.returncode, p.stdout + p.stderr


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def panels(dash):
    """Every panel, rows' nested panels included."""
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def panel_exprs(dash):
    """[(panel title, refId, expr with Grafana's variables replaced)]."""
    out = []
    for p in panels(dash):
        for t in p.get("targets", []):
            expr = t["expr"]
            for var, val in GRAFANA_VARS:
                expr = expr.replace(var, val)
            out.append((p["title"], t["refId"], expr))
    return out


def alert_exprs():
    """[(alert name, expr)] from alerts.yml, read without a YAML library
    (python3-yaml is no build dependency): an expr is on its line, or a
    folded block (>-) of the lines indented below it."""
    out, name = [], None
    with open(ALERTS) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*- alert:\s*(\S+)", line)
        if m:
            name = m.group(1)
        m = re.match(r"(\s*)expr:\s*(.*)$", line)
        if m:
            indent, rest = len(m.group(1)), m.group(2).strip()
            if rest in (">", ">-", "|", "|-"):
                parts = []
                while (i + 1 < len(lines) and lines[i + 1].strip() and
                       len(lines[i + 1]) - len(lines[i + 1].lstrip())
                       > indent):
                    i += 1
                    parts.append(lines[i].strip())
                rest = " ".join(parts)
            out.append((name, rest))
        i += 1
    return out


def scrape_index(body):
    """{sample name: set of label names seen on it}."""
    out = {}
    for line in body.split("\n"):
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.fullmatch(line)
        assert m, "not a sample line: %r" % line
        labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(2)
                                or ""))
        out.setdefault(m.group(1), set()).update(labels)
    return out


class TestDashboards(MetricsCase):
    def test_dashboard_is_a_grafana_dashboard_with_the_panels(self):
        d = dashboard()
        self.assertEqual(d["title"], "lockbroker")
        self.assertIn("uid", d)
        ps = panels(d)
        self.assertEqual(len({p["id"] for p in ps}), len(ps), "panel ids "
                         "repeat")
        exprs = " ".join(e for _, _, e in panel_exprs(d))
        # what an operator opens the dashboard for
        for fam in ("lockbroker_sessions", "lockbroker_locks_held",
                    "lockbroker_acquires_total",
                    "lockbroker_acquire_wait_seconds_bucket",
                    "lockbroker_handoffs_total",
                    "lockbroker_redis_up", "lockbroker_redis_node_up",
                    "lockbroker_redis_rtt_seconds_bucket",
                    "lockbroker_lost_locks_total",
                    "lockbroker_hold_seconds_bucket",
                    "lockbroker_app_acquire_wait_seconds_bucket"):
            self.assertRegex(exprs, r"\b%s\b" % fam)
        self.assertIn("histogram_quantile(0.5,", exprs)
        self.assertIn("histogram_quantile(0.99,", exprs)
        self.assertIn("by (cause)", exprs)
        for p in ps:
            if p.get("type") != "row":
                self.assertTrue(p.get("targets"), p["title"])
                self.assertEqual(p["datasource"]["uid"], "${datasource}",
                                 p["title"])

    def test_panel_expressions_pass_promtool(self):
        need_promtool(self)
        d = tempfile.mkdtemp(prefix="lbt-dash-")
        self.addCleanup(shutil.rmtree, d, True)
        rules = ["groups:", "  - name: lockbroker_dashboard", "    rules:"]
        for n, (title, ref, expr) in enumerate(panel_exprs(dashboard())):
            rules.append("      - record: lockbroker_dashboard:panel%d_%s"
                         % (n, ref))
            rules.append("        expr: %s" % json.dumps(expr))
        path = os.path.join(d, "dashboard_rules.yml")
        with open(path, "w") as f:
            f.write("\n".join(rules) + "\n")
        rc, out = promtool("check", "rules", path)
        self.assertEqual(rc, 0, out + "\n".join(rules))
        self.assertIn("SUCCESS: %d rules found" % len(panel_exprs(
            dashboard())), out)

    def test_alert_rules_pass_promtool_and_their_unit_tests(self):
        need_promtool(self)
        rc, out = promtool("check", "rules", ALERTS)
        self.assertEqual(rc, 0, out)
        names = [n for n, _ in alert_exprs()]
        self.assertIn("SUCCESS: %d rules found" % len(names), out)
        for want in ("LockbrokerRedisDown", "LockbrokerLostLocks",
                     "LockbrokerSlowWaits", "LockbrokerSessionsRefused"):
            self.assertIn(want, names)
        rc, out = promtool("test", "rules", os.path.basename(ALERTS_TEST),
                           cwd=os.path.dirname(ALERTS_TEST))
        self.assertEqual(rc, 0, out)

    def loaded_broker(self):
        """A broker with two apps after some load: grants, a wait and
        hand-off, holds ended, a lock lost.  Returns (broker, page)."""
        d = tempfile.mkdtemp(prefix="lbt-dash-")
        self.addCleanup(shutil.rmtree, d, True)
        acl = os.path.join(d, "acl")
        with open(acl, "w") as f:
            f.write("app alpha token-sha256 %s keys a*\n"
                    "app beta token-sha256 %s keys b*\n"
                    % (sha256_hex(TOK_A), sha256_hex(TOK_B)))
        b = self.start_metrics_broker("--acl_file", acl, auth=TOK_A)
        a1, a2, bb = (self.connect(b) for _ in range(3))
        for c, tok in ((a1, TOK_A), (a2, TOK_A), (bb, TOK_B)):
            self.assertEqual(c.req("AUTH " + tok), "OK")
        for i in range(20):
            self.assertToken(a1.req("ACQUIRE a%d" % i))
            self.assertToken(bb.req("ACQUIRE b%d" % i))
            self.assertEqual(a1.req("RELEASE a%d" % i), "OK 0")
        self.assertToken(a1.req("ACQUIRE ahot"))
        a2.send("ACQUIRE ahot WAIT 5000")
        wait_until(lambda: self.stats(a1)["waiters"] == "1", 3.0,
                   what="waiters=1")
        time.sleep(0.05)
        self.assertEqual(a1.req("RELEASE ahot"), "OK 0")
        self.assertToken(a2.readline())
        self.assertEqual(self.redis.cli("DEL", self.lock_key("b0")), 1)
        self.assertErr(bb.req("RELEASE b0"), "LOST")
        st, _, body = http_req(b.mport)
        self.assertEqual(st, 200)
        return b, body

    def test_every_metric_and_label_named_is_on_a_live_scrape(self):
        _, body = self.loaded_broker()
        have = scrape_index(body)
        exprs = ([("panel " + t, e) for t, _, e in panel_exprs(dashboard())]
                 + [("alert " + n, e) for n, e in alert_exprs()])
        self.assertGreater(len(exprs), 10)
        with open(ALERTS_TEST) as f:
            series = re.findall(r"series: '([a-z0-9_]+)\{", f.read())
        for name in series:
            self.assertIn(name, have, "alerts_test.yml feeds %s, which "
                          "the broker does not serve" % name)
        for where, expr in exprs:
            names = set(METRIC_RE.findall(expr))
            self.assertTrue(names, "%s names no lockbroker metric: %s"
                            % (where, expr))
            for name in names:
                self.assertIn(name, have, "%s: %s is not on /metrics"
                              % (where, name))
            for group in BY_RE.findall(expr):
                for lab in (l.strip() for l in group.split(",")):
                    if lab in NOT_LABELS or not lab:
                        continue
                    self.assertTrue(any(lab in have[n] for n in names),
                                    "%s groups by %s, which none of %s "
                                    "has" % (where, lab, sorted(names)))

    def test_promtool_check_metrics_after_load(self):
        need_promtool(self)
        _, body = self.loaded_broker()
        self.assertIn('lockbroker_app_acquire_wait_seconds_count{app="alpha"}',
                      body)
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=body,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual((p.stdout + p.stderr).strip(), "",
                         "promtool has lint remarks")


if __name__ == "__main__":
    unittest.main()
