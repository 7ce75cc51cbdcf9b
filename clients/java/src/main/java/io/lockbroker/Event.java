package io.lockbroker;

/**
 * One {@code EVENT <TYPE> <key> [args]} line, split. Pure data, made by {@link Wire#event}.
 */
final class Event {
    final String type;
    final String key;
    final String[] args;
    final String line;

    Event(String type, String key, String[] args, String line) {
        this.type = type;
        this.key = key;
        this.args = args;
        this.line = line;
    }

    @Override
    public String toString() {
        return line;
    }
}
