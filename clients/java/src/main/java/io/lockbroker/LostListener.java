package io.lockbroker;

/**
 * Told when a hold is lost: the broker sent {@code EVENT LOST}, a resumed session no longer had the
 * key, or the session could not be resumed. Called on the client's callback thread, once per lost
 * hold; the holder's {@link BrokerLock#isHeld()} is already false and its next
 * {@link BrokerLock#unlock()} throws {@link LockLostException}.
 */
@FunctionalInterface
public interface LostListener {
    void lost(String key, long token, LockLostException cause);
}
