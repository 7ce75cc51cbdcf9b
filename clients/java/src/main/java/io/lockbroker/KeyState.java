package io.lockbroker;

import java.util.Optional;

/**
 * Who holds a key: what {@link LockClient#owner} answers and what a {@link KeyWatch} reports. One of
 * {@link Free}, {@link Exclusive}, {@link Shared}, {@link Semaphore}.
 */
public sealed interface KeyState permits KeyState.Free, KeyState.Exclusive, KeyState.Shared, KeyState.Semaphore {

    /** Nobody holds the key. */
    record Free() implements KeyState {
        @Override
        public String toString() {
            return "free";
        }
    }

    /**
     * Held exclusive. {@code clientId} is {@code "?"} when the broker may not show it (another app's
     * session); {@code ttlLeftMs} is -1 in watch events (they carry none).
     */
    record Exclusive(String clientId, long token, Optional<String> value, long ttlLeftMs) implements KeyState {
        @Override
        public String toString() {
            return "exclusive " + token + " value=" + value.orElse("-");
        }
    }

    /** Held shared by {@code holders} sessions. */
    record Shared(int holders) implements KeyState {
        @Override
        public String toString() {
            return "shared " + holders;
        }
    }

    /** A semaphore with {@code holders} of its {@code limit} permits taken. */
    record Semaphore(int holders, int limit) implements KeyState {
        @Override
        public String toString() {
            return "semaphore " + holders + " " + limit;
        }
    }

    /** The state for a free key. */
    static KeyState free() {
        return new Free();
    }
}
