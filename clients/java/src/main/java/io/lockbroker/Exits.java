package io.lockbroker;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A normal end of the JVM (main returned, {@code System.exit}, SIGTERM, Ctrl-C) ends every open
 * client's session with {@code QUIT}, from one shutdown hook, so that the broker frees their holds at
 * once rather than after the grace. A client's threads are daemons: they never keep the JVM alive.
 * (A JVM killed with SIGKILL, or a crashed host, runs no hook: its holds come back after the grace.)
 */
final class Exits {
    /** How long the hook waits for the QUITs' answers, all clients together. */
    private static final long WAIT_MS = 2000;
    private static final Set<Core> OPEN = ConcurrentHashMap.newKeySet();
    private static boolean hooked;

    private Exits() {
    }

    /** A client opened: its session is ended at exit unless it is closed first. */
    static void add(Core c) {
        synchronized (Exits.class) {
            if (!hooked) {
                try {
                    Runtime.getRuntime().addShutdownHook(new Thread(() -> run(OPEN), "lockbroker-exit"));
                    hooked = true;
                } catch (IllegalStateException e) {
                    return;         // the JVM is exiting already
                }
            }
        }
        OPEN.add(c);
    }

    static void remove(Core c) {
        OPEN.remove(c);
    }

    /**
     * The hook's work for these clients (at exit: every open one): each closes at once, on a thread
     * of its own, and the hook waits for their QUITs' answers, at most WAIT_MS in all.
     */
    static void run(Collection<Core> cores) {
        List<Thread> ts = new ArrayList<>();
        for (Core c : cores) {
            Thread t = new Thread(c::close, "lockbroker-exit-quit");
            t.setDaemon(true);
            t.start();
            ts.add(t);
        }
        long end = System.nanoTime() + WAIT_MS * 1_000_000L;
        for (Thread t : ts) {
            try {
                t.join(Math.max(1, (end - System.nanoTime()) / 1_000_000L));
            } catch (InterruptedException e) {
                return;
            }
        }
    }
}
