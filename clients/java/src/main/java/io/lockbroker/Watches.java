package io.lockbroker;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executor;
import java.util.function.Consumer;

/**
 * The client's watches: one broker WATCH per key however many {@link KeyWatch}es share it, HOLDER
 * and FREE events fanned out to them, WATCH sent again on a new session (a resumed one keeps its
 * watches on the broker, which sends their states again).
 */
final class Watches {
    private static final class Group {
        final CopyOnWriteArrayList<WatchFeed> members = new CopyOnWriteArrayList<>();
        volatile KeyState latest;
    }

    private final Session session;
    private final Executor callbacks;
    private final Object mu = new Object();
    private final ConcurrentHashMap<String, Group> groups = new ConcurrentHashMap<>();

    Watches(Session session, Executor callbacks) {
        this.session = session;
        this.callbacks = callbacks;
    }

    WatchFeed watch(String key, Consumer<KeyState> listener, Consumer<LockBrokerException> onFailure) {
        Wire.checkKey(key);
        WatchFeed w = new WatchFeed(this, key, listener, onFailure);
        synchronized (mu) {
            Group g = groups.get(key);
            if (g != null) {
                g.members.add(w);
                KeyState s = g.latest;
                if (s != null) {
                    w.update(s, callbacks);
                }
                return w;
            }
            g = new Group();
            g.members.add(w);
            groups.put(key, g);
            try {
                Reply r = session.call(Wire.watch(key));
                if (!r.is()) {
                    throw r.failure();
                }
            } catch (RuntimeException e) {
                groups.remove(key, g);
                throw e;
            }
            return w;
        }
    }

    void unwatch(WatchFeed w) {
        synchronized (mu) {
            Group g = groups.get(w.key());
            if (g == null || !g.members.remove(w) || !g.members.isEmpty()) {
                return;
            }
            groups.remove(w.key(), g);
            try {
                session.call(Wire.unwatch(w.key()));
            } catch (RuntimeException e) {
                // the session is gone or closed: so is the watch
            }
        }
    }

    /** HOLDER and FREE (reader thread). True if it was one of those. */
    boolean event(Event e) {
        KeyState s = Wire.holder(e);
        if (s == null) {
            return false;
        }
        Group g = groups.get(e.key);
        if (g != null) {
            g.latest = s;
            for (WatchFeed w : g.members) {
                w.update(s, callbacks);
            }
        }
        return true;
    }

    /** The client closed: every watch ends. */
    void closed() {
        for (Group g : groups.values()) {
            for (WatchFeed w : g.members) {
                w.end();
            }
        }
    }

    /**
     * A new session: watch every key again on c. A key the broker refuses now (a broker without
     * WATCH, ERR LIMIT, ERR DENIED) ends its watches with that error: awaits throw it, failure
     * listeners hear it; it is not asked again.
     */
    void rewatch(Connection c) {
        for (String key : groups.keySet()) {
            Reply r = c.call(Wire.watch(key));
            if (!r.is()) {
                LockBrokerException why = r.failure();
                Group g = groups.remove(key);
                if (g != null) {
                    for (WatchFeed w : g.members) {
                        w.fail(why, callbacks);
                    }
                }
            }
        }
    }
}
