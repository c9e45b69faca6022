package store_test

import (
	"errors"
	"testing"

	"github.com/sluice-go/sluice/store"
)

// TestApplyRefuses checks Apply's errors on what a store or a Limiter
// got wrong: each leaves the states and the answer empty.
func TestApplyRefuses(t *testing.T) {
	const at = 1_764_000_000_000_000
	tb := store.Limit{Algorithm: 1, Rate: 1, Period: 1_000_000, Burst: 1}
	c := store.Concurrency{Limit: 1, Lifetime: 1_000_000}
	held := []store.State{{}}
	acq := store.Op{Kind: store.Acquire, At: at, Key: "k", Concurrency: c, Cost: 1, ID: 1}
	if store.Apply(&acq, at, held); acq.Err != nil {
		t.Fatal(acq.Err)
	}
	for _, tc := range []struct {
		name   string
		op     store.Op
		states []store.State
		want   error
	}{
		{"an unknown kind", store.Op{Kind: 99, Key: "k"}, nil, errors.ErrUnsupported},
		{"a time before the epoch", store.Op{Kind: store.Take, Key: "k", Limit: tb, Cost: 1}, make([]store.State, 1), store.ErrInvalidTime},
		{"a hold set for a rate key", store.Op{Kind: store.Take, Key: "k", Limit: tb, Cost: 1}, held, store.ErrMalformedState},
		{"too few states", store.Op{Kind: store.Reset, Key: "k"}, make([]store.State, 1), nil},
		{"an invalid limit", store.Op{Kind: store.Take, Key: "k", Limit: store.Limit{Algorithm: 1, Rate: 1}, Cost: 1}, make([]store.State, 1), nil},
		{"an invalid part", store.Op{Kind: store.Take, Parts: []store.Part{{Key: "a", Limit: tb}, {Key: "b"}}}, make([]store.State, 2), nil},
		{"an invalid concurrency limit", store.Op{Kind: store.Release, Key: "k", ID: 1}, make([]store.State, 1), nil},
		{"a refund under a sliding log", store.Op{Kind: store.Refund, Key: "k", Limit: store.Limit{Algorithm: 6, Rate: 1, Period: 1}}, make([]store.State, 1), store.ErrNoRefund},
		{"a charge under a leaky bucket", store.Op{Kind: store.Charge, Key: "k", Limit: store.Limit{Algorithm: 3, Rate: 1, Period: 1}, Cost: 1}, make([]store.State, 1), store.ErrNoRefund},
		{"a composite charge, a part under a sliding window", store.Op{Kind: store.Charge, Parts: []store.Part{{Key: "a", Limit: tb, Cost: 1}, {Key: "b", Limit: store.Limit{Algorithm: 5, Rate: 1, Period: 1}, Cost: 1}}}, make([]store.State, 2), store.ErrNoRefund},
		{"a debt allowance under a sliding log", store.Op{Kind: store.Take, Key: "k", Limit: store.Limit{Algorithm: 6, Rate: 1, Period: 1, Debt: 1}, Cost: 1}, make([]store.State, 1), nil},
		{"an id in use", store.Op{Kind: store.Acquire, Key: "k", Concurrency: c, Cost: 1, ID: 1, Parts: []store.Part{{Key: "a", Limit: tb, Cost: 1}}}, append(held, store.State{}), store.ErrIDInUse},
	} {
		now := int64(at)
		if tc.want == store.ErrInvalidTime {
			now = -1
		}
		store.Apply(&tc.op, now, tc.states)
		switch {
		case tc.op.Err == nil || tc.want != nil && !errors.Is(tc.op.Err, tc.want):
			t.Errorf("%s: error %v, want one wrapping %v", tc.name, tc.op.Err, tc.want)
		case tc.op.Decision != (store.Decision{}) || tc.op.Expiry != 0:
			t.Errorf("%s: %+v expiry %d with the error %v", tc.name, tc.op.Decision, tc.op.Expiry, tc.op.Err)
		}
		for i := range tc.states {
			if tc.states[i].Changed() {
				t.Errorf("%s: state %d changed", tc.name, i)
			}
		}
		t.Logf("%s: %v", tc.name, tc.op.Err)
	}
}

// TestKeys checks the states each kind of op names: a rate limit and a
// hold set of one name are two.
func TestKeys(t *testing.T) {
	parts := []store.Part{{Key: "a"}, {Key: "b"}}
	for _, tc := range []struct {
		op   store.Op
		want []string
	}{
		{store.Op{Kind: store.Take, Key: "k"}, []string{"r:k"}},
		{store.Op{Kind: store.Take, Parts: parts}, []string{"r:a", "r:b"}},
		{store.Op{Kind: store.Refund, Key: "k"}, []string{"r:k"}},
		{store.Op{Kind: store.Charge, Key: "k"}, []string{"r:k"}},
		{store.Op{Kind: store.Charge, Parts: parts}, []string{"r:a", "r:b"}},
		{store.Op{Kind: store.Reset, Key: "k"}, []string{"r:k", "h:k"}},
		{store.Op{Kind: store.Acquire, Key: "k"}, []string{"h:k"}},
		{store.Op{Kind: store.Acquire, Key: "a", Parts: parts}, []string{"h:a", "r:a", "r:b"}},
		{store.Op{Kind: store.Release, Key: "k"}, []string{"h:k"}},
		{store.Op{Kind: store.Extend, Key: "k"}, []string{"h:k"}},
		{store.Op{Kind: 0, Key: "k"}, nil},
	} {
		var got []string
		for _, k := range store.Keys(&tc.op) {
			got = append(got, k.String())
		}
		if len(got) != len(tc.want) || len(got) > 0 && got[0] != tc.want[0] || len(got) > 1 && got[len(got)-1] != tc.want[len(got)-1] {
			t.Errorf("Keys of kind %d %q %v: %v, want %v", tc.op.Kind, tc.op.Key, tc.op.Parts, got, tc.want)
		}
	}
}
