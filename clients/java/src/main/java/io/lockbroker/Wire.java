package io.lockbroker;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * The line protocol as pure functions: request lines built from checked arguments, reply and event
 * lines split and read. No I/O, no state: everything here is unit-tested with tables of lines.
 */
final class Wire {
    static final long MAX_MS = 2147483647L;
    static final int MAX_KEY = 256;
    static final int MAX_VALUE = 256;
    static final int MAX_NAME = 64;
    /** Tokens are below 2^53. */
    static final long MAX_TOKEN = (1L << 53) - 1;

    private Wire() {
    }

    // ------------------------------------------------------------------ arguments

    /** A word of 1..max bytes of 0x21..0x7e (keys, values, names, tokens), or IllegalArgumentException. */
    static String checkWord(String what, String s, int max) {
        if (s == null || s.isEmpty() || s.length() > max) {
            throw new IllegalArgumentException(what + " must be 1.." + max + " characters");
        }
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c < 0x21 || c > 0x7e) {
                throw new IllegalArgumentException(what + " may hold only printable ASCII without blanks: " + s);
            }
        }
        return s;
    }

    static String checkKey(String key) {
        return checkWord("key", key, MAX_KEY);
    }

    static long checkMs(String what, long ms) {
        if (ms < 0 || ms > MAX_MS) {
            throw new IllegalArgumentException(what + " must be 0.." + MAX_MS + " ms, not " + ms);
        }
        return ms;
    }

    // ------------------------------------------------------------------ requests

    static String hello(String name, long graceMs) {
        StringBuilder b = new StringBuilder("HELLO");
        if (name != null) {
            b.append(' ').append(checkWord("name", name, MAX_NAME));
        }
        if (graceMs > 0) {
            b.append(" GRACE ").append(checkMs("grace", graceMs));
        }
        return b.toString();
    }

    static String auth(String token) {
        return "AUTH " + checkWord("auth token", token, 4000);
    }

    static String resume(String clientId, String secret) {
        return "RESUME " + clientId + " " + secret;
    }

    /**
     * ACQUIRE for a spec. waitMs &lt; 0: no WAIT (one try). async: the 1.2 form whose wait does not
     * hold back the session.
     */
    static String acquire(String key, LockSpec spec, long waitMs, boolean async) {
        StringBuilder b = new StringBuilder(64).append("ACQUIRE ").append(checkKey(key));
        if (spec.kind() == LockSpec.Kind.SHARED) {
            b.append(" SHARED");
        } else if (spec.kind() == LockSpec.Kind.PERMIT) {
            b.append(" LIMIT ").append(spec.limit());
        }
        if (waitMs > 0) {
            b.append(" WAIT ").append(checkMs("wait", waitMs));
        }
        if (spec.ttlMs() >= 0) {
            b.append(" TTL ").append(spec.ttlMs());
        }
        if (spec.value() != null) {
            b.append(" VALUE ").append(spec.value());
        }
        if (async) {
            b.append(" ASYNC");
        }
        return b.toString();
    }

    static String cancel(String key) {
        return "CANCEL " + checkKey(key);
    }

    static String release(String key, long lingerMs) {
        return "RELEASE " + checkKey(key) + (lingerMs > 0 ? " LINGER " + checkMs("linger", lingerMs) : "");
    }

    static String renew(String key, long ttlMs) {
        if (ttlMs == 0) {
            throw new IllegalArgumentException("ttl must be at least 1 ms");
        }
        return "RENEW " + checkKey(key) + (ttlMs > 0 ? " TTL " + checkMs("ttl", ttlMs) : "");
    }

    static String proclaim(String key, String value) {
        return "PROCLAIM " + checkKey(key) + " " + checkWord("value", value, MAX_VALUE);
    }

    static String owner(String key, boolean withValue) {
        return "OWNER " + checkKey(key) + (withValue ? " VALUE" : "");
    }

    static String check(String key, long token) {
        if (token < 1 || token > MAX_TOKEN) {
            throw new IllegalArgumentException("a token is 1..2^53-1, not " + token);
        }
        return "CHECK " + checkKey(key) + " " + token;
    }

    static String watch(String key) {
        return "WATCH " + checkKey(key);
    }

    static String unwatch(String key) {
        return "UNWATCH " + checkKey(key);
    }

    // ------------------------------------------------------------------ replies

    /** Splits a reply line; a line that is no reply (nor an event) is a protocol error. */
    static Reply reply(String line) {
        return reply(line, null);
    }

    /** Splits the reply line to request (a line as {@link #shown} makes it, or null). */
    static Reply reply(String line, String request) {
        String[] all = line.split(" ");
        String[] rest = Arrays.copyOfRange(all, 1, all.length);
        switch (all[0]) {
            case "OK":
                return new Reply(Reply.Kind.OK, rest, line, request);
            case "BUSY":
                return new Reply(Reply.Kind.BUSY, rest, line, request);
            case "ERR":
                if (rest.length == 0) {
                    break;
                }
                return new Reply(Reply.Kind.ERR, rest, line, request);
            default:
                break;
        }
        throw new ProtocolErrorException("not a reply" + (request == null ? "" : " to " + request) + ": " + line,
                new LockBrokerException.Origin(keyOf(request), line, request, null));
    }

    /** The verbs whose second word is a key. */
    private static final java.util.Set<String> KEYED = java.util.Set.of("ACQUIRE", "RELEASE", "RENEW", "OWNER",
            "CANCEL", "CHECK", "PROCLAIM", "WATCH", "UNWATCH");

    /** The key a request line names, or null. */
    static String keyOf(String request) {
        if (request == null) {
            return null;
        }
        String[] w = request.split(" ", 3);
        return w.length > 1 && KEYED.contains(w[0]) ? w[1] : null;
    }

    /** A request line as errors and logs may show it: AUTH's token and RESUME's secret left out. */
    static String shown(String request) {
        if (request.startsWith("AUTH ")) {
            return "AUTH ...";
        }
        if (request.startsWith("RESUME ")) {
            String[] w = request.split(" ");
            return w.length > 1 ? "RESUME " + w[1] + " ..." : "RESUME";
        }
        return request;
    }

    static boolean isEvent(String line) {
        return line.startsWith("EVENT ");
    }

    /** Splits {@code EVENT <TYPE> <key> [args]}. */
    static Event event(String line) {
        String[] all = line.split(" ");
        if (all.length < 3 || !all[0].equals("EVENT")) {
            throw new ProtocolErrorException("not an event: " + line, new LockBrokerException.Origin(null, line, null, null));
        }
        return new Event(all[1], all[2], Arrays.copyOfRange(all, 3, all.length), line);
    }

    /** A fencing token: decimal digits, 1..2^53-1. */
    static long token(String word) {
        if (word.isEmpty() || word.length() > 16) {
            throw new ProtocolErrorException("not a token: " + word);
        }
        long v = 0;
        for (int i = 0; i < word.length(); i++) {
            char c = word.charAt(i);
            if (c < '0' || c > '9') {
                throw new ProtocolErrorException("not a token: " + word);
            }
            v = v * 10 + (c - '0');
        }
        if (v < 1 || v > MAX_TOKEN) {
            throw new ProtocolErrorException("token out of range: " + word);
        }
        return v;
    }

    static int count(String word) {
        try {
            int n = Integer.parseInt(word);
            if (n >= 0) {
                return n;
            }
        } catch (NumberFormatException e) {
            // fall through
        }
        throw new ProtocolErrorException("not a count: " + word);
    }

    /** What HELLO answered: {@code OK <client-id> lockbroker/<version> [<secret>]}. */
    record Hello(String clientId, String version, String secret) {
    }

    static Hello hello(Reply r) {
        if (!r.ok() || r.words.length < 2 || r.words.length > 3 || !r.words[1].startsWith("lockbroker/")) {
            throw r.failure();
        }
        return new Hello(r.words[0], r.words[1].substring("lockbroker/".length()),
                r.words.length == 3 ? r.words[2] : null);
    }

    /** Whether a version string ({@code 1.2.0}) is at least major.minor. Unreadable: false. */
    static boolean atLeast(String version, int major, int minor) {
        String[] p = version.split("\\.");
        try {
            int ma = Integer.parseInt(p[0]);
            int mi = p.length > 1 ? Integer.parseInt(p[1]) : 0;
            return ma > major || (ma == major && mi >= minor);
        } catch (NumberFormatException e) {
            return false;
        }
    }

    /** The keys a RESUME's {@code OK <n> [key ...]} (or HELD's) lists. */
    static List<String> keyList(Reply r) {
        if (!r.ok() || r.words.length < 1 || count(r.words[0]) != r.words.length - 1) {
            throw r.failure();
        }
        return new ArrayList<>(Arrays.asList(r.words).subList(1, r.words.length));
    }

    /**
     * OWNER's answer: {@code OK -}, {@code OK <cid> <ttl> <token> [<value|->]} (the value with 1.2's
     * {@code OWNER <key> VALUE}), {@code OK SHARED <n> ...}, {@code OK SEMAPHORE <n> <limit> ...}.
     */
    static KeyState owner(Reply r) {
        String[] w = r.words;
        if (!r.ok() || w.length == 0) {
            throw r.failure();
        }
        if (w.length == 1 && w[0].equals("-")) {
            return KeyState.free();
        }
        if (w[0].equals("SHARED") && w.length >= 2) {
            return new KeyState.Shared(count(w[1]));
        }
        if (w[0].equals("SEMAPHORE") && w.length >= 3) {
            return new KeyState.Semaphore(count(w[1]), count(w[2]));
        }
        if (w.length == 3 || w.length == 4) {
            Optional<String> value = w.length == 4 && !w[3].equals("-") ? Optional.of(w[3]) : Optional.empty();
            return new KeyState.Exclusive(w[0], token(w[2]), value, count(w[1]));
        }
        throw r.unexpected();
    }

    /**
     * A watch event's state: {@code HOLDER <key> <cid> <token> <value|->}, {@code HOLDER <key> SHARED
     * <n>}, {@code HOLDER <key> SEMAPHORE <n> <limit>}, {@code FREE <key>}. Null for other events.
     */
    static KeyState holder(Event e) {
        String[] a = e.args;
        if (e.type.equals("FREE") && a.length == 0) {
            return KeyState.free();
        }
        if (!e.type.equals("HOLDER")) {
            return null;
        }
        if (a.length == 2 && a[0].equals("SHARED")) {
            return new KeyState.Shared(count(a[1]));
        }
        if (a.length == 3 && a[0].equals("SEMAPHORE")) {
            return new KeyState.Semaphore(count(a[1]), count(a[2]));
        }
        if (a.length == 3) {
            return new KeyState.Exclusive(a[0], token(a[1]), a[2].equals("-") ? Optional.empty() : Optional.of(a[2]),
                    -1);
        }
        throw new ProtocolErrorException("unreadable event: " + e.line, new LockBrokerException.Origin(e.key, e.line, null, null));
    }

    /** CHECK's answer: {@code OK CURRENT} or {@code OK STALE <token|->}. */
    static TokenCheck check(Reply r) {
        if (r.is("CURRENT")) {
            return new TokenCheck(true, OptionalLong.empty());
        }
        if (r.ok() && r.words.length == 2 && r.words[0].equals("STALE")) {
            return new TokenCheck(false, r.words[1].equals("-") ? OptionalLong.empty()
                    : OptionalLong.of(token(r.words[1])));
        }
        throw r.failure();
    }
}
