#!/usr/bin/env python3
"""
servers.py - the one helper every client library's conformance runner
drives: it starts Redis and brokers on free ports of 127.0.0.1, performs
the transcripts' fault steps, tells the runner the brokers' addresses, and
stops everything by pid, even when the runner dies.

It speaks JSON lines on stdin/stdout (README.md in this folder, "The
helper"): a request object per line in, one flat reply object per line
out.  The processes come from tests/integration/harness.py (the same
Redis and Broker classes the integration tests use), each started with
PR_SET_PDEATHSIG so that the kernel kills it should this helper be killed
outright.
"""

import argparse
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import harness  # noqa: E402  (needs the path above)

# A lock value no broker session has: "taken by someone else".
FOREIGN_OWNER = "00000000-0000-4000-8000-000000000000:1"
PR_SET_PDEATHSIG = 1


class StepError(Exception):
    """A request the helper could not do; the reply says why."""


# ------------------------------------------------- children die with us --

_HELPER_PID = os.getpid()


def _die_with_helper():
    """preexec_fn of every child: SIGKILL when this helper dies.  (The
    helper has one thread, so the signal is tied to the whole helper.)"""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != _HELPER_PID:     # the helper died before prctl
        os._exit(1)


class _SubprocessDyingWithHelper:
    """What harness sees as its subprocess module: the real one, but every
    Popen gets _die_with_helper (harness itself stops children by pid; this
    covers a helper killed with kill -9)."""

    def __getattr__(self, name):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(*args, **kw):
        kw.setdefault("preexec_fn", _die_with_helper)
        return subprocess.Popen(*args, **kw)


harness.subprocess = _SubprocessDyingWithHelper()


# ---------------------------------------------------------- certificates --

def _openssl(cwd, *args):
    r = subprocess.run(["openssl"] + list(args), cwd=cwd,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=30,
                       preexec_fn=_die_with_helper)
    if r.returncode != 0:
        raise StepError("openssl %s failed: %s" % (args[0], r.stdout))


def make_certificates(directory):
    """A CA (ca.crt) and a server certificate for 127.0.0.1 and localhost
    signed by it (server.crt, server.key), in directory."""
    for name in ("ca", "server"):
        _openssl(directory, "genpkey", "-algorithm", "EC", "-pkeyopt",
                 "ec_paramgen_curve:P-256", "-out", name + ".key")
    _openssl(directory, "req", "-x509", "-new", "-key", "ca.key", "-days",
             "2", "-subj", "/CN=lockbroker-conformance-ca", "-out", "ca.crt")
    _openssl(directory, "req", "-new", "-key", "server.key", "-subj",
             "/CN=localhost", "-out", "server.csr")
    with open(os.path.join(directory, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                "extendedKeyUsage=serverAuth\n")
    _openssl(directory, "x509", "-req", "-in", "server.csr", "-CA", "ca.crt",
             "-CAkey", "ca.key", "-set_serial", "1", "-days", "2",
             "-extfile", "server.ext", "-out", "server.crt")


# ---------------------------------------------------------------- servers --

def parse_options(words):
    """Positional words, then name=value options and bare flags."""
    opts, flags, apps = {}, set(), []
    for w in words:
        if "=" in w:
            name, value = w.split("=", 1)
            if name == "app":
                apps.append(value)
            else:
                opts[name] = value
        else:
            flags.add(w)
    return opts, flags, apps


class Servers:
    """The Redis and brokers of one transcript."""

    def __init__(self, broker_bin=None):
        self.broker_bin = broker_bin
        self.dir = tempfile.mkdtemp(prefix="lbc-servers-")
        self.certs = None
        self.redis = None
        self.prefix = None
        self.brokers = {}           # name -> (harness.Broker, info dict)
        self.probed = {}            # word -> has it (needs, once per run)

    # -- lifetime
    def reset(self):
        errors = []
        for name, (b, _) in list(self.brokers.items()):
            try:
                b.close()
            except AssertionError as e:     # sanitizer report, bad exit
                errors.append("broker %s: %s" % (name, e))
        self.brokers.clear()
        if self.redis is not None:
            self.redis.close()
            self.redis = None
        self.prefix = None
        if errors:
            raise StepError("; ".join(errors))

    def close(self):
        try:
            self.reset()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _need_redis(self):
        if self.redis is None:
            self.redis = harness.Redis()
            self.prefix = "lbc" + uuid.uuid4().hex[:12]
        return self.redis

    def _broker(self, name):
        if name not in self.brokers:
            raise StepError("no broker %r (start it with a broker step)"
                            % name)
        return self.brokers[name]

    # -- the server steps
    def step(self, line):
        words = line.split()
        if not words:
            raise StepError("empty step")
        verb, args = words[0], words[1:]
        if verb == "broker":
            return self.start_broker(args)
        if verb == "redis":
            return self.redis_step(args)
        if verb == "sleep":
            return time.sleep(self._ms(args, 1, "sleep <ms>") / 1000.0)
        if verb == "requires":
            return self.requires(args)
        if verb == "needs":
            return self.needs(args)
        if verb in ("kill", "stop", "restart", "pause", "resume"):
            if len(args) != 1:
                raise StepError("%s <broker>" % verb)
            b, info = self._broker(args[0])
            if verb == "kill":
                b.kill()
            elif verb == "stop":
                b.stop()
            elif verb == "restart":
                if b.alive():
                    b.stop()
                b._spawn()
                b.wait_ready()
                info["pid"] = b.pid
            elif verb == "pause":
                b.pause()
            else:
                b.resume()
            return None
        raise StepError("unknown step %r" % verb)

    @staticmethod
    def _ms(args, n, usage):
        if len(args) != n or not args[-1].isdigit():
            raise StepError(usage)
        return int(args[-1])

    def start_broker(self, args):
        if not args or "=" in args[0]:
            raise StepError("broker <name> [options]")
        name = args[0]
        if name in self.brokers:
            raise StepError("broker %r exists already" % name)
        opts, flags, apps = parse_options(args[1:])
        unknown = flags - {"tls"}
        if unknown:
            raise StepError("unknown broker flag(s) %s" % sorted(unknown))
        redis = self._need_redis()
        extra, auth = [], None
        if "auth" in opts:
            auth = opts.pop("auth")
            extra += ["--auth_token", auth]
        if apps:
            extra += ["--acl_file", self._acl_file(name, apps)]
            auth = auth or apps[0].split(":", 2)[1]
        tls_port, ca = 0, ""
        if "tls" in flags:
            if self.certs is None:
                self.certs = os.path.join(self.dir, "certs")
                os.mkdir(self.certs)
                make_certificates(self.certs)
            tls_port = harness.free_port()
            ca = os.path.join(self.certs, "ca.crt")
            extra += ["--tls_port", tls_port,
                      "--tls_cert_file", os.path.join(self.certs, "server.crt"),
                      "--tls_key_file", os.path.join(self.certs, "server.key")]
        for k, v in opts.items():
            extra += ["--" + k, v]
        if self.broker_bin:
            harness.BROKER_BIN = self.broker_bin
        b = harness.Broker(redis.addr, self.prefix, *extra, auth=auth)
        info = {"name": name, "host": "127.0.0.1", "port": b.port,
                "tls_port": tls_port, "ca": ca, "pid": b.pid,
                "version": self._version(b, auth)}
        self.brokers[name] = (b, info)
        return None

    def _acl_file(self, broker, apps):
        lines = []
        for app in apps:
            parts = app.split(":", 2)
            if len(parts) != 3:
                raise StepError("app=<name>:<token>:<pattern>[,...], not %r"
                                % app)
            app_name, token, patterns = parts
            digest = hashlib.sha256(token.encode()).hexdigest()
            lines.append("app %s token-sha256 %s keys %s\n"
                         % (app_name, digest, patterns))
        path = os.path.join(self.dir, "acl-%s" % broker)
        with open(path, "w") as f:
            f.writelines(lines)
        return path

    @staticmethod
    def _version(b, auth):
        c = b.client()
        try:
            if auth and c.req("AUTH " + auth) != "OK":
                raise StepError("the broker refused its own token")
            m = re.search(r"lockbroker/(\S+)", c.req("HELLO"))
            return m.group(1) if m else "?"
        finally:
            c.close()

    def redis_step(self, args):
        if self.redis is None:
            raise StepError("no Redis yet (it starts with the first broker)")
        r = self.redis
        if args in (["restart"], ["start"]):
            r.restart()
        elif args == ["stop"]:
            r.stop()
        elif len(args) == 2 and args[0] == "del":
            r.cli("DEL", "%s:lock:%s" % (self.prefix, args[1]))
        elif len(args) == 2 and args[0] == "overwrite":
            r.cli("SET", "%s:lock:%s" % (self.prefix, args[1]),
                  FOREIGN_OWNER, "PX", 30000)
        else:
            raise StepError("redis del|overwrite <key>, redis "
                            "restart|stop|start")
        return None

    def requires(self, args):
        if len(args) != 1 or not re.fullmatch(r"\d+\.\d+", args[0]):
            raise StepError("requires <major>.<minor>")
        if not self.brokers:
            raise StepError("requires comes after the broker steps")
        want = tuple(int(x) for x in args[0].split("."))
        for name, (_, info) in self.brokers.items():
            have = tuple(int(x) for x in re.findall(r"\d+",
                                                    info["version"])[:2])
            if have < want:
                raise StepError("needs protocol %s, broker %s speaks %s"
                                % (args[0], name, info["version"]))
        return None

    # A probe per word: a request whose ERR BADCMD (or, for an option of a
    # known word, ERR BADARG) says the broker lacks it; any other answer
    # says it has it. Words of protocol 1.2 that came after its first part.
    # (A WATCH that works is followed by an EVENT line, a VALUE probe takes
    # its key: the probe's connection closes after its one reply, which
    # ends the watch and frees the key.)
    PROBES = {"VALUE": "ACQUIRE lbprobe:v VALUE x",
              "WATCH": "WATCH lbprobe:k",
              "CHECK": "CHECK lbprobe:k 1"}

    def needs(self, args):
        """None when the first broker has every word; a StepError (the
        transcript fails) when it answers ERR BADCMD (or BADARG) to one. Each word is
        probed once per helper run (the brokers of one run are one binary)."""
        if not args or any(w not in self.PROBES for w in args):
            raise StepError("needs %s..." % "|".join(sorted(self.PROBES)))
        if not self.brokers:
            raise StepError("needs comes after the broker steps")
        missing = []
        for word in args:
            if word not in self.probed:
                self.probed[word] = self._probe(word)
            if not self.probed[word]:
                missing.append(word)
        if not missing:
            return None
        # A broker under test that lacks a word a transcript needs is a
        # failure, never a skip: a skipped transcript hides a broken word.
        b, info = next(iter(self.brokers.values()))
        raise StepError("the broker (lockbroker/%s) does not have %s (ERR "
                        "BADCMD or BADARG to its probe)"
                        % (info["version"], " and ".join(missing)))

    def _probe(self, word):
        b, _ = next(iter(self.brokers.values()))
        c = b.client()
        try:
            if b.auth and c.req("AUTH " + b.auth) != "OK":
                raise StepError("the broker refused its own token")
            return not c.req(self.PROBES[word]).startswith(
                ("ERR BADCMD", "ERR BADARG"))
        finally:
            c.close()

    # -- information for runners
    def broker_info(self, name):
        b, info = self._broker(name)
        return dict(info, alive=b.alive())

    def redis_info(self):
        if self.redis is None:
            raise StepError("no Redis yet (it starts with the first broker)")
        return {"host": "127.0.0.1", "port": self.redis.port,
                "prefix": self.prefix, "alive": self.redis.alive()}


# ------------------------------------------------------------ JSON lines --

def clean(value):
    """Strings in replies hold no quote, backslash, control or non-ASCII
    character, so a runner may read a reply with a regular expression."""
    if isinstance(value, str):
        return re.sub(r'["\\]|[^\x20-\x7e]', "'", value)
    return value


def reply(obj):
    sys.stdout.write(json.dumps({k: clean(v) for k, v in obj.items()}) +
                     "\n")
    sys.stdout.flush()


def handle(servers, req):
    op = req.get("op")
    if op == "reset":
        servers.reset()
        return {}
    if op == "step":
        skip = servers.step(str(req.get("line", "")))
        return {"skip": skip} if skip else {}
    if op == "broker":
        return servers.broker_info(str(req.get("name", "")))
    if op == "redis":
        return servers.redis_info()
    raise StepError("unknown op %r" % op)


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", help="lockbrokerd binary")
    ap.add_argument("--redis-server", help="redis-server binary")
    a = ap.parse_args()
    if a.redis_server:
        harness.REDIS_BIN = a.redis_server
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    servers = Servers(a.broker)
    try:
        reply({"ok": True, "ready": True})
        for line in sys.stdin:
            if not line.strip():
                continue
            rid, req = None, None
            try:
                req = json.loads(line)
                if not isinstance(req, dict):
                    raise StepError("a request is a JSON object")
                rid = req.get("id")
                if req.get("op") == "quit":
                    servers.reset()
                    out = {"ok": True}
                else:
                    out = dict(handle(servers, req), ok=True)
            except Exception as e:      # any failure is this request's only
                out = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
            if rid is not None:
                out["id"] = rid
            reply(out)
            if isinstance(req, dict) and req.get("op") == "quit":
                break
    finally:
        servers.close()


if __name__ == "__main__":
    main()
