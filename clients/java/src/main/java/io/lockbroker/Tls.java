package io.lockbroker;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * An SSLContext from PEM files, as the broker's own are written: a CA bundle to trust and, for
 * brokers that ask for client certificates, a certificate chain and its PKCS#8 key
 * ({@code -----BEGIN PRIVATE KEY-----}, what {@code openssl genpkey} writes).
 */
final class Tls {
    private Tls() {
    }

    static SSLContext context(Path caFile, Path certFile, Path keyFile) {
        try {
            CertificateFactory cf = CertificateFactory.getInstance("X.509");
            KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
            trust.load(null, null);
            int i = 0;
            for (Certificate c : certificates(cf, caFile)) {
                trust.setCertificateEntry("ca" + i++, c);
            }
            if (i == 0) {
                throw new IllegalArgumentException("no certificate in " + caFile);
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(trust);
            KeyManagerFactory kmf = null;
            if (certFile != null) {
                List<Certificate> chain = new ArrayList<>(certificates(cf, certFile));
                KeyStore keys = KeyStore.getInstance(KeyStore.getDefaultType());
                keys.load(null, null);
                char[] none = new char[0];
                keys.setKeyEntry("client", privateKey(keyFile), none, chain.toArray(new Certificate[0]));
                kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                kmf.init(keys, none);
            }
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
            return ctx;
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException("cannot set up TLS from " + caFile + ": " + e.getMessage(), e);
        }
    }

    private static Collection<? extends Certificate> certificates(CertificateFactory cf, Path file)
            throws IOException, GeneralSecurityException {
        try (InputStream in = Files.newInputStream(file)) {
            return cf.generateCertificates(in);
        }
    }

    private static PrivateKey privateKey(Path file) throws IOException, GeneralSecurityException {
        String pem = Files.readString(file);
        String begin = "-----BEGIN PRIVATE KEY-----";
        int a = pem.indexOf(begin);
        int b = pem.indexOf("-----END PRIVATE KEY-----");
        if (a < 0 || b < a) {
            throw new IllegalArgumentException(file + " holds no PKCS#8 key (-----BEGIN PRIVATE KEY-----); "
                    + "convert it with: openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.pk8");
        }
        byte[] der = Base64.getMimeDecoder().decode(pem.substring(a + begin.length(), b));
        PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(der);
        GeneralSecurityException last = null;
        for (String alg : new String[] {"EC", "RSA", "Ed25519"}) {
            try {
                return KeyFactory.getInstance(alg).generatePrivate(spec);
            } catch (GeneralSecurityException e) {
                last = e;
            }
        }
        throw last;
    }
}
