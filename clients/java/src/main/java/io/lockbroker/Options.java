package io.lockbroker;

import java.util.List;
import java.util.function.Consumer;
import javax.net.ssl.SSLContext;

/** A client's settings, fixed when it is built ({@link LockClient.Builder} says what each means). */
final class Options {
    final List<String> addresses;
    final String name;
    final long graceMs;
    final String authToken;
    final SSLContext tls;
    final int connectTimeoutMs;
    final long replyTimeoutMs;
    final long pingIntervalMs;
    final long pingTimeoutMs;
    final long resumeBudgetMs;
    final boolean allowOldBroker;
    final LostListener lostListener;
    final SessionListener sessionListener;
    final Consumer<CounterEvent> counterListener;

    Options(List<String> addresses, String name, long graceMs, String authToken, SSLContext tls,
            int connectTimeoutMs, long replyTimeoutMs, long pingIntervalMs, long pingTimeoutMs, long resumeBudgetMs,
            boolean allowOldBroker, LostListener lostListener, SessionListener sessionListener,
            Consumer<CounterEvent> counterListener) {
        this.addresses = List.copyOf(addresses);
        this.name = name;
        this.graceMs = graceMs;
        this.authToken = authToken;
        this.tls = tls;
        this.connectTimeoutMs = connectTimeoutMs;
        this.replyTimeoutMs = replyTimeoutMs;
        this.pingIntervalMs = pingIntervalMs;
        this.pingTimeoutMs = pingTimeoutMs;
        this.resumeBudgetMs = resumeBudgetMs;
        this.allowOldBroker = allowOldBroker;
        this.lostListener = lostListener;
        this.sessionListener = sessionListener;
        this.counterListener = counterListener;
    }

    /**
     * How long each reply of a handshake (AUTH, HELLO, RESUME) may take: a broker that accepts
     * connections but answers nothing (stopped, its host gone) is passed over for the next one.
     */
    long handshakeTimeoutMs() {
        return Math.min(connectTimeoutMs, Math.max(1000, pingTimeoutMs));
    }
}
