package io.lockbroker;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketOption;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import jdk.net.ExtendedSocketOptions;

/**
 * Opens a broker connection's socket: TCP with no Nagle delay and short keepalive timers (so a dead
 * path is noticed even while idle PINGs are not due), then TLS when the client has a context, with
 * the broker's name or IP checked against its certificate.
 */
final class Transport {
    /** Keepalive: first probe after 5 s idle, then every 2 s, 3 missed ones end the connection. */
    private static final int KEEPIDLE_S = 5;
    private static final int KEEPINTVL_S = 2;
    private static final int KEEPCNT = 3;

    private Transport() {
    }

    /** host:port; the host may be a name, an IPv4 address or a bracketed IPv6 address. */
    static InetSocketAddress parse(String address) {
        int colon = address.lastIndexOf(':');
        if (colon <= 0 || colon == address.length() - 1) {
            throw new IllegalArgumentException("an address is host:port, not " + address);
        }
        String host = address.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        int port;
        try {
            port = Integer.parseInt(address.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bad port in " + address);
        }
        if (port < 1 || port > 65535) {
            throw new IllegalArgumentException("bad port in " + address);
        }
        return InetSocketAddress.createUnresolved(host, port);
    }

    /** The socket to read and write, and the TCP socket under it (the same without TLS). */
    static Socket[] open(String address, SSLContext tls, int connectTimeoutMs) throws IOException {
        InetSocketAddress a = parse(address);
        Socket s = new Socket();
        try {
            s.setTcpNoDelay(true);
            s.setKeepAlive(true);
            keepaliveOption(s, ExtendedSocketOptions.TCP_KEEPIDLE, KEEPIDLE_S);
            keepaliveOption(s, ExtendedSocketOptions.TCP_KEEPINTERVAL, KEEPINTVL_S);
            keepaliveOption(s, ExtendedSocketOptions.TCP_KEEPCOUNT, KEEPCNT);
            s.connect(new InetSocketAddress(a.getHostString(), a.getPort()), connectTimeoutMs);
            if (tls == null) {
                return new Socket[] {s, s};
            }
            SSLSocket ssl = (SSLSocket) tls.getSocketFactory().createSocket(s, a.getHostString(), a.getPort(), true);
            SSLParameters p = ssl.getSSLParameters();
            p.setEndpointIdentificationAlgorithm("HTTPS");
            ssl.setSSLParameters(p);
            s.setSoTimeout(connectTimeoutMs);
            ssl.startHandshake();
            s.setSoTimeout(0);
            return new Socket[] {ssl, s};
        } catch (IOException | RuntimeException e) {
            s.close();
            throw e;
        }
    }

    /** A keepalive timer of jdk.net.ExtendedSocketOptions, where the platform has it (Linux, macOS). */
    private static void keepaliveOption(Socket s, SocketOption<Integer> o, int value) {
        try {
            if (s.supportedOptions().contains(o)) {
                s.setOption(o, value);
            }
        } catch (IOException | UnsupportedOperationException e) {
            // not on this platform: the idle PING still finds a dead connection
        }
    }
}
