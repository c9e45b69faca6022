package redisstore_test

import (
	"context"
	"crypto/fips140"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/childproc"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// fipsChildEnv carries, to the test binary run again under
// GODEBUG=fips140=only, the address of the Redis to decide against.
const fipsChildEnv = "SLUICE_FIPS_CHILD_ADDR"

// The package imports, builds a store and decides under
// GODEBUG=fips140=only, where SHA-1 is refused (before: a panic at init,
// computing the scripts' digests): the test binary runs itself again in
// that mode.
func TestFIPSOnly(t *testing.T) {
	if addr, ok := childproc.Config(fipsChildEnv); ok {
		fipsChild(t, addr)
		return
	}
	srv := redistest.Standalone(t)
	out, err := childproc.Run(t, "TestFIPSOnly", "GODEBUG=fips140=only", fipsChildEnv+"="+srv.Addr())
	if err != nil || !strings.Contains(out, "fips child: decided") {
		t.Fatalf("the test binary under GODEBUG=fips140=only: %v\n%s", err, out)
	}
}

func fipsChild(t *testing.T, addr string) {
	if !fips140.Enforced() {
		t.Fatal("fips child: FIPS 140-only mode is not enforced")
	}
	if sha := redisstore.ScriptFor(algo.TokenBucket).SHA(); sha != "" {
		t.Fatalf("fips child: a SHA-1 digest %q under fips140=only", sha)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer c.Close()
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 2}
	for _, batched := range []bool{true, false} {
		opts := []redisstore.Option{redisstore.WithPrefix("fips:")}
		if !batched {
			opts = append(opts, redisstore.WithoutBatching(), redisstore.WithPrefix("fips-unbatched:"))
		}
		st := newGoRedis(t, c, opts...)
		for i := range 3 {
			if i == 1 {
				// The server forgets the scripts: EVALSHA fails with
				// NOSCRIPT, and EVAL takes over.
				if err := c.ScriptFlush(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			r, err := take(context.Background(), st, storelink.Request{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never})
			if err != nil || r.Allowed != (i < 2) {
				t.Fatalf("fips child: batched=%v call %d: %+v, %v", batched, i, r, err)
			}
		}
		st.Close()
	}
	t.Log("fips child: decided")
}
