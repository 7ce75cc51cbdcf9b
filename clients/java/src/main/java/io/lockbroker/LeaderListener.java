package io.lockbroker;

/** Told when a {@link LeaderLatch} gains or loses leadership (on the latch's thread). */
public interface LeaderListener {
    /** This candidate leads now; token fences what it does as leader. */
    void isLeader(long token);

    /** It leads no more (lost, resigned, or the client closed). */
    void notLeader();
}
