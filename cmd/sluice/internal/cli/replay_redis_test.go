package cli

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// randomTraceText is a JSON-lines trace over a few keys with gaps from zero to
// a few seconds and costs from 0 to 4.
func randomTraceText(r *rand.Rand, n int) string {
	var b strings.Builder
	now := int64(1_764_000_000_000_000)
	for i := 0; i < n; i++ {
		now += r.Int64N(400_000) * int64(r.IntN(2))
		fmt.Fprintf(&b, `{"t_us": %d, "key": "user:%d", "cost": %d}`+"\n", now, r.IntN(4), r.IntN(5))
	}
	return b.String()
}

// The same trace gives the same output in memory, in Redis and on a cluster,
// for every algorithm.
func TestReplayRedisMatchesMemory(t *testing.T) {
	srv := redistest.Standalone(t)
	cl := redistest.Cluster(t)
	r := rand.New(rand.NewPCG(testenv.SeedOr(t, 1), 2))
	in := randomTraceText(r, 300)
	stores := []string{"redis://" + srv.Addr() + "/0", "redis-cluster://" + strings.Join(cl.Addrs(), ",")}
	for _, a := range []string{"token-bucket", "gcra", "leaky-bucket", "fixed-window", "aligned-window", "sliding-window", "sliding-log"} {
		args := []string{"replay", "--algorithm", a, "--limit", "7/1s", "--burst", "3"}
		code, want, errs := runCLI(t, in, args...)
		if code != 0 {
			t.Fatalf("%s memory: exit %d: %s", a, code, errs)
		}
		for _, st := range stores {
			code, got, errs := runCLI(t, in, append(args, "--store", st)...)
			if code != 0 {
				t.Fatalf("%s %s: exit %d: %s", a, st, code, errs)
			}
			if got != want {
				t.Fatalf("%s %s: output differs from memory:\n%s", a, st, firstDiff(got, want))
			}
		}
	}
	// Composites: the same decisions too (on the cluster, parts in
	// different slots go part by part, so only the standalone store must
	// match exactly).
	comp := compositeTraceText(r, 300)
	code, want, errs := runCLI(t, comp, "replay")
	if code != 0 {
		t.Fatalf("composites in memory: exit %d: %s", code, errs)
	}
	if code, got, errs := runCLI(t, comp, "replay", "--store", stores[0]); code != 0 || got != want {
		t.Fatalf("composites in Redis: exit %d %s\n%s", code, errs, firstDiff(got, want))
	}
	// Two replays never see each other's state (fresh namespace per run),
	// unless they share --prefix.
	args := []string{"replay", "--limit", "1/1h", "--burst", "1", "--store", stores[0]}
	one := `{"t_us": 1764000000000000, "key": "k"}` + "\n"
	for i := 0; i < 2; i++ {
		if _, out, _ := runCLI(t, one, args...); !strings.Contains(out, `"allowed":true`) {
			t.Fatalf("run %d saw another run's state: %s", i, out)
		}
	}
	shared := append(args, "--prefix", "shared:")
	runCLI(t, one, shared...)
	if _, out, _ := runCLI(t, one, shared...); !strings.Contains(out, `"allowed":false`) {
		t.Fatalf("a shared --prefix must share state: %s", out)
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n redis  %s\n memory %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("%d lines vs %d", len(al), len(bl))
}

func TestReplayRedisUnreachable(t *testing.T) {
	code, _, errs := runCLI(t, `{"t_us": 1764000000000000, "key": "k"}`+"\n", "replay", "--limit", "1/1s", "--store", "redis://127.0.0.1:1/0")
	if code == 0 || !strings.Contains(errs, "store unavailable") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

// replay over a TLS Redis that wants a client certificate: the same output
// as in memory, with the --store-tls-… flags; without the client
// certificate it fails.
func TestReplayTLS(t *testing.T) {
	x := redistest.NewTLS(t)
	srv := redistest.StandaloneTLS(t, x)
	in := randomTraceText(rand.New(rand.NewPCG(testenv.SeedOr(t, 1), 3)), 100)
	args := []string{"replay", "--limit", "7/1s", "--burst", "3"}
	_, want, _ := runCLI(t, in, args...)
	tlsArgs := append(args, "--store", "rediss://"+srv.TLSAddr(), "--store-tls-ca", x.CAFile)
	code, got, errs := runCLI(t, in, append(tlsArgs, "--store-tls-cert", x.ClientCertFile, "--store-tls-key", x.ClientKeyFile)...)
	if code != 0 || got != want {
		t.Fatalf("replay over TLS: exit %d %s\n%s", code, errs, firstDiff(got, want))
	}
	if code, _, _ := runCLI(t, in, tlsArgs...); code == 0 {
		t.Fatal("replay over TLS without the client certificate Redis wants: exit 0")
	}
}
