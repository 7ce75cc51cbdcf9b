"""
dnsserver.py - a tiny DNS responder for the tests (Python stdlib, UDP).

It answers A and AAAA questions from a table the test changes while it
runs (names are matched without regard to case; an unknown name is
NXDOMAIN, a known name without records of the asked family is an empty
NOERROR), can hold every answer back for a while (delay) or answer
SERVFAIL, and counts the questions it saw.  The broker is pointed at it
with --dns_nameserver 127.0.0.1:<port>.  One thread, stopped by close().
"""

import ipaddress
import socket
import struct
import threading
import time

QTYPE_A = 1
QTYPE_AAAA = 28


class DnsServer:
    def __init__(self, host="127.0.0.1"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.addr = "%s:%d" % (host, self.port)
        self.lock = threading.Lock()
        self.records = {}           # name (lower case) -> [ip, ...]
        self.delay = 0.0            # seconds before each answer
        self.servfail = False
        self.questions = []         # (name, qtype) in arrival order
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def set(self, name, *ips):
        """name answers ips (none: the name is unknown, NXDOMAIN)."""
        with self.lock:
            if ips:
                self.records[name.lower()] = list(ips)
            else:
                self.records.pop(name.lower(), None)

    def asked(self, name):
        """How many questions named name so far."""
        with self.lock:
            return sum(1 for n, _ in self.questions if n == name.lower())

    def close(self):
        self.stopping = True
        self.thread.join(timeout=5)
        self.sock.close()

    # --- the wire -----------------------------------------------------

    def _serve(self):
        while not self.stopping:
            try:
                data, peer = self.sock.recvfrom(512)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                reply = self._answer(data)
            except (ValueError, IndexError, struct.error):
                continue            # not a question we can read: no answer
            if reply is None:
                continue
            if self.delay > 0:
                # answered from a thread of its own: a slow answer holds
                # back no other question
                threading.Thread(target=self._send_later,
                                 args=(reply, peer, self.delay),
                                 daemon=True).start()
            else:
                self._send(reply, peer)

    def _send_later(self, reply, peer, delay):
        time.sleep(delay)
        self._send(reply, peer)

    def _send(self, reply, peer):
        try:
            self.sock.sendto(reply, peer)
        except OSError:
            pass

    def _answer(self, data):
        qid, flags, qd = struct.unpack("!HHH", data[:6])
        if flags & 0x8000 or qd != 1:
            return None
        labels, i = [], 12
        while data[i] != 0:
            n = data[i]
            labels.append(data[i + 1:i + 1 + n].decode("ascii"))
            i += 1 + n
        question_end = i + 5
        qtype, _qclass = struct.unpack("!HH", data[i + 1:question_end])
        name = ".".join(labels).lower()
        with self.lock:
            self.questions.append((name, qtype))
            ips = self.records.get(name)
            servfail = self.servfail
        rd = flags & 0x0100
        answers = []
        if servfail:
            rcode = 2
        elif ips is None:
            rcode = 3
        else:
            rcode = 0
            for ip in ips:
                a = ipaddress.ip_address(ip)
                if (a.version == 4) != (qtype == QTYPE_A) or \
                        qtype not in (QTYPE_A, QTYPE_AAAA):
                    continue
                # name as a pointer to the question (offset 12), TTL 1
                answers.append(struct.pack("!HHHIH", 0xC00C, qtype, 1, 1,
                                           len(a.packed)) + a.packed)
        head = struct.pack("!HHHHHH", qid, 0x8000 | 0x0400 | rd | 0x0080 |
                           rcode, 1, len(answers), 0, 0)
        return head + data[12:question_end] + b"".join(answers)
