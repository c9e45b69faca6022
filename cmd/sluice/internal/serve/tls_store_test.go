package serve

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
)

// `sluice serve` over TLS stores: a TLS redis-server, a TLS Redis Cluster
// (its bus on TLS too) and a TLS Sentinel set (replication on TLS too, and
// a failover), all requiring client certificates. With the CA and the
// client certificate, decisions are made there, exactly; with
// either missing, or a certificate for another host, no call passes
// (fail-closed) and the log says why; --store-tls-skip-hostname-verification
// accepts the other host's certificate, but not one from another CA.
func TestBinaryStoreTLS(t *testing.T) {
	t.Parallel()
	x := redistest.NewTLS(t)
	srv := redistest.StandaloneTLS(t, x)
	cl := redistest.ClusterTLS(t, x)
	dir := writeConfig(t, map[string]string{"tls.yaml": "domain: tls\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 3}\n"})
	awayFromWindowEnd(t, 24*time.Hour, 2*time.Minute)
	ca, cert, key := "--store-tls-ca="+x.CAFile, "--store-tls-cert="+x.ClientCertFile, "--store-tls-key="+x.ClientKeyFile
	codes4 := func(p *proc, user string) string {
		var got []string
		for range 4 {
			r, err := p.call(context.Background(), "tls", desc("user="+user))
			if err != nil {
				got = append(got, status.Code(err).String())
				continue
			}
			got = append(got, r.OverallCode.String())
		}
		return strings.Join(got, " ")
	}
	st := redistest.SentinelTLS(t, x)
	sentinel := "rediss-sentinel://" + st.SentinelAddrs()[0] + "/" + redistest.SentinelMaster
	var viaSentinel *proc
	for _, store := range []string{"rediss://" + srv.TLSAddr(), "rediss-cluster://" + strings.Join(cl.Addrs(), ","), sentinel} {
		p := startProc(t, "--config", dir, "--store", store, ca, cert, key)
		for _, user := range []string{"a", "b", "c", "d"} { // over the masters
			if got := codes4(p, user); got != "OK OK OK OVER_LIMIT" {
				t.Errorf("%s, user %s: %s, want OK OK OK OVER_LIMIT", store, user, got)
			}
		}
		if store == sentinel {
			viaSentinel = p
		}
	}
	// After a failover the promoted replica, reached over TLS too, carries
	// on with what was spent.
	st.WaitReplicated(t)
	st.Failover(t)
	var got string
	redistest.AfterFailover(func() error { // calls fail until the client finds the new master
		r, err := viaSentinel.call(context.Background(), "tls", desc("user=e"))
		if err == nil {
			got = r.OverallCode.String()
		}
		return err
	})
	if got += " " + codes4(viaSentinel, "a"); got != "OK OVER_LIMIT OVER_LIMIT OVER_LIMIT OVER_LIMIT" {
		t.Errorf("after the failover: a new user then a spent one: %s, want OK then OVER_LIMIT ×4", got)
	}
	unavailable := codes.Unavailable.String()
	refused := func(store, why string, args ...string) {
		t.Helper()
		p := startProc(t, append([]string{"--config", dir, "--store", store, "--store-timeout", "2s"}, args...)...)
		// The four calls at once: each may wait out the store's timeout.
		got := make([]string, 4)
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() {
				if _, err := p.call(context.Background(), "tls", desc("user=z")); err != nil {
					got[i] = status.Code(err).String()
				} else {
					got[i] = "OK"
				}
			})
		}
		wg.Wait()
		if g := strings.Join(got, " "); g != strings.Repeat(unavailable+" ", 3)+unavailable {
			t.Errorf("%s %v: %s, want every call %s", store, args, g, unavailable)
		}
		if !strings.Contains(p.logText(), why) {
			t.Errorf("%s %v: the log does not say %q:\n%s", store, args, why, p.logText())
		}
	}
	refused("rediss://"+srv.TLSAddr(), "certificate signed by unknown authority", cert, key)
	refused("rediss-cluster://"+strings.Join(cl.Addrs(), ","), "certificate signed by unknown authority", cert, key)
	refused("rediss://"+srv.TLSAddr(), "store unavailable", ca) // Redis wants a client certificate: it closes the connection

	other := redistest.NewTLSFor(t, "redis.internal")
	named := redistest.StandaloneTLS(t, other)
	oca, ocert, okey := "--store-tls-ca="+other.CAFile, "--store-tls-cert="+other.ClientCertFile, "--store-tls-key="+other.ClientKeyFile
	refused("rediss://"+named.TLSAddr(), "x509: cannot validate certificate for 127.0.0.1", oca, ocert, okey)
	p := startProc(t, "--config", dir, "--store", "rediss://"+named.TLSAddr(), oca, ocert, okey, "--store-tls-skip-hostname-verification")
	if got := codes4(p, "a"); got != "OK OK OK OVER_LIMIT" {
		t.Errorf("another host's certificate, hostname not verified: %s, want OK OK OK OVER_LIMIT", got)
	}
	refused("rediss://"+named.TLSAddr(), "certificate signed by unknown authority", ca, ocert, okey, "--store-tls-skip-hostname-verification")
}
