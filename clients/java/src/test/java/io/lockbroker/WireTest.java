package io.lockbroker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** The line codec, pure: request lines, replies, events, their checks. */
class WireTest {
    @Test
    void acquireLines() {
        assertEquals("ACQUIRE k ASYNC", Wire.acquire("k", LockSpec.exclusive(), -1, true));
        assertEquals("ACQUIRE k WAIT 500 ASYNC", Wire.acquire("k", LockSpec.exclusive(), 500, true));
        assertEquals("ACQUIRE k SHARED WAIT 5", Wire.acquire("k", LockSpec.shared(), 5, false));
        assertEquals("ACQUIRE k LIMIT 3 TTL 2000 ASYNC",
                Wire.acquire("k", LockSpec.permits(3).ttl(Duration.ofSeconds(2)), 0, true));
        assertEquals("ACQUIRE leader WAIT 60000 VALUE 10.0.0.7:8080 ASYNC",
                Wire.acquire("leader", LockSpec.exclusive().value("10.0.0.7:8080"), 60000, true));
    }

    @Test
    void otherRequestLines() {
        assertEquals("HELLO", Wire.hello(null, 0));
        assertEquals("HELLO w-7 GRACE 30000", Wire.hello("w-7", 30000));
        assertEquals("RELEASE k", Wire.release("k", 0));
        assertEquals("RELEASE k LINGER 60000", Wire.release("k", 60000));
        assertEquals("RENEW k", Wire.renew("k", -1));
        assertEquals("RENEW k TTL 5", Wire.renew("k", 5));
        assertEquals("OWNER k VALUE", Wire.owner("k", true));
        assertEquals("OWNER k", Wire.owner("k", false));
        assertEquals("CHECK k 9007199254740991", Wire.check("k", (1L << 53) - 1));
        assertEquals("CANCEL k", Wire.cancel("k"));
        assertEquals("PROCLAIM k v", Wire.proclaim("k", "v"));
        assertEquals("WATCH k", Wire.watch("k"));
        assertEquals("UNWATCH k", Wire.unwatch("k"));
    }

    @Test
    void badArgumentsNeverReachTheWire() {
        assertThrows(IllegalArgumentException.class, () -> Wire.checkKey(""));
        assertThrows(IllegalArgumentException.class, () -> Wire.checkKey("a b"));
        assertThrows(IllegalArgumentException.class, () -> Wire.checkKey("a\nQUIT"));
        assertThrows(IllegalArgumentException.class, () -> Wire.checkKey("\u00e9"));
        assertThrows(IllegalArgumentException.class, () -> Wire.checkKey("k".repeat(257)));
        assertEquals("k".repeat(256), Wire.checkKey("k".repeat(256)));
        assertThrows(IllegalArgumentException.class, () -> LockSpec.shared().value("v"));
        assertThrows(IllegalArgumentException.class, () -> LockSpec.exclusive().value("a b"));
        assertThrows(IllegalArgumentException.class, () -> LockSpec.permits(0));
        assertThrows(IllegalArgumentException.class, () -> LockSpec.exclusive().ttl(Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> Wire.check("k", 0));
        assertThrows(IllegalArgumentException.class, () -> Wire.check("k", 1L << 53));
        assertThrows(IllegalArgumentException.class, () -> Wire.renew("k", 0));
        assertThrows(IllegalArgumentException.class, () -> Wire.release("k", 1L << 31));
    }

    @Test
    void replies() {
        Reply ok = Wire.reply("OK 1795346669878170");
        assertTrue(ok.ok());
        assertEquals(1795346669878170L, Wire.token(ok.words[0]));
        assertTrue(Wire.reply("OK QUEUED").is("QUEUED"));
        assertTrue(Wire.reply("OK").is());
        assertEquals(Reply.Kind.BUSY, Wire.reply("BUSY").kind);
        Reply err = Wire.reply("ERR DENIED app billing may not use this key");
        assertEquals("DENIED", err.code());
        BrokerErrorException e = err.error();
        assertInstanceOf(DeniedException.class, e);
        assertEquals("app billing may not use this key", e.text());
        assertEquals("DENIED", e.code());
        assertThrows(ProtocolErrorException.class, () -> Wire.reply("PONG"));
        assertThrows(ProtocolErrorException.class, () -> Wire.reply("ERR"));
        assertThrows(ProtocolErrorException.class, () -> Wire.token("12a"));
        assertThrows(ProtocolErrorException.class, () -> Wire.token("9007199254740992"));
        assertThrows(ProtocolErrorException.class, () -> Wire.token("0"));
    }

    @Test
    void everyErrorCodeHasItsException() {
        String[][] rows = {{"BADCMD", "BadCommandException"}, {"BADARG", "BadArgumentException"},
            {"TOOLONG", "LineTooLongException"}, {"NOAUTH", "NotAuthenticatedException"},
            {"NOTHELD", "NotHeldException"}, {"LOST", "LockLostException"},
            {"UNAVAILABLE", "UnavailableException"}, {"LIMIT", "LimitExceededException"},
            {"NOSESSION", "NoSessionException"}, {"DENIED", "DeniedException"}};
        for (String[] r : rows) {
            BrokerErrorException e = Wire.reply("ERR " + r[0] + " x", "ACQUIRE k").error();
            assertEquals(r[1], e.getClass().getSimpleName());
            assertEquals(r[0], e.code());
            assertEquals("k", e.key());
        }
        assertEquals("NEWCODE", Wire.reply("ERR NEWCODE").error().code());
    }

    /** Issue 34: what happened to which key, for people; the broker's line and the request beside it. */
    @Test
    void errorsSayWhatHappenedToWhichKey() {
        BrokerErrorException e = Wire.reply("ERR BADARG VALUE is not supported by this broker yet",
                "ACQUIRE k VALUE v WAIT 2147483647 ASYNC").error();
        assertEquals("k: VALUE is not supported by this broker yet", e.getMessage());
        assertEquals("ERR BADARG VALUE is not supported by this broker yet", e.reply());
        assertEquals("ACQUIRE k VALUE v WAIT 2147483647 ASYNC", e.request());
        assertEquals("VALUE is not supported by this broker yet", e.text());
        LockLostException lost = LockLostException.of("lost:py", 1795805345549156L, null,
                "EVENT LOST lost:py 1795805345549156", null, null);
        assertEquals("lost:py: the lock was lost (token 1795805345549156)", lost.getMessage());
        assertEquals(1795805345549156L, lost.token());
        assertEquals("EVENT LOST lost:py 1795805345549156", lost.reply());
        assertEquals("reports:daily: the broker cannot reach Redis now",
                Wire.reply("ERR UNAVAILABLE", "OWNER reports:daily").error().getMessage());
        BadCommandException bc = assertInstanceOf(BadCommandException.class,
                Wire.reply("ERR BADCMD unknown command", "WATCH k").error());
        assertTrue(bc.getMessage().startsWith("the broker does not know WATCH (unknown command)"), bc.getMessage());
        assertEquals("k: not granted within 2000 ms (held by another client)",
                new LockTimeoutException("k", 2000).getMessage());
        assertEquals("AUTH ...", Wire.shown("AUTH s3cret"));
        assertEquals("RESUME 3f2b ...", Wire.shown("RESUME 3f2b 9f0c"));
        assertEquals(null, Wire.reply("ERR NOAUTH wrong token", "AUTH ...").error().key());
    }

    @Test
    void hello() {
        Wire.Hello h = Wire.hello(Wire.reply("OK 3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10 lockbroker/1.2.0 9f0c"));
        assertEquals("3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10", h.clientId());
        assertEquals("1.2.0", h.version());
        assertEquals("9f0c", h.secret());
        assertNull(Wire.hello(Wire.reply("OK id lockbroker/1.0.0")).secret());
        assertTrue(Wire.atLeast("1.2.0", 1, 2));
        assertTrue(Wire.atLeast("1.10.0", 1, 2));
        assertTrue(Wire.atLeast("2.0", 1, 2));
        assertFalse(Wire.atLeast("1.1.9", 1, 2));
        assertFalse(Wire.atLeast("1.0.0", 1, 2));
        assertFalse(Wire.atLeast("x", 1, 2));
        assertThrows(NotAuthenticatedException.class, () -> Wire.hello(Wire.reply("ERR NOAUTH send AUTH first")));
    }

    @Test
    void events() {
        Event e = Wire.event("EVENT LOST reports:daily 57");
        assertEquals("LOST", e.type);
        assertEquals("reports:daily", e.key);
        assertEquals(List.of("57"), List.of(e.args));
        assertTrue(Wire.isEvent("EVENT GRANTED k 1"));
        assertFalse(Wire.isEvent("OK EVENT"));
        assertThrows(ProtocolErrorException.class, () -> Wire.event("EVENT LOST"));
    }

    @Test
    void ownerAndHolderStates() {
        assertEquals(new KeyState.Free(), Wire.owner(Wire.reply("OK -")));
        assertEquals(new KeyState.Exclusive("c1", 42, Optional.of("10.0.0.7:80"), 2999),
                Wire.owner(Wire.reply("OK c1 2999 42 10.0.0.7:80")));
        assertEquals(new KeyState.Exclusive("c1", 42, Optional.empty(), 2999), Wire.owner(Wire.reply("OK c1 2999 42 -")));
        assertEquals(new KeyState.Exclusive("?", 42, Optional.empty(), 10), Wire.owner(Wire.reply("OK ? 10 42")));
        assertEquals(new KeyState.Shared(2), Wire.owner(Wire.reply("OK SHARED 2 a 1 5 b 2 6")));
        assertEquals(new KeyState.Semaphore(2, 3), Wire.owner(Wire.reply("OK SEMAPHORE 2 3 a 1 5 b 2 6")));
        assertThrows(UnavailableException.class, () -> Wire.owner(Wire.reply("ERR UNAVAILABLE redis")));

        assertEquals(new KeyState.Exclusive("c1", 7, Optional.of("v"), -1),
                Wire.holder(Wire.event("EVENT HOLDER k c1 7 v")));
        assertEquals(new KeyState.Exclusive("?", 7, Optional.empty(), -1),
                Wire.holder(Wire.event("EVENT HOLDER k ? 7 -")));
        assertEquals(new KeyState.Shared(3), Wire.holder(Wire.event("EVENT HOLDER k SHARED 3")));
        assertEquals(new KeyState.Semaphore(1, 2), Wire.holder(Wire.event("EVENT HOLDER k SEMAPHORE 1 2")));
        assertEquals(new KeyState.Free(), Wire.holder(Wire.event("EVENT FREE k")));
        assertNull(Wire.holder(Wire.event("EVENT LOST k 1")));
        assertEquals(Optional.of(new Leader(Optional.of("v"), 7, "c1")),
                Leader.of(Wire.holder(Wire.event("EVENT HOLDER k c1 7 v"))));
        assertEquals(Optional.empty(), Leader.of(new KeyState.Free()));
    }

    @Test
    void checkAnswers() {
        assertEquals(new TokenCheck(true, OptionalLong.empty()), Wire.check(Wire.reply("OK CURRENT")));
        assertEquals(new TokenCheck(false, OptionalLong.of(9)), Wire.check(Wire.reply("OK STALE 9")));
        assertEquals(new TokenCheck(false, OptionalLong.empty()), Wire.check(Wire.reply("OK STALE -")));
        assertThrows(DeniedException.class, () -> Wire.check(Wire.reply("ERR DENIED no")));
    }

    @Test
    void keyLists() {
        assertEquals(List.of("a", "b"), Wire.keyList(Wire.reply("OK 2 a b")));
        assertEquals(List.of(), Wire.keyList(Wire.reply("OK 0")));
        assertThrows(ProtocolErrorException.class, () -> Wire.keyList(Wire.reply("OK 3 a b")));
        assertThrows(NoSessionException.class, () -> Wire.keyList(Wire.reply("ERR NOSESSION gone")));
    }

    @Test
    void deadlines() throws InterruptedException {
        Deadline d = Deadline.inMs(50);
        assertFalse(d.passed());
        assertTrue(d.msLeft() <= 50 && d.msLeft() > 0);
        Thread.sleep(60);
        assertTrue(d.passed());
        assertEquals(0, d.msLeft());
        assertTrue(Deadline.NEVER.never());
        assertFalse(Deadline.NEVER.passed());
        assertTrue(Deadline.in(Long.MAX_VALUE, TimeUnit.DAYS).never());
        assertEquals(d, d.min(Deadline.NEVER));
        assertEquals(1, Deadline.in(300, TimeUnit.MICROSECONDS).msLeft(), "rounded up, never a one-try");
    }
}
