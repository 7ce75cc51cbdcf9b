#!/bin/bash
# valgrind.sh - run lockbrokerd under valgrind (memcheck) through one
# scenario that touches most of its code, and fail on any memory error or
# definite/indirect leak.
#
#   bash tests/integration/valgrind.sh [path/to/lockbrokerd]
#
# Starts its own redis-server on a free 127.0.0.1 port, the broker under
# valgrind (with /metrics and an auth_token), and drives it over sockets:
# AUTH (wrong, right), HELLO, ACQUIRE/RELEASE, reentrancy, a waiter woken by
# a local release (handoff), BUSY after WAIT, RENEW, OWNER, HELD, STATS,
# EVENTS ON, a key DEL'd in Redis (EVENT LOST, then ERR LOST), a client
# that disconnects while waiting and one that drops its locks by closing,
# bad requests, GET/POST /metrics, an acl_file app (ERR DENIED, OWNER
# hiding, SIGHUP reloads of a good and of a broken file under a live app
# session), a Redis restart (ERR UNAVAILABLE, then reconnect), QUIT; over
# TLS (a self-signed certificate made with the openssl CLI): a session
# through AUTH and ACQUIRE, a handshake that fails, a SIGHUP that reloads
# the certificate under a live TLS session, and one connection left in its
# handshake.  Then SIGTERM with locks still held (one by the TLS session)
# and that handshake still open.  Exit 0 only if the
# scenario passed and valgrind exited 0 (--error-exitcode=99 otherwise).
# Bounded: about 60 s at most.
set -u

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
broker=${1:-${LOCKBROKERD:-$repo/build/lockbrokerd}}
case $broker in /*) ;; *) broker=$PWD/$broker ;; esac

for tool in valgrind redis-server python3 openssl; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "valgrind.sh: $tool is not installed" >&2
		exit 2
	fi
done
if [ ! -x "$broker" ]; then
	echo "valgrind.sh: no broker binary at $broker (run make)" >&2
	exit 2
fi

tmp=$(mktemp -d /tmp/lb-valgrind.XXXXXX)
rpid=""
vpid=""
cleanup() {
	[ -n "$vpid" ] && kill -KILL "$vpid" 2>/dev/null
	[ -n "$rpid" ] && kill -KILL "$rpid" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

redis_port=$(free_port)
broker_port=$(free_port)
metrics_port=$(free_port)
while [ "$metrics_port" = "$broker_port" ] || [ "$metrics_port" = "$redis_port" ]; do
	metrics_port=$(free_port)
done
tls_port=$(free_port)
while [ "$tls_port" = "$broker_port" ] || [ "$tls_port" = "$redis_port" ] ||
    [ "$tls_port" = "$metrics_port" ]; do
	tls_port=$(free_port)
done
if ! openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$tmp/tls.key" -out "$tmp/tls.crt" -days 2 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 >"$tmp/openssl.log" 2>&1; then
	echo "valgrind.sh: cannot make a certificate:" >&2
	cat "$tmp/openssl.log" >&2
	exit 1
fi

start_redis() {
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' \
		--appendonly no --daemonize no --dir "$tmp" \
		--loglevel warning >>"$tmp/redis.log" 2>&1 &
	rpid=$!
	disown "$rpid"	# stopped by pid, sometimes from the helper: no job notices
	for _ in $(seq 100); do
		redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && return 0
		sleep 0.05
	done
	echo "valgrind.sh: redis-server did not start:" >&2
	cat "$tmp/redis.log" >&2
	return 1
}
start_redis || exit 1

# An access list: app vgapp (its keys vgapp:*); auth_token is then the app
# "default" with every key, which the rest of the scenario uses.
printf 'app vgapp token-sha256 %s keys vgapp:*\n' \
	"$(printf %s vgapp-token | sha256sum | cut -d' ' -f1)" >"$tmp/acl"

valgrind --leak-check=full --show-leak-kinds=definite,indirect \
	--errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
	--track-fds=no --log-file="$tmp/valgrind.log" \
	"$broker" -b 127.0.0.1 -p "$broker_port" -r "127.0.0.1:$redis_port" \
	--prefix vg --auth_token vgtoken --metrics_port "$metrics_port" -v \
	--acl_file "$tmp/acl" \
	--tls_port "$tls_port" --tls_cert_file "$tmp/tls.crt" \
	--tls_key_file "$tmp/tls.key" --tls_handshake_timeout_ms 120000 \
	>"$tmp/broker.log" 2>&1 &
vpid=$!

# The scenario.  Reads its settings from the environment; exits non-zero
# with a message at the first unexpected reply.  Redis is restarted by
# asking the shell (it writes "restart" to a fifo and waits for "ok").
mkfifo "$tmp/ctl" "$tmp/ack"
cat >"$tmp/drive.py" <<'EOF'
import http.client, os, re, signal, socket, ssl, sys, time

PORT = int(os.environ["BPORT"])
MPORT = int(os.environ["MPORT"])
RPORT = int(os.environ["RPORT"])
TOK = r"OK [0-9]+"


class C:
    def __init__(self, auth=True):
        self.s = socket.create_connection(("127.0.0.1", PORT), timeout=20)
        self.buf = b""
        if auth:
            self.req("AUTH vgtoken", "OK")

    def line(self, timeout=20):
        self.s.settimeout(timeout)
        while b"\r\n" not in self.buf:
            d = self.s.recv(4096)
            if not d:
                raise SystemExit("connection closed; have %r" % self.buf)
            self.buf += d
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l.decode()

    def send(self, l):
        self.s.sendall(l.encode() + b"\n")

    def req(self, l, want):
        self.send(l)
        return self.expect(want, l)

    def expect(self, want, what="(reply)"):
        r = self.line()
        if not re.fullmatch(want, r):
            raise SystemExit("%s -> %r, wanted /%s/" % (what, r, want))
        return r

    def close(self):
        self.s.close()


def redis(*args):
    s = socket.create_connection(("127.0.0.1", RPORT), timeout=5)
    s.sendall(("*%d\r\n" % len(args) + "".join(
        "$%d\r\n%s\r\n" % (len(a), a) for a in args)).encode())
    r = s.recv(4096)
    s.close()
    return r


def http_status(method, path):
    h = http.client.HTTPConnection("127.0.0.1", MPORT, timeout=20)
    h.request(method, path, body="x" if method == "POST" else None)
    r = h.getresponse()
    r.read()
    h.close()
    return r.status


def wait_for(pred, what, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("timed out waiting for " + what)


a, b, c = C(), C(), C()
bad = C(auth=False)
bad.req("ACQUIRE x", "ERR NOAUTH .*")
bad.req("AUTH nope", "ERR NOAUTH .*")
bad.req("PING", "OK PONG")
bad.req("AUTH vgtoken", "OK")
bad.req("FETCH x", "ERR BADCMD .*")
bad.req("ACQUIRE", "ERR BADARG .*")
bad.req("ACQUIRE k TTL 0", "ERR BADARG .*")
bad.req("RELEASE nothing", "ERR NOTHELD .*")
bad.send("x" * 5000)
bad.expect("ERR TOOLONG .*")
bad.close()

aid = a.req("HELLO alice", "OK [0-9a-f-]{36} lockbroker/.*").split()[1]
b.req("HELLO", "OK [0-9a-f-]{36} lockbroker/.*")
t1 = a.req("ACQUIRE k1 TTL 3000", TOK)
a.req("ACQUIRE k1", t1)                       # reentrant
a.req("RELEASE k1", "OK 1")
b.req("ACQUIRE k1", "BUSY")
b.req("ACQUIRE k1 WAIT 200", "BUSY")
# A waiter woken by a local release: a handoff.
b.send("ACQUIRE k1 WAIT 20000")
wait_for(lambda: " waiters=1 " in a.req("STATS", "OK .*"), "waiters=1")
a.req("RELEASE k1", "OK 0")
b.expect(TOK, "woken waiter")
a.req("OWNER k1", "OK [0-9a-f-]{36} [0-9]+ [0-9]+")
a.req("OWNER free", "OK -")
b.req("RENEW k1", "OK 30000")      # its own (default) TTL
b.req("RENEW k1 TTL 9000", "OK 9000")
b.req("HELD", "OK 1 k1")
b.req("RELEASE k1", "OK 0")
# A client that disconnects while waiting, and one that leaves holding.
a.req("ACQUIRE k2", TOK)
c.send("ACQUIRE k2 WAIT 20000")
wait_for(lambda: " waiters=1 " in a.req("STATS", "OK .*"), "waiters=1")
c.close()
wait_for(lambda: " waiters=0 " in a.req("STATS", "OK .*"), "waiters=0")
d = C()
d.req("ACQUIRE k3", TOK)
d.req("ACQUIRE k4", TOK)
b.send("ACQUIRE k3 WAIT 20000")
d.close()
b.expect(TOK, "waiter after holder left")
b.req("RELEASE k3", "OK 0")
# Lost locks: with events on, and plainly.
a.req("EVENTS ON", "OK")
a.req("ACQUIRE lost1 TTL 600", TOK)
redis("DEL", "vg:lock:lost1")
a.expect("EVENT LOST lost1 [0-9]+", "event for lost1")
a.req("RELEASE lost1", "ERR LOST .*")
a.req("RELEASE lost1", "ERR NOTHELD .*")
a.req("EVENTS OFF", "OK")
a.req("ACQUIRE lost2", TOK)
redis("DEL", "vg:lock:lost2")
a.req("RELEASE lost2", "ERR LOST .*")
a.req("ACQUIRE lost2", TOK)
# Shared locks and semaphores (issue 13): readers together, a writer
# waiting behind them and a reader behind it, a permit handed over, kind
# errors, OWNER's forms, a permit lost in Redis, a holder leaving.
a.req("ACQUIRE rw SHARED", TOK)
r1 = b.req("ACQUIRE rw SHARED", TOK)
c = C()
c.send("ACQUIRE rw WAIT 20000")
wait_for(lambda: " waiters=1 " in a.req("STATS", "OK .*"), "writer waits")
b.req("ACQUIRE rw", "ERR BADARG .*")
b.req("ACQUIRE rw SHARED", r1)
b.req("ACQUIRE rw LIMIT 2", "ERR BADARG .*")
a.req("OWNER rw", "OK SHARED 2 .*")
a.req("RELEASE rw", "OK 0")
b.req("RELEASE rw", "OK 1")
b.req("RELEASE rw", "OK 0")
c.expect(TOK, "writer after the readers")
c.req("RELEASE rw", "OK 0")
a.req("ACQUIRE sem LIMIT 2", TOK)
b.req("ACQUIRE sem LIMIT 2", TOK)
c.req("ACQUIRE sem LIMIT 3", "ERR BADARG .*")
c.send("ACQUIRE sem LIMIT 2 WAIT 20000")
wait_for(lambda: " waiters=1 " in a.req("STATS", "OK .*"), "permit wait")
a.req("RELEASE sem", "OK 0")
c.expect(TOK, "permit handed over")
a.req("OWNER sem", "OK SEMAPHORE 2 2 .*")
a.req("EVENTS ON", "OK")
a.req("ACQUIRE lsem LIMIT 3 TTL 600", TOK)
redis("DEL", "vg:lock:lsem")
a.expect("EVENT LOST lsem [0-9]+", "event for lsem")
a.req("RELEASE lsem", "ERR LOST .*")
a.req("EVENTS OFF", "OK")
c.close()
b.req("RELEASE sem", "OK 0")
wait_for(lambda: a.req("OWNER sem", "OK .*") == "OK -", "permits freed")
# Grace sessions (issue 12): detach, RESUME, LINGER, the grace's end, a
# RESUME that takes over a connection still open, a waiter dropped with
# its connection; one more is left detached for SIGTERM's hand-over.
g = C()
_, gid, _, gsec = g.req("HELLO vg GRACE 1500",
                        "OK [-0-9a-f]{36} lockbroker/[^ ]+ [0-9a-f]{32}").split()
g.req("ACQUIRE gk", TOK)
g.req("ACQUIRE gk", TOK)
g.req("ACQUIRE gs LIMIT 2", TOK)
b.req("ACQUIRE gw", TOK)
g.send("ACQUIRE gw WAIT 20000")
time.sleep(0.2)
g.close()
time.sleep(0.2)
b.req("RELEASE gw", "OK 0")
h = C()
h.req("RESUME %s %s" % (gid, "0" * 32), "ERR NOAUTH .*")
h.req("RESUME %s %s" % (gid, gsec), "OK 2 (gk gs|gs gk)")
h.req("RELEASE gs", "OK 0")
h.req("RELEASE gk LINGER 300", "OK 1")
h.req("RELEASE gk LINGER 300", "OK 0")
h.req("ACQUIRE gk2", TOK)
o = C()
o.req("RESUME %s %s" % (gid, gsec), "OK 1 gk2")
try:
    h.line(timeout=5)
    raise SystemExit("the resumed-over connection got a line")
except SystemExit as e:
    if "connection closed" not in str(e):
        raise
o.close()
wait_for(lambda: "grace_expired=1" in a.req("STATS", "OK .*"), "grace end")
q = C()
q.req("RESUME %s %s" % (gid, gsec), "ERR NOSESSION .*")
x = C()
x.req("HELLO vgx GRACE 60000", "OK .*")
x.req("ACQUIRE xk", TOK)
x.close()
# TLS: a session, a failed handshake, a reload under the live session,
# and a connection left in its handshake for SIGTERM.
class T(C):
    def __init__(self):
        ctx = ssl.create_default_context(cafile=os.environ["TCERT"])
        raw = socket.create_connection(("127.0.0.1", int(os.environ["TPORT"])),
                                       timeout=20)
        self.s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        self.buf = b""
        self.req("AUTH vgtoken", "OK")


t = T()
t.req("ACQUIRE tk", TOK)
t.req("STATS", "OK .* tls_sessions=1 .*")
junk = socket.create_connection(("127.0.0.1", int(os.environ["TPORT"])),
                                timeout=20)
junk.sendall(b"PING\n" * 100)                # not TLS: refused
try:
    if junk.recv(4096)[:1] not in (b"", b"\x15"):    # EOF or an alert
        raise SystemExit("the TLS port answered plain text")
except ConnectionResetError:     # closed with our bytes unread: a reset
    pass
junk.close()
stalled = socket.create_connection(("127.0.0.1", int(os.environ["TPORT"])))
os.kill(int(os.environ["VPID"]), signal.SIGHUP)
t2 = T()
wait_for(lambda: "tls_handshake_failures=1" in t2.req("STATS", "OK .*"),
         "the failed handshake counted")
t.req("PING", "OK PONG")
t2.req("QUIT", "OK")
# Metrics.
if http_status("GET", "/metrics") != 200:
    raise SystemExit("GET /metrics did not answer 200")
if http_status("POST", "/metrics") < 400 or http_status("GET", "/other") != 404:
    raise SystemExit("/metrics accepts what it should not")
# Access lists (issue 15): an app's session, ERR DENIED, OWNER hiding, a
# reload that replaces the list under a live session, a broken file.
ACL, LOG = os.environ["ACL"], os.environ["BLOG"]
p = C(auth=False)
p.req("AUTH vgapp-token", "OK")
p.req("ACQUIRE vgapp:1", TOK)
p.req("ACQUIRE other WAIT 1000", "ERR DENIED .*")
p.req("RELEASE other", "ERR DENIED .*")
p.req("OWNER vgapp:1", "OK [0-9a-f-]{36} [0-9]+ [0-9]+")
b.req("ACQUIRE vgapp:2", TOK)
p.req("OWNER vgapp:2", r"OK \? [0-9]+ [0-9]+")
with open(ACL, "a") as f:
    f.write("app vg2 token-sha256 %s keys x\n" % ("0" * 64))
os.kill(int(os.environ["VPID"]), 1)
wait_for(lambda: "vg2:0" in a.req("STATS", "OK .*"), "the reloaded list")
p.req("RELEASE vgapp:1", "OK 0")
p.req("AUTH vgapp-token", "OK")
with open(ACL, "a") as f:
    f.write("app [bad] token-sha256 x keys x\n")
os.kill(int(os.environ["VPID"]), 1)
wait_for(lambda: "reload failed" in open(LOG).read(), "the failed reload")
q2 = C(auth=False)
q2.req("AUTH vgapp-token", "OK")
q2.req("ACQUIRE vgapp:3", TOK)
q2.close()
p.req("QUIT", "OK")
b.req("RELEASE vgapp:2", "OK 0")
# Redis goes away and comes back.
with open(os.environ["CTL"], "w") as f:
    f.write("stop\n")
with open(os.environ["ACK"]) as f:
    f.read()
wait_for(lambda: " redis=up " not in a.req("STATS", "OK .*"), "redis down")
a.req("ACQUIRE during", "ERR UNAVAILABLE .*")
with open(os.environ["CTL"], "w") as f:
    f.write("start\n")
with open(os.environ["ACK"]) as f:
    f.read()
wait_for(lambda: " redis=up " in a.req("STATS", "OK .*"), "redis up")
# the restart starts a 5 s lock delay (a new tenure); the WAIT must
# outlast it with room for valgrind's slowness
b.req("ACQUIRE after WAIT 15000", TOK)
a.req("PING", "OK PONG")
a.req("QUIT", "OK")
# b keeps "after" and "lost2" is a's (released by QUIT): SIGTERM next.
print("scenario: ok")
EOF

# Wait for the broker (valgrind starts slowly).
ready=""
for _ in $(seq 200); do
	if ! kill -0 "$vpid" 2>/dev/null; then break; fi
	if python3 - "$broker_port" <<'EOF' 2>/dev/null
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
s.sendall(b"PING\n")
sys.exit(0 if s.recv(64).startswith(b"OK PONG") else 1)
EOF
	then ready=1; break; fi
	sleep 0.1
done
if [ -z "$ready" ]; then
	echo "valgrind.sh: the broker did not come up" >&2
	cat "$tmp/broker.log" "$tmp/valgrind.log" >&2
	exit 1
fi

# The Redis stop/start helper, then the scenario (30 s at most).
(
	while read -r cmd <"$tmp/ctl"; do
		case $cmd in
		stop) kill -KILL "$rpid" 2>/dev/null; wait "$rpid" 2>/dev/null ;;
		start)
			for _ in $(seq 40); do start_redis 2>/dev/null && break; sleep 0.1; done ;;
		esac
		echo ok >"$tmp/ack"
		[ "$cmd" = start ] && echo "$rpid" >"$tmp/rpid"
	done
) &
helper=$!
TPORT=$tls_port TCERT="$tmp/tls.crt" VPID=$vpid \
BPORT=$broker_port MPORT=$metrics_port RPORT=$redis_port CTL="$tmp/ctl" \
	ACK="$tmp/ack" ACL="$tmp/acl" BLOG="$tmp/broker.log" VPID=$vpid \
	timeout 30 python3 "$tmp/drive.py"
scenario=$?
if [ "$scenario" = 0 ] && ! grep -q "TLS certificates reloaded" "$tmp/broker.log"; then
	echo "valgrind.sh: SIGHUP did not reload the TLS certificate" >&2
	scenario=1
fi
kill "$helper" 2>/dev/null
wait "$helper" 2>/dev/null
[ -s "$tmp/rpid" ] && rpid=$(cat "$tmp/rpid")

# SIGTERM: the broker releases what is still held and exits.
kill -TERM "$vpid" 2>/dev/null
rc=""
for _ in $(seq 100); do
	if ! kill -0 "$vpid" 2>/dev/null; then
		wait "$vpid"
		rc=$?
		break
	fi
	sleep 0.1
done
if [ -z "$rc" ]; then
	echo "valgrind.sh: the broker ignored SIGTERM for 10 s" >&2
	kill -KILL "$vpid" 2>/dev/null
	wait "$vpid" 2>/dev/null
	rc=124
fi
vpid=""

summary=$(grep -E "ERROR SUMMARY" "$tmp/valgrind.log" | tail -1)
echo "valgrind: ${summary:-no ERROR SUMMARY line}"
grep -E "definitely lost:|indirectly lost:" "$tmp/valgrind.log" | sed 's/^==[0-9]*== */valgrind: /'
if [ "$scenario" != 0 ] || [ "$rc" != 0 ]; then
	echo "valgrind.sh: FAILED (scenario exit $scenario, broker under valgrind exit $rc)" >&2
	echo "--- valgrind log" >&2
	cat "$tmp/valgrind.log" >&2
	echo "--- broker log (last 40 lines)" >&2
	tail -40 "$tmp/broker.log" >&2
	exit 1
fi
echo "valgrind.sh: ok"
