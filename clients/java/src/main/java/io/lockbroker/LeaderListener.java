package io.lockbroker;

/** Told when a {@link LeaderLatch} gains or loses leadership, or stops (on the latch's thread). */
public interface LeaderListener {
    /** This candidate leads now; token fences what it does as leader. */
    void isLeader(long token);

    /** It leads no more (lost, resigned, or the client closed). */
    void notLeader();

    /**
     * The broker refused the candidate with an error that trying again cannot mend (a broker without
     * {@code ACQUIRE ... VALUE}: BadArgumentException or BadCommandException; DeniedException,
     * NotAuthenticatedException, ...): the latch stopped, and {@link LeaderLatch#await} throws it too.
     */
    default void failed(LockBrokerException cause) {
    }
}
