package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
)

// storeTLS is how a TLS store (rediss://, rediss-cluster://,
// rediss-sentinel://) is reached: the --store-tls-… flags of serve and
// replay.
type storeTLS struct {
	ca, cert, key string
	skipHostname  bool
}

// flags declares the --store-tls-… flags on fs.
func (s *storeTLS) flags(fs *flag.FlagSet) {
	fs.StringVar(&s.ca, "store-tls-ca", "", "a TLS store (rediss://, rediss-cluster://, rediss-sentinel://): PEM CA bundle its certificates are checked against (default: the system's; envoy's REDIS_TLS_CACERT)")
	fs.StringVar(&s.cert, "store-tls-cert", "", "a TLS store: PEM client certificate to present, for a Redis with tls-auth-clients (with --store-tls-key; envoy's REDIS_TLS_CLIENT_CERT)")
	fs.StringVar(&s.key, "store-tls-key", "", "a TLS store: PEM private key of --store-tls-cert (envoy's REDIS_TLS_CLIENT_KEY)")
	fs.BoolVar(&s.skipHostname, "store-tls-skip-hostname-verification", false, "a TLS store: check that a trusted CA signed the server's certificate, not that it names the host dialled (envoy's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: for servers whose certificates name other hosts)")
}

// given reports whether any --store-tls-… flag is set.
func (s storeTLS) given() bool {
	return s.ca != "" || s.cert != "" || s.key != "" || s.skipHostname
}

// config returns base (go-redis's configuration of a rediss:// URL; a new
// one when nil) with the flags applied.
func (s storeTLS) config(base *tls.Config) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
	}
	if err := clientTLS(cfg, "store", s.ca, s.cert, s.key); err != nil {
		return nil, err
	}
	if s.skipHostname {
		// The chain is still checked, by VerifyConnection; only the name
		// is not.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return cfg, nil
}

// clientTLS sets cfg's roots from the PEM file ca and its client certificate
// from cert and key (each "" for none), naming the flags --PREFIX-tls-… in
// its errors: the store's and the xDS server's TLS read their files alike.
func clientTLS(cfg *tls.Config, prefix, ca, cert, key string) error {
	if ca != "" {
		b, err := os.ReadFile(ca)
		if err != nil {
			return fmt.Errorf("--%s-tls-ca: %w", prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("--%s-tls-ca: no PEM certificate in %s", prefix, ca)
		}
		cfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return fmt.Errorf("--%[1]s-tls-cert and --%[1]s-tls-key go together", prefix)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("--%[1]s-tls-cert/--%[1]s-tls-key: %w", prefix, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return nil
}
