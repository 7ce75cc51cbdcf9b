package io.lockbroker;

import java.util.OptionalLong;

/**
 * The answer to {@link LockClient#check}: whether a fencing token's hold is alive in Redis now, and if
 * not, the current holder's token ({@code empty} when the key is free).
 */
public record TokenCheck(boolean current, OptionalLong currentToken) {
    @Override
    public String toString() {
        return current ? "current" : "stale " + (currentToken.isPresent() ? currentToken.getAsLong() : "-");
    }
}
