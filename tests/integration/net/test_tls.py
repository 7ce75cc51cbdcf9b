"""
test_tls.py - TLS for clients (issue 15, item 1) and its counters.

Certificates are made by the openssl CLI in a temp dir (setUpModule): a
CA, a server certificate for localhost / 127.0.0.1, a second one for the
rotation test, an expired one, a client certificate from the CA (CN
app-one), one from another CA, an expired client certificate, one whose
CN names no app and two with two CNs each.  A real
broker (tls_port beside its plain port) on the module's real Redis.  Each
test fails on a broker without TLS (no tls_port option: it does not start).
"""

import hashlib
import os
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import harness
from harness import (BrokerTestCase, Client, free_port, ms_since,
                     parse_stats, wait_until)

CERTS = None            # the temp dir, made by setUpModule


def openssl(*args):
    r = subprocess.run(["openssl"] + list(args), cwd=CERTS,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError("openssl %s: %s" % (" ".join(args), r.stdout))


def make_key(name):
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt",
            "ec_paramgen_curve:P-256", "-out", name + ".key")


def make_ca(name):
    make_key(name)
    openssl("req", "-x509", "-new", "-key", name + ".key", "-days", "2",
            "-subj", "/CN=" + name, "-out", name + ".crt")


def make_cert(name, ca, cn, serial, days=2, server=True):
    """A certificate signed by ca; days -1 makes one already expired (its
    notAfter a day before its notBefore, which is now)."""
    make_key(name)
    openssl("req", "-new", "-key", name + ".key", "-subj", "/CN=" + cn,
            "-out", name + ".csr")
    with open(os.path.join(CERTS, name + ".ext"), "w") as f:
        if server:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                    "extendedKeyUsage=serverAuth\n")
        else:
            f.write("extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt",
            "-CAkey", ca + ".key", "-set_serial", str(serial), "-days",
            str(days), "-extfile", name + ".ext", "-out", name + ".crt")


def path(name):
    return os.path.join(CERTS, name)


def setUpModule():
    global CERTS
    harness.module_redis_start()
    CERTS = tempfile.mkdtemp(prefix="lbt-tls-")
    make_ca("ca")
    make_ca("otherca")
    make_cert("server", "ca", "localhost", 1001)
    make_cert("server2", "ca", "localhost", 1002)
    make_cert("expired", "ca", "localhost", 1003, days=-1)
    make_cert("client", "ca", "app-one", 2001, server=False)
    make_cert("stranger", "otherca", "app-x", 2002, server=False)
    make_cert("oldclient", "ca", "app-old", 2003, days=-1, server=False)
    make_cert("nobody", "ca", "no-such-app", 2004, server=False)
    # two CNs in one subject (-subj "/CN=app-one/CN=other"), both orders
    make_cert("twocn", "ca", "app-one/CN=other", 2005, server=False)
    make_cert("twocn2", "ca", "other/CN=app-one", 2006, server=False)


def tearDownModule():
    harness.module_redis_stop()
    if CERTS:
        shutil.rmtree(CERTS, ignore_errors=True)


def client_context(cert=None, cafile="ca.crt"):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(path(cafile))
    if cert is not None:
        ctx.load_cert_chain(path(cert + ".crt"), path(cert + ".key"))
    return ctx


class TLSClient(Client):
    """A harness Client over TLS (verifying the broker as 127.0.0.1)."""

    def __init__(self, port, cert=None, timeout=5.0, ctx=None):
        self.timeout = timeout
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ctx = ctx or client_context(cert)
        try:
            self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        except BaseException:
            raw.close()
            raise
        self.buf = b""
        self.eof = False

    def _recv(self, timeout):
        try:
            return Client._recv(self, timeout)
        except (ssl.SSLError, ConnectionError):
            # an alert from the broker (a refused certificate) or a
            # reset: the session is over either way
            self.eof = True
            return b""

    def serial(self):
        return ssl.DER_cert_to_PEM_cert(
            self.sock.getpeercert(binary_form=True)), \
            self.sock.getpeercert()["serialNumber"]


class MemTLS:
    """TLS over a plain socket through memory BIOs, so that the test
    controls how input ends: a close_notify (unwrap) or only a TCP FIN
    (shutdown(SHUT_WR) of the socket), while still reading replies."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = client_context().wrap_bio(self.inc, self.out,
                                             server_hostname="127.0.0.1")
        while True:
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._pump()
        self._pump(read=False)

    def _pump(self, read=True):
        data = self.out.read()
        if data:
            self.sock.sendall(data)
        if read:
            got = self.sock.recv(65536)
            if not got:
                self.inc.write_eof()
            else:
                self.inc.write(got)
            return got

    def send(self, text):
        self.obj.write(text.encode())
        self._pump(read=False)

    def record(self, text):
        """The TLS record(s) of text, not sent: the test sends them (or
        part of them) itself, through self.sock."""
        self.obj.write(text.encode())
        return self.out.read()

    def readline(self, timeout=5.0):
        data = b""
        deadline = time.monotonic() + timeout
        while not data.endswith(b"\n"):
            try:
                data += self.obj.read(1)
                continue
            except ssl.SSLWantReadError:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no reply line, got %r" % data)
            self.sock.settimeout(left)
            if not self._pump():
                raise AssertionError("EOF, got %r" % data)
        return data.decode().rstrip("\r\n")

    def close_notify(self):
        try:
            self.obj.unwrap()
        except ssl.SSLWantReadError:
            pass
        self._pump(read=False)

    def fin(self):
        self.sock.shutdown(socket.SHUT_WR)

    def read_all(self, timeout=5.0):
        """Every byte until the broker ends the connection."""
        data = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                while True:
                    got = self.obj.read(65536)
                    if not got:
                        return data, "close_notify"
                    data += got
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                return data, "close_notify"
            except ssl.SSLError as e:
                return data, "error %s" % e
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self._pump():
                    return data, "eof"
            except socket.timeout:
                break
        return data, "timeout"

    def close(self):
        self.sock.close()


class TLSCase(BrokerTestCase):
    def tls_broker(self, *extra, cert="server", **kw):
        self.tls_port = free_port()
        return self.start_broker("--tls_port", self.tls_port,
                                 "--tls_cert_file", path(cert + ".crt"),
                                 "--tls_key_file", path(cert + ".key"),
                                 *extra, **kw)

    def tls(self, cert=None, timeout=5.0, port=None):
        c = TLSClient(port or self.tls_port, cert=cert, timeout=timeout)
        self.addCleanup(c.close)
        return c

    def refused(self, cert=None, cafile="ca.crt"):
        """True when the broker refuses the handshake (with TLS 1.3 the
        client may only see it when it reads)."""
        try:
            c = TLSClient(self.tls_port, cert=cert, timeout=3.0)
        except (ssl.SSLError, ConnectionError):
            return True
        self.addCleanup(c.close)
        try:
            c.send("PING")
            return c.wait_closed(3.0) and b"PONG" not in c.buf
        except (ssl.SSLError, ConnectionError):
            return True


class TestProtocolOverTLS(TLSCase):
    def test_whole_protocol_through_tls(self):
        b = self.tls_broker("--metrics_port", free_port())
        a, w = self.tls(), self.tls()
        plain = self.connect(b)
        aid = a.hello("tls-a")
        self.assertEqual(a.req("EVENTS ON"), "OK")
        tok = self.assertToken(a.req("ACQUIRE t:1"))
        w.send("ACQUIRE t:1 WAIT 5000")
        self.assertTrue(w.no_reply(0.2), "the waiter was answered at once")
        self.assertRegex(plain.req("OWNER t:1"),
                         r"\AOK %s \d+ %d\Z" % (aid, tok))
        self.assertEqual(a.req("RELEASE t:1"), "OK 0")
        tok2 = self.assertToken(w.readline())
        self.assertGreater(tok2, tok)
        self.assertEqual(a.req("HELD"), "OK 0")
        st = self.stats(plain)
        self.assertEqual(st["tls_sessions"], "2")
        self.assertEqual(st["sessions"], "3")
        self.assertGreaterEqual(int(st["tls_handshakes"]), 2)
        self.assertEqual(st["tls_handshake_failures"], "0")
        names = list(st)
        i = names.index("tls_sessions")
        self.assertEqual(names[i:i + 4], ["tls_sessions", "tls_handshakes",
                                          "tls_handshake_failures",
                                          "tls_handshaking"])
        self.assertEqual(a.req("QUIT"), "OK")
        self.assertTrue(a.closed_by_peer(2.0))
        import urllib.request
        page = urllib.request.urlopen(
            "http://127.0.0.1:%s/metrics" % b.extra[b.extra.index(
                "--metrics_port") + 1], timeout=5).read().decode()
        self.assertRegex(page, r"(?m)^lockbroker_tls_handshakes_total [1-9]")
        self.assertIn("lockbroker_tls_handshake_failures_total 0", page)
        self.assertRegex(page, r"(?m)^lockbroker_tls_sessions 1$")

    def test_events_lost_pushed_over_tls(self):
        self.tls_broker()
        a = self.tls()
        self.assertEqual(a.req("EVENTS ON"), "OK")
        tok = self.assertToken(a.req("ACQUIRE ev:1 TTL 300"))
        self.redis.cli("SET", self.lock_key("ev:1"), "someone-else")
        line = a.readline(timeout=3.0)
        self.assertEqual(line, "EVENT LOST ev:1 %d" % tok)

    def test_limits_and_backpressure_as_for_plain_sessions(self):
        b = self.tls_broker("--max_line", 128)
        # a line over max_line: ERR TOOLONG, then the broker closes
        c = self.tls()
        self.assertErr(c.req("PING " + "x" * 200), "TOOLONG")
        self.assertTrue(c.closed_by_peer(2.0))
        # a client that pipelines without reading is paused, then served
        # in full once it reads (decrypted bytes left inside the SSL must
        # not stall the resumed session)
        p, probe = self.tls(), self.connect(b)
        chunk, n = b"PING\n" * 1000, 0
        p.sock.setblocking(False)
        deadline = time.monotonic() + 20
        while self.stats(probe)["paused"] == "0":
            self.assertLess(time.monotonic(), deadline, "never paused")
            try:
                p.sock.send(chunk)      # all of it, or nothing
                n += 1000
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                time.sleep(0.01)
        p.sock.setblocking(True)
        for i in range(n):
            self.assertEqual(p.readline(timeout=5.0), "OK PONG", i)
        self.assertEqual(p.req("PING"), "OK PONG")

    def test_close_notify_ends_input_as_a_fin_does(self):
        self.tls_broker()
        m = MemTLS(self.tls_port)
        self.addCleanup(m.close)
        m.send("ACQUIRE eof:cn WAIT 5000\nPING\nOWNER nobody")
        m.close_notify()
        data, end = m.read_all()
        lines = data.decode().split("\r\n")
        self.assertRegex(lines[0], r"\AOK \d+\Z")
        # the last line, without LF, is run: the close_notify says the
        # stream is whole
        self.assertEqual(lines[1:], ["OK PONG", "OK -", ""])
        self.assertIn(end, ("close_notify", "eof"))
        c = self.tls()
        wait_until(lambda: c.req("OWNER eof:cn") == "OK -", 2.0,
                   what="the half-closed session's locks released")

    def test_fin_without_close_notify_runs_no_cut_off_line(self):
        # issue 15: someone on the path cuts the stream at a record
        # boundary and sends a FIN.  "ACQUIRE tr:ab" of "ACQUIRE
        # tr:abcdef TTL 60000" must not be granted, and the session ends
        # as a lost one (its locks released).
        self.tls_broker()
        m = MemTLS(self.tls_port)
        self.addCleanup(m.close)
        m.send("ACQUIRE tr:held\n")
        self.assertToken(m.readline())
        first = m.record("PING\nACQUIRE tr:ab")
        m.record("cdef TTL 60000\r\n")           # never sent
        m.sock.sendall(first)
        m.fin()
        data, end = m.read_all()
        self.assertEqual(data, b"OK PONG\r\n", end)
        c = self.tls()
        self.assertEqual(c.req("OWNER tr:ab"), "OK -")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("tr:ab")),
                         0)
        wait_until(lambda: c.req("OWNER tr:held") == "OK -", 2.0,
                   what="the lost session's lock released")
        wait_until(lambda: self.stats(c)["tls_sessions"] == "1", 2.0,
                   what="the truncated session ended")

    def test_partial_record_costs_no_cpu(self):
        # issue 15: a record held back by its last bytes left OpenSSL
        # with part of a record (SSL_has_pending) and the broker re-read
        # it every loop turn: ~97% of a core, before any AUTH
        b = self.tls_broker()
        m = MemTLS(self.tls_port)
        self.addCleanup(m.close)
        m.send("PING\n")
        self.assertEqual(m.readline(), "OK PONG")
        rec = m.record("PING\n")
        m.sock.sendall(rec[:-3])

        def ticks():
            with open("/proc/%d/stat" % b.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])   # utime + stime

        time.sleep(0.1)             # the broker has read what came
        t0, c0 = time.monotonic(), ticks()
        time.sleep(1.0)
        used = ticks() - c0
        hz = os.sysconf("SC_CLK_TCK")
        share = used / hz / (time.monotonic() - t0)
        sys.stderr.write("[broker CPU while a record is held back: "
                         "%.0f%%] " % (share * 100))
        self.assertLess(share, 0.20, "the broker used %.0f%% of a core "
                        "waiting for the rest of a record" % (share * 100))
        m.sock.sendall(rec[-3:])
        self.assertEqual(m.readline(), "OK PONG")

    def test_port_0_serves_tls_only(self):
        self.tls_port = free_port()
        b = self.start_broker("--port", "0", "--tls_port", self.tls_port,
                              "--tls_cert_file", path("server.crt"),
                              "--tls_key_file", path("server.key"),
                              wait_ready=False)
        wait_until(lambda: "redis=up" in TLSClient(
            self.tls_port, timeout=1.0).req("STATS"), 5.0,
            what="the TLS-only broker ready")
        with self.assertRaises(ConnectionRefusedError):
            Client(b.port, timeout=1.0)
        self.assertEqual(self.tls().req("PING"), "OK PONG")


class TestCertificates(TLSCase):
    def test_mutual_tls_refuses_no_cert_and_other_ca(self):
        b = self.tls_broker("--tls_ca_cert_file", path("ca.crt"),
                            "--tls_auth_clients", "yes")
        self.assertTrue(self.refused(), "no client certificate accepted")
        self.assertTrue(self.refused("stranger"),
                        "a certificate from another CA accepted")
        self.assertTrue(self.refused("oldclient"),
                        "an expired client certificate accepted")
        c = self.tls("client")
        self.assertEqual(c.req("PING"), "OK PONG")
        st = self.stats(self.connect(b))
        self.assertEqual(st["tls_handshake_failures"], "3")
        self.assertEqual(st["tls_sessions"], "1")
        self.assertIn("CN app-one", b.log())
        log = b.log()
        self.assertRegex(log, r"TLS handshake from 127\.0\.0\.1 failed: ")
        # one line per peer per interval: the next two were only counted
        self.assertEqual(len(re.findall(r"TLS handshake from 127\.0\.0\.1 "
                                        r"failed", log)), 1, log)

    def test_optional_client_certificates(self):
        b = self.tls_broker("--tls_ca_cert_file", path("ca.crt"),
                            "--tls_auth_clients", "optional")
        self.assertEqual(self.tls().req("PING"), "OK PONG")
        self.assertEqual(self.tls("client").req("PING"), "OK PONG")
        self.assertTrue(self.refused("stranger"),
                        "optional: a certificate that does not verify was "
                        "accepted")
        self.assertEqual(self.stats(self.connect(b))["tls_sessions"], "2")

    def test_expired_server_certificate_refused_by_client(self):
        b = self.tls_broker(cert="expired")
        with self.assertRaises(ssl.SSLCertVerificationError) as cm:
            TLSClient(self.tls_port)
        self.assertIn("expired", str(cm.exception))
        self.assertIn("has expired", b.log())

    def test_start_checks(self):
        def check(*args):
            r = subprocess.run([harness.BROKER_BIN, "-t"] + list(args),
                               stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=10)
            return r.returncode, r.stderr

        tls = ["--tls_port", "7799"]
        rc, err = check(*tls)
        self.assertEqual(rc, 2)
        self.assertIn("tls_port needs tls_cert_file and tls_key_file", err)
        rc, err = check(*tls, "--tls_cert_file", path("nope.crt"),
                        "--tls_key_file", path("server.key"))
        self.assertEqual(rc, 2)
        self.assertIn("nope.crt: No such file", err)
        rc, err = check(*tls, "--tls_cert_file", path("server.crt"),
                        "--tls_key_file", path("client.key"))
        self.assertEqual(rc, 2)
        self.assertIn("does not match", err)
        rc, err = check(*tls, "--tls_cert_file", path("server.crt"),
                        "--tls_key_file", path("server.key"),
                        "--tls_auth_clients", "yes")
        self.assertEqual(rc, 2)
        self.assertIn("needs tls_ca_cert_file", err)
        rc, err = check("--tls_protocols", "TLSv1.1")
        self.assertEqual(rc, 2)
        self.assertIn("tls_protocols", err)
        rc, err = check("--port", "0")
        self.assertEqual(rc, 2)
        self.assertIn("port 0", err)
        rc, err = check(*tls, "--tls_cert_file", path("server.crt"),
                        "--tls_key_file", path("server.key"),
                        "--tls_protocols", "tlsv1.3")
        self.assertEqual(rc, 0, err)

    def test_tls_protocols_limits_versions(self):
        self.tls_broker("--tls_protocols", "TLSv1.3")
        ctx = client_context()
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with self.assertRaises((ssl.SSLError, ConnectionError)):
            TLSClient(self.tls_port, ctx=ctx).req("PING")
        self.assertEqual(self.tls().req("PING"), "OK PONG")


class TestCertificateNamesApp(TLSCase):
    # issue 15: with an access list, the CN of a verified client
    # certificate may name the session's app instead of an AUTH token
    def test_cn_of_a_verified_certificate_is_the_app(self):
        tok = "t" * 32
        acl = os.path.join(CERTS, "acl-%s" % self.prefix)
        with open(acl, "w") as f:
            f.write("app app-one token-sha256 %s keys one:*\n"
                    "app other token-sha256 %s keys two:*\n" % (
                        hashlib.sha256(b"x" * 32).hexdigest(),
                        hashlib.sha256(tok.encode()).hexdigest()))
        b = self.tls_broker("--tls_ca_cert_file", path("ca.crt"),
                            "--tls_auth_clients", "yes", "--acl_file", acl,
                            auth=tok)
        c = self.tls("client")                      # CN app-one
        self.assertToken(c.req("ACQUIRE one:1"))
        self.assertErr(c.req("ACQUIRE two:1"), "DENIED")
        self.assertEqual(c.req("RELEASE one:1"), "OK 0")
        n = self.tls("nobody")                      # CN names no app
        self.assertErr(n.req("ACQUIRE one:1"), "NOAUTH")
        self.assertEqual(n.req("AUTH " + tok), "OK")
        self.assertToken(n.req("ACQUIRE two:1"))
        self.assertErr(n.req("ACQUIRE one:1"), "DENIED")
        wait_until(lambda: self.stats(c)["app_sessions"] ==
                   "app-one:1,other:1", 2.0, what="app_sessions")
        p = self.connect(b)                         # plain: AUTH it is
        self.assertErr(p.req("ACQUIRE one:1"), "NOAUTH")

    def test_certificate_with_two_cns_names_no_app(self):
        # issue 15: "CN=reports, CN=billing" was app billing (the last
        # CN); which of several is "the" CN is a convention, so a
        # certificate with more than one CN names no app, whatever order
        acl = os.path.join(CERTS, "acl2-%s" % self.prefix)
        with open(acl, "w") as f:
            f.write("app app-one token-sha256 %s keys one:*\n"
                    "app other token-sha256 %s keys two:*\n" % (
                        hashlib.sha256(b"x" * 32).hexdigest(),
                        hashlib.sha256(b"y" * 32).hexdigest()))
        b = self.tls_broker("--tls_ca_cert_file", path("ca.crt"),
                            "--tls_auth_clients", "yes", "--acl_file", acl,
                            auth="y" * 32)
        for cert in ("twocn", "twocn2"):
            c = self.tls(cert)
            self.assertErr(c.req("ACQUIRE one:1"), "NOAUTH")
            self.assertErr(c.req("ACQUIRE two:1"), "NOAUTH")
        self.assertNotIn(", CN ", b.log())
        self.assertEqual(self.stats(self.tls("client"))["app_sessions"],
                         "app-one:1,other:0")


class TestStalledHandshakes(TLSCase):
    STALLED = 500
    DEADLINE_MS = 1500

    def test_500_stalled_handshakes_do_not_stall_others_and_end(self):
        b = self.tls_broker("--tls_handshake_timeout_ms", self.DEADLINE_MS)
        good_tls, plain = self.tls(), self.connect(b)
        stalled = []
        try:
            t0 = time.monotonic()
            for _ in range(self.STALLED):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                stalled.append(s)
                s.connect(("127.0.0.1", self.tls_port))
            wait_until(lambda: self.stats(plain)["tls_handshaking"] ==
                       str(self.STALLED), 2.0,
                       what="every stalled handshake accepted")
            # the others are served as usual while those stall
            worst = 0.0
            for i in range(20):
                for c in (good_tls, plain):
                    r, ms = c.timed_req("ACQUIRE st:%d" % i)
                    self.assertToken(r)
                    worst = max(worst, ms)
                    r, ms = c.timed_req("RELEASE st:%d" % i)
                    self.assertEqual(r, "OK 0")
                    worst = max(worst, ms)
            self.assertLess(worst, 250, "a request took %.0f ms" % worst)
            fresh, ms = None, 0.0
            t1 = time.monotonic()
            fresh = self.tls()
            self.assertEqual(fresh.req("PING"), "OK PONG")
            self.assertLess(ms_since(t1), 500, "a new TLS client waited")
            self.assertLess(ms_since(t0), self.DEADLINE_MS,
                            "the test was too slow to check before the "
                            "deadline")
            # at the deadline every stalled one is closed
            open_ = set(range(self.STALLED))
            deadline = t0 + (self.DEADLINE_MS + 2000) / 1000.0
            while open_ and time.monotonic() < deadline:
                ready, _, _ = select.select(
                    [stalled[i] for i in open_], [], [], 0.2)
                for s in ready:
                    try:
                        data = s.recv(1)
                    except ConnectionError:
                        data = b""
                    if data == b"":
                        open_.discard(stalled.index(s))
            self.assertEqual(len(open_), 0, "%d stalled handshakes still "
                             "open after the deadline" % len(open_))
            self.assertGreaterEqual(ms_since(t0), self.DEADLINE_MS - 100)
        finally:
            for s in stalled:
                s.close()
        st = self.stats(plain)
        self.assertEqual(st["tls_handshaking"], "0")
        self.assertEqual(st["tls_handshake_failures"], str(self.STALLED))
        self.assertEqual(st["tls_sessions"], "2")
        self.assertEqual(st["sessions"], "3")
        self.assertIn("not done within tls_handshake_timeout_ms", b.log())
        # 500 failures from one address: one log line
        self.assertEqual(b.log().count("TLS handshake from 127.0.0.1 "
                                       "failed"), 1)
        self.assertEqual(good_tls.req("PING"), "OK PONG")


class TestRotation(TLSCase):
    def test_sighup_serves_new_cert_and_keeps_live_sessions(self):
        d = tempfile.mkdtemp(prefix="lbt-rot-")
        self.addCleanup(shutil.rmtree, d, True)
        crt, key = os.path.join(d, "s.crt"), os.path.join(d, "s.key")
        shutil.copy(path("server.crt"), crt)
        shutil.copy(path("server.key"), key)
        self.tls_port = free_port()
        b = self.start_broker("--tls_port", self.tls_port,
                              "--tls_cert_file", crt, "--tls_key_file", key)
        live = self.tls()
        self.assertEqual(live.serial()[1], "03E9")       # 1001
        self.assertToken(live.req("ACQUIRE rot:1"))
        shutil.copy(path("server2.crt"), crt)
        shutil.copy(path("server2.key"), key)
        os.kill(b.pid, signal.SIGHUP)
        wait_until(lambda: "TLS certificates reloaded" in b.log(), 3.0,
                   what="the reload")
        self.assertEqual(self.tls().serial()[1], "03EA")  # 1002
        # the live session kept its connection and its lock
        self.assertEqual(live.req("PING"), "OK PONG")
        self.assertEqual(live.req("HELD"), "OK 1 rot:1")
        self.assertEqual(live.req("RELEASE rot:1"), "OK 0")
        # a bad rotation (key of another certificate) keeps the old one
        shutil.copy(path("client.key"), key)
        os.kill(b.pid, signal.SIGHUP)
        wait_until(lambda: "reload failed" in b.log(), 3.0,
                   what="the failed reload logged")
        self.assertIn("does not match", b.log())
        self.assertEqual(self.tls().serial()[1], "03EA")
        self.assertEqual(live.req("PING"), "OK PONG")


class TestReloadAllOrNothing(TLSCase):
    # issue 15: bad certificate files used to fail only the TLS part of a
    # reload: the new auth_token / access list / tls_auth_clients were
    # put in force beside the old TLS context
    def write_conf(self, conf, crt, key, auth_clients, token):
        with open(conf, "w") as f:
            f.write("tls_cert_file %s\ntls_key_file %s\n"
                    "tls_ca_cert_file %s\ntls_auth_clients %s\n" % (
                        crt, key, path("ca.crt"), auth_clients))
            if token:
                f.write("auth_token %s\n" % token)

    def reload(self, b):
        mark = len(b.log())
        os.kill(b.pid, signal.SIGHUP)
        wait_until(lambda: re.search(r"configuration reloaded|reload "
                                     r"failed", b.log()[mark:]), 5.0,
                   what="the reload")
        return b.log()[mark:]

    def test_bad_cert_file_fails_the_whole_reload(self):
        d = tempfile.mkdtemp(prefix="lbt-rel-")
        self.addCleanup(shutil.rmtree, d, True)
        crt, key = os.path.join(d, "s.crt"), os.path.join(d, "s.key")
        conf = os.path.join(d, "b.conf")
        shutil.copy(path("server.crt"), crt)
        shutil.copy(path("server.key"), key)
        self.write_conf(conf, crt, key, "no", None)
        self.tls_port = free_port()
        b = self.start_broker("-c", conf, "--tls_port", self.tls_port)
        self.assertToken(self.tls().req("ACQUIRE rl:1"))
        # new conf: client certificates required and a token; but the
        # certificate file is broken
        self.write_conf(conf, crt, key, "yes", "s" * 32)
        with open(crt, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nbroken\n")
        log = self.reload(b)
        self.assertIn("reload failed, configuration unchanged: "
                      "tls_cert_file", log)
        self.assertNotIn("configuration reloaded", log)
        self.assertNotIn("access list", log)
        # the old behaviour in full: no certificate, no AUTH
        c = self.tls()
        self.assertToken(c.req("ACQUIRE rl:2"))
        self.assertToken(self.connect(b).req("ACQUIRE rl:3"))
        # the files mended: the new conf in force, TLS and all
        shutil.copy(path("server.crt"), crt)
        log = self.reload(b)
        self.assertIn("configuration reloaded", log)
        self.assertIn("TLS certificates reloaded", log)
        self.assertTrue(self.refused(), "no client certificate accepted")
        self.assertErr(self.tls("client").req("ACQUIRE rl:4"), "NOAUTH")
        self.assertErr(self.connect(b).req("ACQUIRE rl:5"), "NOAUTH")
        self.assertEqual(c.req("PING"), "OK PONG")      # live: kept


class TestClients(TLSCase):
    def test_lockctl_tls(self):
        self.tls_broker("--tls_ca_cert_file", path("ca.crt"),
                        "--tls_auth_clients", "optional")
        base = [harness.LOCKCTL_BIN, "-H", "127.0.0.1:%d" % self.tls_port,
                "--tls", "--cacert", path("ca.crt")]
        r = subprocess.run(base + ["lc:1", "--", "sh", "-c",
                                   "echo token=$LOCKBROKER_TOKEN"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\Atoken=\d+\n\Z")
        r = subprocess.run(base + ["--cert", path("client.crt"), "--key",
                                   path("client.key"), "stats"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        st = parse_stats(r.stdout.strip())
        self.assertEqual(st["tls_sessions"], "1")
        # the broker's certificate is verified: not against another CA
        r = subprocess.run(base[:-1] + [path("otherca.crt"), "ping"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=20)
        self.assertEqual(r.returncode, 1)
        self.assertIn("certificate", r.stderr)
        r = subprocess.run(base[:3] + ["--cacert", path("ca.crt"), "ping"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=20)
        self.assertEqual(r.returncode, 64, "--cacert without --tls")

    def run_example(self, argv):
        env = dict(os.environ, LOCKBROKER_HOST="127.0.0.1",
                   LOCKBROKER_PORT=str(self.tls_port))
        return subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=30)

    def test_python_example_over_tls(self):
        b = self.tls_broker("--tls_ca_cert_file", path("ca.crt"),
                            "--tls_auth_clients", "yes")
        r = self.run_example([sys.executable, os.path.join(
            harness.REPO, "examples", "lock.py"), "--tls", "--cacert",
            path("ca.crt"), "--cert", path("client.crt"), "--key",
            path("client.key"), "ex:py", "1000"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"acquired ex:py with fencing token \d+")
        self.assertIn("CN app-one", b.log())

    def test_node_example_over_tls(self):
        node = shutil.which("node") or shutil.which("nodejs")
        if node is None:
            self.skipTest("node is not installed")
        self.tls_broker()
        r = self.run_example([node, os.path.join(
            harness.REPO, "examples", "lock.js"), "--tls", "--cacert",
            path("ca.crt"), "ex:js", "1000"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"acquired ex:js with fencing token \d+")
