package policycore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// ops is a store that counts the ops of each kind it is handed, over
// memstore.
type ops struct {
	*memstore.Store
	mu    sync.Mutex
	kinds map[store.Kind]int
}

func (o *ops) Run(ctx context.Context, batch []store.Op) {
	o.mu.Lock()
	for i := range batch {
		o.kinds[batch[i].Kind]++
	}
	o.mu.Unlock()
	o.Store.Run(ctx, batch)
}

func (o *ops) take() map[store.Kind]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := o.kinds
	o.kinds = map[store.Kind]int{}
	return k
}

func newOps(c *testenv.Clock) *ops {
	return &ops{Store: memstore.New(memstore.WithClock(c)), kinds: map[store.Kind]int{}}
}

// said is an Outcome: what the response says, per rule name, and whether
// it counts.
type said struct {
	used  map[string]int64
	count bool
}

func (s said) Counts(*policycore.Rule) bool { return s.count }
func (s said) Used(r *policycore.Rule) (int64, bool) {
	u, ok := s.used[r.Name]
	return u, ok
}

// settling is a checked rule that settles (and counts, with counts).
func settling(t *testing.T, name string, l sluice.Limit, settles, counts bool) *policycore.Rule {
	t.Helper()
	r := &policycore.Rule{Name: name, Limit: l, Settles: settles, Counts: counts}
	if err := (&policycore.Checker{Prefix: "t:"}).Check(r, true); err != nil {
		t.Fatal(err)
	}
	return r
}

// admit takes ps on lim and returns their Spends.
func admit(t *testing.T, lim *sluice.Limiter, ps []policycore.Part) []policycore.Spend {
	t.Helper()
	each := make([]sluice.Result, len(ps))
	res, _, err := policycore.Take(context.Background(), lim, ps, each, false)
	if err != nil || !res.Allowed {
		t.Fatalf("take: %+v, %v", res, err)
	}
	return policycore.AppendSpends(nil, ps, each)
}

// TestSettleExactUnits: an estimate of 500 is brought to what the response
// says: 4000 charges 3,500 more, 100 gives 400 back, nothing said leaves
// it; the handler's charges add to the response's.
func TestSettleExactUnits(t *testing.T) {
	ctx := context.Background()
	c := testenv.NewClock()
	st := newOps(c)
	lim := sluice.New(st)
	l := sluice.PerHour(10_000)
	l.Debt = 5000
	for _, tc := range []struct {
		name    string
		said    map[string]int64
		charged []int64 // the handler's Charge calls
		left    int64
		ops     map[store.Kind]int
	}{
		{"more", map[string]int64{"tok": 4000}, nil, 6000, map[store.Kind]int{store.Charge: 1}},
		{"less", map[string]int64{"tok": 100}, nil, 9900, map[store.Kind]int{store.Refund: 1}},
		{"silent", nil, nil, 9500, map[store.Kind]int{}},
		{"equal", map[string]int64{"tok": 500}, nil, 9500, map[store.Kind]int{}},
		{"handler", nil, []int64{300, 900}, 8800, map[store.Kind]int{store.Charge: 1}},
		{"handler-zero", nil, []int64{0}, 10_000, map[store.Kind]int{store.Refund: 1}},
		{"both", map[string]int64{"tok": 1000}, []int64{250}, 8750, map[store.Kind]int{store.Charge: 1}},
		{"into-debt", map[string]int64{"tok": 14_000}, nil, -4000, map[store.Kind]int{store.Charge: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := settling(t, "tok", l, true, false)
			key := r.KeyPrefix + tc.name
			ss := admit(t, lim, []policycore.Part{{Rule: r, Key: key, Cost: 500}})
			st.take()
			for _, u := range tc.charged {
				if err := policycore.Charge(ss, false, "", u); err != nil {
					t.Fatal(err)
				}
			}
			if err := policycore.Settle(ctx, lim, ss, said{used: tc.said}); err != nil {
				t.Fatal(err)
			}
			if got := st.take(); fmt.Sprint(got) != fmt.Sprint(tc.ops) {
				t.Errorf("ops %v, want %v", got, tc.ops)
			}
			if l := left(t, lim, r, tc.name); l != tc.left {
				t.Errorf("%d left, want %d", l, tc.left)
			}
		})
	}
}

// TestSettleOneChargeForEveryRule: the charges of a request's rules go to
// the store as one composite; a handler's refund is counted before the
// settle, and a rule that does not settle is left alone.
func TestSettleOneChargeForEveryRule(t *testing.T) {
	ctx := context.Background()
	c := testenv.NewClock()
	st := newOps(c)
	lim := sluice.New(st)
	a := settling(t, "a", sluice.PerHour(1000), true, false)
	b := settling(t, "b", sluice.PerHour(1000).WithAlgorithm(sluice.FixedWindow), true, false)
	plain := rule(t, "plain", sluice.PerHour(1000).WithAlgorithm(sluice.SlidingLog))
	ss := admit(t, lim, []policycore.Part{{Rule: a, Key: a.KeyPrefix + "k", Cost: 100}, {Rule: b, Key: b.KeyPrefix + "k", Cost: 100}, {Rule: plain, Key: plain.KeyPrefix + "k", Cost: 100}})
	if found, err := policycore.Refund(ctx, lim, ss, "a", 60); !found || err != nil {
		t.Fatal(found, err)
	}
	if err := policycore.Charge(ss, false, "plain", 5); !errors.Is(err, policycore.ErrNoCharge) || err.Error() != `no policy with a Used named "plain"` {
		t.Errorf("Charge of a rule that does not settle: %v", err)
	}
	if err := policycore.Charge(ss, false, "a", -1); err == nil {
		t.Error("a negative charge")
	}
	if err := policycore.Charge(ss, true, "a", 1); err == nil || !strings.Contains(err.Error(), "settled") {
		t.Errorf("a charge once settled: %v", err)
	}
	st.take()
	if err := policycore.Settle(ctx, lim, ss, said{used: map[string]int64{"a": 140, "b": 300, "plain": 999}}); err != nil {
		t.Fatal(err)
	}
	if got := st.take(); fmt.Sprint(got) != fmt.Sprint(map[store.Kind]int{store.Charge: 1}) {
		t.Errorf("ops %v, want one charge", got)
	}
	if la, lb, lp := left(t, lim, a, "k"), left(t, lim, b, "k"), left(t, lim, plain, "k"); la != 860 || lb != 700 || lp != 900 {
		t.Errorf("left %d, %d, %d; want 860, 700, 900", la, lb, lp)
	}
}

// TestCountingByOutcome: a counting rule looks before (refused once Cost
// cannot pass, with the take's own RetryAfter) and is charged only when
// the outcome counts.
func TestCountingByOutcome(t *testing.T) {
	ctx := context.Background()
	c := testenv.NewClock()
	lim := sluice.New(memstore.New(memstore.WithClock(c)))
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.AlignedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			r := settling(t, "fail", sluice.PerMinute(5).WithAlgorithm(alg), false, true)
			ip := "ip-" + alg.String()
			p := []policycore.Part{{Rule: r, Key: r.KeyPrefix + ip, Cost: 1}}
			for i := range 20 {
				res, _, err := policycore.Take(ctx, lim, p, nil, false)
				if err != nil || !res.Allowed {
					t.Fatalf("uncounted request %d: %+v, %v", i, res, err)
				}
				ss := policycore.AppendSpends(nil, p, []sluice.Result{res})
				if err := policycore.Settle(ctx, lim, ss, said{count: false}); err != nil {
					t.Fatal(err)
				}
			}
			if l := left(t, lim, r, ip); l != 5 {
				t.Fatalf("%d left after uncounted requests, want 5", l)
			}
			for i := range 5 {
				res, _, err := policycore.Take(ctx, lim, p, nil, false)
				if err != nil || !res.Allowed || res.Remaining != int64(5-i) {
					t.Fatalf("counted request %d: %+v, %v", i, res, err)
				}
				ss := policycore.AppendSpends(nil, p, []sluice.Result{res})
				if err := policycore.Settle(ctx, lim, ss, said{count: true}); err != nil {
					t.Fatal(err)
				}
			}
			res, _, err := policycore.Take(ctx, lim, p, nil, false)
			want, _ := lim.Take(ctx, r.KeyPrefix+ip, r.Limit, 1)
			if err != nil || res.Allowed || res.RetryAfter <= 0 || res.RetryAfter != want.RetryAfter || res.Remaining != 0 {
				t.Errorf("the sixth: %+v, %v; want refused as a take of 1 is, %+v", res, err, want)
			}
			if p[0].Taken {
				t.Error("a refused look is Taken")
			}
		})
	}
}

// TestLookInDebt: a counting rule charged into debt refuses until the
// debt is paid.
func TestLookInDebt(t *testing.T) {
	ctx := context.Background()
	c := testenv.NewClock()
	lim := sluice.New(memstore.New(memstore.WithClock(c)))
	l := sluice.PerMinute(6)
	l.Debt = 6
	r := settling(t, "err", l, true, true)
	p := []policycore.Part{{Rule: r, Key: r.KeyPrefix + "k", Cost: 1}}
	res, _, err := policycore.Take(ctx, lim, p, nil, false)
	if err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	ss := policycore.AppendSpends(nil, p, []sluice.Result{res})
	if err := policycore.Settle(ctx, lim, ss, said{count: true, used: map[string]int64{"err": 9}}); err != nil {
		t.Fatal(err)
	}
	if l := left(t, lim, r, "k"); l != -3 {
		t.Fatalf("%d left, want -3", l)
	}
	res, _, err = policycore.Take(ctx, lim, p, nil, false)
	// 3 owed and 1 to spend at 6 a minute: 40s.
	if err != nil || res.Allowed || res.RetryAfter != 40*time.Second {
		t.Errorf("in debt: %+v, %v; want refused for 40s", res, err)
	}
	c.Add(40 * time.Second)
	if res, _, err = policycore.Take(ctx, lim, p, nil, false); err != nil || !res.Allowed {
		t.Errorf("debt paid: %+v, %v", res, err)
	}
}

// TestLookInComposite: a look that refuses after the composite admitted
// the request gives back what the others spent, and reports its own
// refusal.
func TestLookInComposite(t *testing.T) {
	ctx := context.Background()
	c := testenv.NewClock()
	lim := sluice.New(memstore.New(memstore.WithClock(c)))
	fail := settling(t, "fail", sluice.PerMinute(2), false, true)
	all := rule(t, "all", sluice.PerMinute(100))
	ps := func() []policycore.Part {
		return []policycore.Part{{Rule: all, Key: all.KeyPrefix + "k", Cost: 10}, {Rule: fail, Key: fail.KeyPrefix + "k", Cost: 2}}
	}
	p := ps()
	ss := admit(t, lim, p)
	if err := policycore.Settle(ctx, lim, ss, said{count: true}); err != nil {
		t.Fatal(err)
	}
	p = ps()
	each := make([]sluice.Result, 2)
	res, _, err := policycore.Take(ctx, lim, p, each, false)
	if err != nil || res.Allowed || !each[0].Allowed || each[1].Allowed || res.RetryAfter != 60*time.Second {
		t.Fatalf("refused by the look: %+v %+v, %v", res, each, err)
	}
	if got := policycore.RefusedNames(p, each); fmt.Sprint(got) != "[fail]" {
		t.Errorf("refused by %v", got)
	}
	if l := left(t, lim, all, "k"); l != 90 || each[0].Remaining != 90 {
		t.Errorf("%d left (reported %d) after the refusal, want 90: the take given back", l, each[0].Remaining)
	}
}

// TestSettlingNeedsChargeable: a rule that settles or counts must be
// chargeable.
func TestSettlingNeedsChargeable(t *testing.T) {
	for _, tc := range []struct {
		r    *policycore.Rule
		want string
	}{
		{&policycore.Rule{Name: "a", Limit: sluice.PerMinute(5).WithAlgorithm(sluice.SlidingWindow), Settles: true}, `policy "a": charging what was used (Used) needs an algorithm that can be charged (token-bucket, gcra, fixed-window or aligned-window), not sliding-window`},
		{&policycore.Rule{Name: "b", Limit: sluice.PerMinute(5).WithAlgorithm(sluice.LeakyBucket), Counts: true}, `policy "b": counting by outcome (Count) needs`},
		{&policycore.Rule{Name: "c", Limit: sluice.PerMinute(5).WithAlgorithm(sluice.SlidingLog), Counts: true, Settles: true}, `policy "c": counting by outcome (Count) needs`},
	} {
		err := (&policycore.Checker{}).Check(tc.r, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %s", tc.r.Name, err, tc.want)
		}
	}
}

// TestSettleStoreDown: a settle the store fails names the rule, and
// changes nothing.
func TestSettleStoreDown(t *testing.T) {
	ctx := context.Background()
	c := testenv.NewClock()
	lim := sluice.New(memstore.New(memstore.WithClock(c)))
	a := settling(t, "a", sluice.PerHour(1000), true, false)
	b := settling(t, "b", sluice.PerHour(1000), true, false)
	ss := admit(t, lim, []policycore.Part{{Rule: a, Key: a.KeyPrefix + "k", Cost: 100}, {Rule: b, Key: b.KeyPrefix + "k", Cost: 100}})
	dead := sluice.New(down{})
	err := policycore.Settle(ctx, dead, ss, said{used: map[string]int64{"a": 10, "b": 500}})
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), `policy "a"`) || !strings.Contains(err.Error(), `policy "b": charge`) {
		t.Errorf("settle on a dead store: %v", err)
	}
	// The refund failed: its units may still be given back.
	if found, err := policycore.Refund(ctx, lim, ss, "a", 100); !found || err != nil {
		t.Fatal(found, err)
	}
	if l := left(t, lim, a, "k"); l != 1000 {
		t.Errorf("%d left, want 1000", l)
	}
}

// down is a store that is gone.
type down struct{}

func (down) Run(_ context.Context, batch []store.Op) {
	for i := range batch {
		batch[i].Err = sluice.ErrStoreUnavailable
	}
}

func TestParseUnits(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4000": 4000, " 17\t": 17, "007": 7, "9223372036854775807": 1<<63 - 1} {
		if got, err := policycore.ParseUnits(in); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", " ", "-1", "+1", "1.5", "1e3", "12 13", "0x10", "9223372036854775808", strings.Repeat("9", 100)} {
		if got, err := policycore.ParseUnits(in); err == nil || len(err.Error()) > 80 {
			t.Errorf("%q: %d, %v; want a short error", in, got, err)
		}
	}
}

func FuzzParseUnits(f *testing.F) {
	for _, s := range []string{"0", "4000", " 17 ", "-1", "1.5", "99999999999999999999", "\x00", "١٢"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := policycore.ParseUnits(s)
		if err != nil {
			return
		}
		if n < 0 || fmt.Sprint(n) != strings.TrimLeft(strings.Trim(s, " \t"), "0") && n != 0 {
			t.Errorf("%q read as %d", s, n)
		}
	})
}
