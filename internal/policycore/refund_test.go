package policycore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
)

// rule is a checked rule named name under "t:".
func rule(t *testing.T, name string, l sluice.Limit) *policycore.Rule {
	t.Helper()
	check := policycore.Checker{Prefix: "t:"}
	r := &policycore.Rule{Name: name, Limit: l}
	if err := check.Check(r, true); err != nil {
		t.Fatal(err)
	}
	return r
}

// left is what key has left under r, by a look that spends nothing.
func left(t *testing.T, lim *sluice.Limiter, r *policycore.Rule, key string) int64 {
	t.Helper()
	res, err := lim.Take(context.Background(), r.KeyPrefix+key, r.Limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

func TestTakeAndRefund(t *testing.T) {
	ctx := context.Background()
	c := testenv.NewClock()
	lim := sluice.New(memstore.New(memstore.WithClock(c)))
	tb := rule(t, "tb", sluice.PerMinute(10))
	win := rule(t, "win", sluice.PerMinute(10).WithAlgorithm(sluice.FixedWindow))
	slog := rule(t, "slog", sluice.PerMinute(10).WithAlgorithm(sluice.SlidingLog))
	ps := []policycore.Part{
		{Rule: tb, Key: tb.KeyPrefix + "k", Cost: 4}, {Rule: win, Key: win.KeyPrefix + "k", Cost: 4},
		{Rule: slog, Key: slog.KeyPrefix + "k", Cost: 4}, {Rule: tb, Key: tb.KeyPrefix + "free"},
	}
	each := make([]sluice.Result, len(ps))
	res, lat, err := policycore.Take(ctx, lim, ps, each, false)
	if err != nil || !res.Allowed || lat != 0 {
		t.Fatalf("take: %+v, %v, %v", res, lat, err)
	}
	if each[0].Remaining != 6 || each[1].Remaining != 6 || each[1].Window == 0 || each[3].Remaining != 10 {
		t.Fatalf("each part's own result: %+v", each)
	}
	cs := policycore.AppendSpends(nil, ps, each)
	if len(cs) != 3 {
		t.Fatalf("%d spends, want 3 (a part that spent nothing has none)", len(cs))
	}

	found, err := policycore.Refund(ctx, lim, cs, "", 3)
	if !found || !errors.Is(err, sluice.ErrNoRefund) || err.Error() == "" {
		t.Fatalf("refund 3: %v, %v; want the sliding log's ErrNoRefund", found, err)
	}
	if got, want := err.Error(), `policy "slog": `; len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("error %q does not name the policy first", got)
	}
	if l1, l2 := left(t, lim, tb, "k"), left(t, lim, win, "k"); l1 != 9 || l2 != 9 {
		t.Errorf("after refunding 3 of 4: %d and %d left, want 9 and 9", l1, l2)
	}
	// Never more than was spent: 1 of 4 is left to give back.
	if found, err := policycore.Refund(ctx, lim, cs, "tb", 5); !found || err != nil {
		t.Fatalf("refund tb: %v, %v", found, err)
	}
	if l1, l2 := left(t, lim, tb, "k"), left(t, lim, win, "k"); l1 != 10 || l2 != 9 {
		t.Errorf("after refunding tb: %d and %d left, want 10 and 9", l1, l2)
	}
	if found, _ := policycore.Refund(ctx, lim, cs, "nope", 1); found {
		t.Error("a name no spend has was found")
	}

	// The window's last unit, once the window has ended, goes nowhere:
	// the next window, spent to nothing, stays so.
	c.Add(time.Minute)
	if res, err := lim.Take(ctx, win.KeyPrefix+"k", win.Limit, 10); err != nil || !res.Allowed {
		t.Fatalf("the next window: %+v, %v", res, err)
	}
	if _, err := policycore.Refund(ctx, lim, cs, "win", 1); err != nil {
		t.Fatal(err)
	}
	if l := left(t, lim, win, "k"); l != 0 {
		t.Errorf("the next window has %d left after the ended window's refund, want 0", l)
	}
}

// TestConcurrentRefunds: refunds at once of one request's spends give back
// what it spent, never more (run with -race).
func TestConcurrentRefunds(t *testing.T) {
	ctx := context.Background()
	c := testenv.NewClock()
	lim := sluice.New(memstore.New(memstore.WithClock(c)))
	tb := rule(t, "tb", sluice.PerHour(1000))
	ps := []policycore.Part{{Rule: tb, Key: tb.KeyPrefix + "k", Cost: 600}}
	each := make([]sluice.Result, 1)
	if res, _, err := policycore.Take(ctx, lim, ps, each, true); err != nil || !res.Allowed {
		t.Fatalf("take: %+v, %v", res, err)
	}
	cs := policycore.AppendSpends(nil, ps, each)
	// Another request spends the other 400: a refund beyond the 600 would
	// show as more than 600 left.
	if res, err := lim.Take(ctx, tb.KeyPrefix+"k", tb.Limit, 400); err != nil || !res.Allowed {
		t.Fatalf("the other 400: %+v, %v", res, err)
	}
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := policycore.Refund(ctx, lim, cs, "", 70); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if l := left(t, lim, tb, "k"); l != 600 {
		t.Errorf("%d left after 30 refunds of 70 of a take of 600, want 600", l)
	}
}
