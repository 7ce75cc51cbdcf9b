"""
history.py - a fenced resource and a checker over the whole history of a
run, for tests where clients hold locks while the network is cut.

  Resource  the thing the locks protect, in this process: per key it
            accepts a write iff the write's token is >= the highest token
            it has accepted for the key (so accepted tokens per key never
            go back, in the order writes are accepted), and it records
            every write, accepted or not.
  Hold      one OK <token>, as its client saw it: r (ACQUIRE sent), s (OK
            read), e (the hold's end for the client), told / told_at
            (EVENT LOST or ERR LOST), the writes it made.
  History   every hold of a run, and check(): the numbers a run reports
            and the violations it found.

Times are time.monotonic() of this one process.  s is taken after the OK
was read, so the grant happened before s.  e is when the client stopped
treating the key as held: before it sent RELEASE (it stops using the
resource first), when it read EVENT LOST (or ERR LOST to a request other
than RELEASE), when it saw its connection close, or the end of the run
for a hold still open then.  So a client's [s, e] lies within the hold's
true life in the broker (for a release) or extends it by the time the
news took to arrive (for a loss): an overlap of two clients' intervals is
an overlap of what the two clients believed.  (A hold does not end when
RELEASE is answered: with an early hand-off both sessions hear OK at the
same moment, and every hand-off would look like an overlap.)

What check() finds (each is sound without tolerances; see the method):
  regressions   per key, a hold whose ACQUIRE was sent after another
                hold's OK was read (so it was granted later) and whose
                token is not greater;
  overlaps      pairs of holds of one key, of different sessions, whose
                client intervals overlap (two SHARED holds aside): counted
                (holds, pairs) and timed (the time some key had two or
                more holders, summed over keys);
  unreported    losses nobody was told of: in an overlapping pair the hold
                with the lower token (the one fencing refuses) was never
                told LOST, or a hold never told LOST had a write refused
                by the resource; excused when its client could not reach
                its broker during the hold (excused(hold));
  late          with deadline(hold) (when the broker can no longer vouch
                for the hold at the latest) a hold that its client, able
                to reach its broker, still held at deadline + bound;
  vouch->LOST   told_at - deadline for the holds told by EVENT LOST.
"""

import collections
import threading
import time


class Resource:
    """A fenced resource: per key, accept a write iff its token >= the
    highest accepted so far; log every write."""

    def __init__(self):
        self.lock = threading.Lock()
        self.top = {}
        self.log = []           # (t, key, token, hold id, accepted)

    def write(self, hold):
        with self.lock:
            top = self.top.get(hold.key, -1)
            ok = hold.token >= top
            if ok:
                self.top[hold.key] = hold.token
            t = time.monotonic()
            self.log.append((t, hold.key, hold.token, hold.id, ok))
        hold.writes.append((t, ok))
        return ok

    def check(self, history):
        """The log is consistent: accepted tokens per key never go back,
        and every write logged is one a hold made."""
        top = {}
        ids = {h.id for h in history.holds}
        for t, key, token, hid, ok in self.log:
            if ok != (token >= top.get(key, -1)):
                history.violation("resource log inconsistent at %s %d" %
                                  (key, token))
            if ok:
                top[key] = token
            if hid not in ids:
                history.violation("resource logged a write of %s, which no "
                                  "client made" % hid)


class Hold:
    """One OK <token>, seen from its client."""
    __slots__ = ("id", "key", "kind", "token", "ttl_ms", "client", "sid",
                 "broker", "host", "r", "s", "e", "how", "told", "told_at",
                 "release_reply", "writes")

    def __init__(self, hid, key, kind, token, ttl_ms, client, sid, broker,
                 host, r, s):
        self.id = hid
        self.key = key
        self.kind = kind            # "x" exclusive, "shared", "permit"
        self.token = token
        self.ttl_ms = ttl_ms
        self.client = client
        self.sid = sid              # session: client-id from HELLO
        self.broker = broker        # the broker's host name
        self.host = host            # the client's host name
        self.r = r
        self.s = s
        self.e = None
        self.how = None             # released event err_lost closed open
        self.told = None            # "EVENT LOST" / "ERR LOST"
        self.told_at = None
        self.release_reply = None
        self.writes = []            # (t, accepted)

    def end(self, t, how):
        if self.e is None:
            self.e = t
            self.how = how

    def tell(self, how, t):
        if self.told is None:
            self.told = how
            self.told_at = t

    def describe(self, t0):
        def rel(t):
            return "-" if t is None else "%.3f" % (t - t0)
        return ("hold %s key=%s %s token=%d ttl=%d via %s from %s r=%s s=%s "
                "e=%s (%s) told=%s at %s release=%r writes=%s"
                % (self.id, self.key, self.kind, self.token, self.ttl_ms,
                   self.broker, self.host, rel(self.r), rel(self.s),
                   rel(self.e), self.how, self.told, rel(self.told_at),
                   self.release_reply,
                   ",".join("%s@%s" % ("ok" if ok else "REJECTED", rel(t))
                            for t, ok in self.writes)))


def _percentile(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[i]


def _union_length(intervals):
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(intervals):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


class History:
    """The holds of one run, and the violations found in them."""

    SHOW = 6                    # violations of one kind shown in full

    def __init__(self):
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.holds = []
        self.violations = []
        self.kinds = collections.Counter()

    def add(self, h):
        with self.lock:
            self.holds.append(h)

    def violation(self, text, kind=None):
        """Record a violation; of each kind the first SHOW are kept in
        full, the rest counted."""
        kind = kind or text.split(":", 1)[0]
        with self.lock:
            self.kinds[kind] += 1
            if self.kinds[kind] <= self.SHOW:
                self.violations.append("[t=%.3f] %s"
                                       % (time.monotonic() - self.t0, text))

    def violation_count(self):
        return sum(self.kinds.values())

    def report(self):
        """The violations, for a failure message."""
        more = ["  %d x %s" % (n, k) for k, n in self.kinds.most_common()]
        return "%d violation(s):\n%s\n\n%s" % (
            self.violation_count(), "\n".join(more),
            "\n\n".join(self.violations))

    # -- the checks --

    def check(self, resource=None, deadline=None, bound_s=0.5,
              excused=None, end=None):
        """Close open holds at end, run every check, and return the
        numbers (a dict).  deadline(h): the time by which the broker can
        no longer vouch for h at the latest, or None; excused(h): True if
        h's client could not reach its broker during the hold."""
        end = time.monotonic() if end is None else end
        excused = excused or (lambda h: False)
        holds = list(self.holds)
        for h in holds:
            h.end(end, "open")
        out = collections.OrderedDict()
        out["grants"] = len(holds)
        self._check_unique(holds)
        out["regressions"] = self._check_order(holds)
        pairs, involved, seconds, unreported = self._check_overlaps(
            holds, excused)
        for h in holds:
            if not h.told and not excused(h) and \
                    any(not ok for _, ok in h.writes):
                if h.id not in unreported:
                    unreported.add(h.id)
                    self.violation(
                        "unreported loss: a write of a hold never told LOST"
                        " was refused by the resource (a greater token was "
                        "granted meanwhile)\n  %s"
                        % h.describe(self.t0), "unreported loss (refused)")
        out["overlap_holds"] = len(involved)
        out["overlap_pairs"] = pairs
        out["overlap_s"] = seconds
        out["unreported"] = len(unreported)
        out["told_lost"] = sum(1 for h in holds if h.told)
        delays, late, checked = self._check_deadlines(holds, deadline,
                                                      bound_s, excused)
        out["deadline_holds"] = checked
        out["late"] = late
        out["vouch_lost_n"] = len(delays)
        out["vouch_lost_p50_ms"] = _percentile(delays, 50)
        out["vouch_lost_max_ms"] = max(delays) if delays else None
        out["writes_accepted"] = sum(ok for h in holds for _, ok in h.writes)
        out["stale_rejected"] = sum(not ok for h in holds
                                    for _, ok in h.writes)
        if resource is not None:
            resource.check(self)
        return out

    def _check_unique(self, holds):
        """One token, one session (per key)."""
        owner = {}
        for h in holds:
            prev = owner.setdefault((h.key, h.token), h)
            if prev.sid != h.sid:
                self.violation("token granted twice: %s %d to two sessions"
                               "\n  %s\n  %s" % (h.key, h.token,
                                                 prev.describe(self.t0),
                                                 h.describe(self.t0)))

    def _check_order(self, holds):
        """Per key: a hold Y whose ACQUIRE was sent after another hold X's
        OK was read (s_X < r_Y) was granted after X was, so its token must
        be greater.  Returns how many holds broke that."""
        bad = 0
        bykey = collections.defaultdict(list)
        for h in holds:
            bykey[h.key].append(h)
        for key, hs in bykey.items():
            by_s = sorted(hs, key=lambda h: h.s)
            top, j = None, 0
            for y in sorted(hs, key=lambda h: h.r):
                while j < len(by_s) and by_s[j].s < y.r:
                    if top is None or by_s[j].token > top.token:
                        top = by_s[j]
                    j += 1
                if top is not None and y.token <= top.token:
                    bad += 1
                    self.violation(
                        "token went back: %s sent its ACQUIRE %.3f s after "
                        "%s read OK %d, and got %d\n  %s\n  %s"
                        % (y.id, y.r - top.s, top.id, top.token, y.token,
                           top.describe(self.t0), y.describe(self.t0)),
                        "token went back")
        return bad

    def _check_overlaps(self, holds, excused):
        """Overlapping client intervals of one key, of two sessions (two
        SHARED holds may overlap).  The hold with the lower token is the
        one that lost (the resource refuses it from the other's first
        write on): it must have been told LOST, unless its client could
        not reach its broker."""
        bykey = collections.defaultdict(list)
        for h in holds:
            bykey[h.key].append(h)
        pairs, involved, unreported, total = 0, set(), set(), 0.0
        for key, hs in bykey.items():
            hs = sorted(hs, key=lambda h: h.s)
            spans = []
            for i, x in enumerate(hs):
                for y in hs[i + 1:]:
                    if y.s >= x.e:
                        continue
                    if x.sid == y.sid or (x.kind == "shared" and
                                          y.kind == "shared"):
                        continue
                    pairs += 1
                    involved.update((x.id, y.id))
                    spans.append((y.s, min(x.e, y.e)))
                    loser = x if x.token < y.token else y
                    if loser.told or excused(loser) or \
                            loser.id in unreported:
                        continue
                    unreported.add(loser.id)
                    winner = y if loser is x else x
                    self.violation(
                        "unreported loss: %s held %s while %s did, had the "
                        "lower token, and was never told LOST\n  %s\n  %s"
                        % (loser.id, key, winner.id,
                           loser.describe(self.t0),
                           winner.describe(self.t0)),
                        "unreported loss (overlap)")
            total += _union_length(spans)
        return pairs, involved, total, unreported

    def _check_deadlines(self, holds, deadline, bound_s, excused):
        """A hold the broker can no longer vouch for after d = deadline(h)
        must have ended for its client by d + bound_s (told EVENT LOST, or
        released before), unless its client could not reach its broker.
        Returns (EVENT LOST delays after d in ms, late holds, holds
        checked)."""
        delays, late, checked = [], 0, 0
        if deadline is None:
            return delays, late, checked
        for h in holds:
            d = deadline(h)
            if d is None or h.s > d:
                continue
            checked += 1
            if h.told == "EVENT LOST":
                delays.append((h.told_at - d) * 1000.0)
            if excused(h):
                continue
            if h.e > d + bound_s:
                late += 1
                self.violation(
                    "held past the vouch deadline: %s still held by its "
                    "client %.3f s after the broker could no longer vouch "
                    "for it (bound %.1f s)\n  %s"
                    % (h.id, h.e - d, bound_s, h.describe(self.t0)),
                    "held past the vouch deadline")
        return delays, late, checked


def summary_line(name, nums, extra=""):
    """One compact line of a run's numbers, for the lead's notes."""
    def ms(v):
        return "-" if v is None else "%.0f" % v
    return ("partitions[%s]: grants=%d%s overlaps=%d holds/%d pairs/%.2fs "
            "regressions=%d unreported=%d told_lost=%d "
            "vouch_to_lost_ms p50=%s max=%s (n=%d told of %d with a deadline) "
            "late=%d stale_rejected=%d writes_accepted=%d"
            % (name, nums["grants"], extra, nums["overlap_holds"],
               nums["overlap_pairs"], nums["overlap_s"], nums["regressions"],
               nums["unreported"], nums["told_lost"],
               ms(nums["vouch_lost_p50_ms"]), ms(nums["vouch_lost_max_ms"]),
               nums["vouch_lost_n"], nums["deadline_holds"], nums["late"],
               nums["stale_rejected"], nums["writes_accepted"]))
