package io.lockbroker;

/**
 * One reply line, split: {@code OK [words]}, {@code BUSY}, or {@code ERR <CODE> <text>}, with the
 * request it answers (null when not known). Pure data, made by {@link Wire#reply}.
 */
final class Reply {
    enum Kind { OK, BUSY, ERR }

    final Kind kind;
    /** The words after the first one (for ERR: the code, then the text's words). */
    final String[] words;
    final String line;
    /** The request line it answers, as errors may show it (secrets left out), or null. */
    final String request;

    Reply(Kind kind, String[] words, String line, String request) {
        this.kind = kind;
        this.words = words;
        this.line = line;
        this.request = request;
    }

    boolean ok() {
        return kind == Kind.OK;
    }

    /** OK with exactly these words, e.g. {@code is("QUEUED")}. */
    boolean is(String... expect) {
        if (kind != Kind.OK || words.length != expect.length) {
            return false;
        }
        for (int i = 0; i < expect.length; i++) {
            if (!words[i].equals(expect[i])) {
                return false;
            }
        }
        return true;
    }

    /** For ERR: the code. */
    String code() {
        return kind == Kind.ERR && words.length > 0 ? words[0] : "";
    }

    /** Where an error in this reply came from: the request's key, this line, the request. */
    LockBrokerException.Origin origin() {
        return new LockBrokerException.Origin(Wire.keyOf(request), line, request, null);
    }

    /** For ERR: the exception for its code and text, about the request's key. */
    BrokerErrorException error() {
        String text = "";
        int sp = line.indexOf(' ', 4);
        if (sp > 0) {
            text = line.substring(sp + 1).trim();
        }
        return BrokerErrorException.of(code(), text, origin());
    }

    /** The reply as a surprise: what a caller throws when a reply has a shape it did not expect. */
    ProtocolErrorException unexpected() {
        return new ProtocolErrorException("unexpected reply to " + (request == null ? "a request" : request) + ": "
                + line, origin());
    }

    /** What a caller throws for a reply that is not the answer it wanted: the ERR's, or a surprise. */
    LockBrokerException failure() {
        return kind == Kind.ERR ? error() : unexpected();
    }

    @Override
    public String toString() {
        return line;
    }
}
