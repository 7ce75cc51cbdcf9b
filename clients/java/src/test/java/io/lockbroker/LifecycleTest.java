package io.lockbroker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * How a session ends (issue 34): a JVM that ends normally without closing its client frees its holds
 * at once (the shutdown hook's QUIT, for main returning and for System.exit), one killed with
 * SIGKILL frees them when the default grace (5 s) runs out, and a client nobody refers to any more
 * is closed by its cleaner. Children are second JVMs ({@link Child}) with the test classes and the jar.
 */
@Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class LifecycleTest extends BrokerTests {
    /** Starts a Child JVM holding key in mode; returns it once it printed that it holds the key. */
    private static Process child(String key, String mode) throws Exception {
        String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
        String cp = Path.of("build/test-classes").toAbsolutePath() + File.pathSeparator
                + ReadmeTest.JAR.toAbsolutePath();
        Process p = new ProcessBuilder(java, "-cp", cp, "io.lockbroker.Child",
                b1.address(), key, mode).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.US_ASCII));
        String line = out.readLine();
        if (line == null || !line.startsWith("held ")) {
            p.destroyForcibly();
            fail("the child did not take " + key + ": " + line);
        }
        return p;
    }

    /** Milliseconds from now until nobody holds key (asked every 20 ms), or -1 if not within ms. */
    private long msUntilFree(LockClient c, String key, long ms) throws InterruptedException {
        long t0 = System.nanoTime();
        Deadline d = Deadline.inMs(ms);
        while (!d.passed()) {
            if (c.owner(key) instanceof KeyState.Free) {
                return (System.nanoTime() - t0) / 1_000_000;
            }
            Thread.sleep(20);
        }
        return -1;
    }

    @Test
    void aJvmWhoseMainReturnsFreesItsHoldsAtOnce() throws Exception {
        String k = key("exit-return");
        LockClient watcher = client();
        Process p = child(k, "return");
        long ms = msUntilFree(watcher, k, 5000);
        assertTrue(ms >= 0 && ms < 1000, "freed " + ms + " ms after main returned (the grace is 5 s)");
        assertTrue(p.waitFor(10, TimeUnit.SECONDS), "the client's threads are daemons: the JVM exits");
        assertEquals(0, p.exitValue());
    }

    @Test
    void aJvmThatCallsSystemExitFreesItsHoldsAtOnce() throws Exception {
        String k = key("exit-call");
        LockClient watcher = client();
        child(k, "exit");
        long ms = msUntilFree(watcher, k, 5000);
        assertTrue(ms >= 0 && ms < 1000, "freed " + ms + " ms after System.exit (the grace is 5 s)");
    }

    @Test
    void aKilledJvmsHoldsComeBackWhenTheDefaultGraceRunsOut() throws Exception {
        String k = key("killed");
        LockClient watcher = client();
        Process p = child(k, "wait");
        long t0 = System.nanoTime();
        p.destroyForcibly();                         // SIGKILL: no hook runs
        assertTrue(p.waitFor(10, TimeUnit.SECONDS));
        Thread.sleep(1000);
        assertInstanceOf(KeyState.Exclusive.class, watcher.owner(k), "the grace keeps it for a RESUME");
        assertTrue(msUntilFree(watcher, k, 8000) >= 0, "freed at last");
        long ms = (System.nanoTime() - t0) / 1_000_000;
        long grace = LockClient.DEFAULT_GRACE.toMillis();
        assertTrue(ms > grace - 1000 && ms < grace + 1500, "freed " + ms + " ms after the kill; the grace is "
                + grace + " ms");
    }

    /** A client taken and forgotten: nothing refers to it (nor to its lock object) after this returns. */
    private static void lockAndForget(String address, String key) {
        LockClient c = LockClient.connect(address);
        c.lock(key).lock();
    }

    @Test
    void aClientNobodyRefersToEndsItsSession() throws Exception {
        String k = key("forgotten");
        lockAndForget(b1.address(), k);
        LockClient watcher = client();
        Deadline d = Deadline.inMs(20_000);
        while (!(watcher.owner(k) instanceof KeyState.Free)) {
            if (d.passed()) {
                fail(k + " still held 20 s after its client became unreachable");
            }
            System.gc();
            Thread.sleep(50);
        }
    }
}
