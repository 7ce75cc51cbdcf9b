package io.lockbroker;

import java.util.Optional;

/**
 * Who leads an election key: the holder's value (its address, as the candidate gave it; empty when
 * the holder gave none), its token and client-id ({@code "?"} when the broker may not show it).
 */
public record Leader(Optional<String> value, long token, String clientId) {
    /** The leader a key's state names: its exclusive holder, if any. */
    public static Optional<Leader> of(KeyState s) {
        if (s instanceof KeyState.Exclusive) {
            KeyState.Exclusive x = (KeyState.Exclusive) s;
            return Optional.of(new Leader(x.value(), x.token(), x.clientId()));
        }
        return Optional.empty();
    }
}
