package cli

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
)

// The --store-tls-… flags: they set up the TLS of every rediss scheme, and
// a mistake is a clear error, before anything is dialled.
func TestStoreTLSFlags(t *testing.T) {
	x := redistest.NewTLS(t)
	st := storeTLS{ca: x.CAFile, cert: x.ClientCertFile, key: x.ClientKeyFile}
	for _, spec := range []string{"rediss://127.0.0.1:6380/0", "rediss-cluster://127.0.0.1:7000,127.0.0.1:7001", "rediss-sentinel://127.0.0.1:26379/m"} {
		c, err := redisClient(spec, st)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		var tc *tls.Config
		switch c := c.(type) {
		case *redis.Client:
			tc = c.Options().TLSConfig
		case *redis.ClusterClient:
			tc = c.Options().TLSConfig
		}
		if tc != nil && (tc.RootCAs == nil || len(tc.Certificates) != 1) {
			t.Errorf("%s: TLS config without the CA or the client certificate: %+v", spec, tc)
		}
		_ = c.Close()
	}
	if c, err := redisClient("rediss://127.0.0.1:6380/0", st); err != nil {
		t.Fatal(err)
	} else {
		if tc := c.(*redis.Client).Options().TLSConfig; tc.ServerName != "127.0.0.1" {
			t.Errorf("rediss://: server name %q, want the URL's host", tc.ServerName)
		}
		_ = c.Close()
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec string
		st   storeTLS
		want string
	}{
		{"redis://127.0.0.1:6379/0", storeTLS{ca: x.CAFile}, "--store-tls-… flags want a TLS store"},
		{"redis-cluster://127.0.0.1:7000", storeTLS{skipHostname: true}, "want a TLS store"},
		{"rediss://127.0.0.1:6380/0", storeTLS{ca: "/nonexistent/ca.pem"}, "--store-tls-ca: open /nonexistent/ca.pem"},
		{"rediss-cluster://127.0.0.1:7000", storeTLS{ca: notPEM}, "--store-tls-ca: no PEM certificate in"},
		{"rediss-sentinel://127.0.0.1:26379/m", storeTLS{cert: x.ClientCertFile}, "--store-tls-cert and --store-tls-key go together"},
		{"rediss://127.0.0.1:6380/0", storeTLS{cert: x.ClientCertFile, key: x.CAFile}, "--store-tls-cert/--store-tls-key"},
	} {
		if _, err := redisClient(c.spec, c.st); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %+v: %v, want an error with %q", c.spec, c.st, err, c.want)
		}
	}
}
