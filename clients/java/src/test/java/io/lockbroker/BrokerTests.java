package io.lockbroker;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;

/**
 * The base of the integration tests: two brokers (b1, b2) of one Redis started by the shared
 * helper for the test class, clients closed after each test, keys unique per test. Tests that kill
 * or pause brokers start their own {@link Servers}.
 */
abstract class BrokerTests {
    static Servers servers;
    static Servers.Broker b1;
    static Servers.Broker b2;
    final List<LockClient> clients = new ArrayList<>();

    @BeforeAll
    static void startServers() throws Exception {
        servers = new Servers();
        b1 = servers.broker("b1");
        b2 = servers.broker("b2");
    }

    @AfterAll
    static void stopServers() throws Exception {
        servers.close();
    }

    @AfterEach
    void closeClients() {
        for (LockClient c : clients) {
            c.close();
        }
    }

    /**
     * Fails the test, saying why, if the brokers lack one of these words (VALUE, WATCH, CHECK: the
     * helper probes each once per run): a broker under test without a word is a failure, not a skip.
     */
    static void needs(String... words) throws Exception {
        servers.step("needs " + String.join(" ", words));
    }

    /** A client of these brokers (b1 when none is named), closed after the test. */
    LockClient client(String... addresses) {
        return track(LockClient.builder().addresses(addresses.length == 0 ? new String[] {b1.address()} : addresses)
                .connect());
    }

    LockClient track(LockClient c) {
        clients.add(c);
        return c;
    }

    static String key(String name) {
        return name + ":" + System.nanoTime();
    }
}
