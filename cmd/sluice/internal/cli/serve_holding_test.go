package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/console"
	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// liveHolding is the part of the console's live report this test reads.
type liveHolding struct {
	Rules []struct {
		Rule   string        `json:"rule"`
		Totals console.Point `json:"totals"`
	} `json:"rules"`
	Top      []console.Refusal     `json:"top"`
	SlicesOn bool                  `json:"slices_on"`
	Slices   []console.StoreSlices `json:"slices"`
	Slots    *console.Slots        `json:"slots"`
}

// The console of `sluice serve` shows the concurrency slots its
// /v1/acquire holds (charting the acquires as "(acquire)"), and those
// every instance holds (another's lease too), on the memory store and on
// Redis, and on Redis with slices the slices of budgets: the JSON and
// the page.
func TestServeConsoleHolding(t *testing.T) {
	srv := redistest.Standalone(t)
	prefix := fmt.Sprintf("console-holding:%d:", time.Now().UnixNano())
	sliced, err := redisstore.New(srv.Client(), redisstore.WithSlices(time.Minute), redisstore.WithPrefix(prefix+"l:"))
	if err != nil {
		t.Fatal(err)
	}
	defer sliced.Close()
	plain, err := redisstore.New(srv.Client(), redisstore.WithPrefix(prefix+"p:"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, tc := range []struct {
		name   string
		store  store.Store
		slices bool
	}{{"memory", memstore.New(), false}, {"redis", plain, false}, {"redis-slices", sliced, true}} {
		t.Run(tc.name, func(t *testing.T) {
			base := serveWithConsole(t, serve.Options{Store: tc.store, KeyForm: true})
			do := func(method, path, body string) string {
				t.Helper()
				resp, out := testenv.Do(t, nil, method, base+path, body)
				if resp.StatusCode >= 500 {
					t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
				}
				return out
			}
			const acq = `{"key": "exports:acme", "limit": 2, "lifetime": "1m"}`
			do("POST", "/v1/acquire", acq)
			do("POST", "/v1/acquire", acq)
			do("POST", "/v1/acquire", acq) // refused
			// Another instance's lease on the same store (the key form's
			// store key is "/" and the key), under a limit of its own.
			if ls, err := sluice.New(tc.store).Acquire(context.Background(), "/exports:acme", sluice.MaxConcurrent(3), 1); err != nil || !ls.Allowed {
				t.Fatalf("another instance's acquire: %+v %v", ls, err)
			}
			// With slices: until a slice lands (it is taken in the background).
			if tc.slices {
				for i := 0; i < 20_000 && (sliced.SliceStats().Local == 0 || len(sliced.Slices(1)) == 0); i++ {
					do("POST", "/v1/take", `{"key": "hot", "limit": "100000/1h"}`)
				}
			}
			var l liveHolding
			if err := json.Unmarshal([]byte(do("GET", "/console/api/live", "")), &l); err != nil {
				t.Fatal(err)
			}
			if l.Slots == nil || len(l.Slots.Top) != 1 {
				t.Fatalf("slots: %+v", l.Slots)
			}
			if k := l.Slots.Top[0]; k.Key != "exports:acme" || k.Held != 2 || k.Limit != 2 || k.Leases != 2 || k.Acquired != 2 || k.Refused != 1 ||
				k.NextExpiryUS <= 50e6 || k.NextExpiryUS > 60e6 || k.HeldAll == nil || *k.HeldAll != 3 {
				t.Errorf("exports:acme: %+v", k)
			}
			var acquires *console.Point
			for i, r := range l.Rules {
				if r.Rule == serve.AcquirePolicy {
					acquires = &l.Rules[i].Totals
				}
			}
			if acquires == nil || acquires.Allowed != 2 || acquires.Denied != 1 {
				t.Errorf("the acquires in the live report: %+v", l.Rules)
			}
			if len(l.Top) != 1 || l.Top[0].Key != "exports:acme" || l.Top[0].Rule != serve.AcquirePolicy {
				t.Errorf("refused keys: %+v", l.Top)
			}
			if l.SlicesOn != tc.slices {
				t.Fatalf("slices_on %v, want %v", l.SlicesOn, tc.slices)
			}
			page := do("GET", "/", "")
			if !strings.Contains(page, `<tr data-key="exports:acme">`) || strings.Contains(page, `id="slices-off"`) == tc.slices {
				t.Errorf("the page: slots or slices missing")
			}
			if !tc.slices {
				return
			}
			s := l.Slices[0]
			if s.Store != "main" || s.Local == 0 || s.Taken == 0 || s.Units == 0 || len(s.Top) != 1 || !strings.HasSuffix(s.Top[0].Key, "hot") || s.Top[0].Held <= 0 {
				t.Errorf("slices: %+v", s)
			}
			if !strings.Contains(page, `<dl class="stats" id="slice-stats-main"`) || !strings.Contains(page, `<table class="stack slice-keys" id="slice-keys-main"`) {
				t.Errorf("the page shows no slices")
			}
		})
	}
}
