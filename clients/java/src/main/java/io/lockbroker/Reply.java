package io.lockbroker;

/**
 * One reply line, split: {@code OK [words]}, {@code BUSY}, or {@code ERR <CODE> <text>}. Pure data,
 * made by {@link Wire#reply}.
 */
final class Reply {
    enum Kind { OK, BUSY, ERR }

    final Kind kind;
    /** The words after the first one (for ERR: the code, then the text's words). */
    final String[] words;
    final String line;

    Reply(Kind kind, String[] words, String line) {
        this.kind = kind;
        this.words = words;
        this.line = line;
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

    /** For ERR: the exception for its code and text. */
    BrokerErrorException error() {
        String text = "";
        int sp = line.indexOf(' ', 4);
        if (sp > 0) {
            text = line.substring(sp + 1).trim();
        }
        return BrokerErrorException.of(code(), text);
    }

    /** The reply as a surprise: what a caller throws when a reply has a shape it did not expect. */
    BrokerProtocolException unexpected(String request) {
        return new BrokerProtocolException("unexpected reply to " + request + ": " + line);
    }

    @Override
    public String toString() {
        return line;
    }
}
