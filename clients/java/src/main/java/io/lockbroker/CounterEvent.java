package io.lockbroker;

/**
 * One event that moved a client's {@link Counters}, as its hook ({@link LockClient.Builder#onCounter})
 * hears it: its name, the counter that moved ({@code waits}, {@code holds}, {@code losses}, {@code resumes},
 * {@code reconnects}), the key (null for {@code resumes} and {@code reconnects}), and for
 * {@code waits} and {@code holds} how long that wait or hold lasted (what {@code waitSecondsTotal} or
 * {@code holdSecondsTotal} grew by), else 0.
 */
public record CounterEvent(String name, String key, double seconds) {
}
