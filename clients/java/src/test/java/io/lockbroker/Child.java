package io.lockbroker;

/**
 * A second JVM for {@link LifecycleTest}: connects to the broker at args[0] with the defaults, takes
 * args[1], prints {@code held <token>}, then ends as args[2] says: {@code return} (main returns, the
 * client not closed: its threads are daemons, so the JVM exits and its shutdown hook ends the
 * session), {@code exit} ({@code System.exit(0)}, likewise), {@code wait} (until it is killed).
 */
public final class Child {
    private Child() {
    }

    public static void main(String[] args) throws Exception {
        LockClient client = LockClient.connect(args[0]);
        BrokerLock lock = client.lock(args[1]);
        lock.lock();
        System.out.println("held " + lock.token());
        System.out.flush();
        switch (args[2]) {
            case "return":
                return;
            case "exit":
                System.exit(0);
                break;
            default:
                Thread.sleep(Long.MAX_VALUE);
        }
    }
}
