package console

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeHolding returns Options whose Leases and Slots report n keys each
// (Slices off when slices is false).
func fakeHolding(slices bool, n int) Options {
	var o Options
	o.Config = testView
	o.Slices = func(int) []StoreSlices {
		if !slices {
			return nil
		}
		s := StoreSlices{Store: "main", Keys: n, Held: 40, Local: 990, Redis: 10, Taken: 5, Units: 500, GivenBack: 60, Expired: 7}
		for i := range n {
			s.Top = append(s.Top, SliceKey{Key: fmt.Sprintf("hot<%d>", i), Held: int64(n - i), Slices: 1, ExpiresInUS: 250_000, Demand: 90})
		}
		return []StoreSlices{s}
	}
	o.Slots = func(int) Slots {
		s := Slots{Keys: n, Held: int64(n), Dropped: 3, Bytes: 1234, Bound: "the keys the slots view follows with a new one: 1025, over the service's limit view-keys of 1024 (--limit view-keys=N raises it)"}
		for i := range n {
			s.Top = append(s.Top, HeldKey{Key: fmt.Sprintf("job:%d", i), Limit: 4, Held: 1, Leases: 1, OldestUS: 1_500_000, NextExpiryUS: 65_250_000, Acquired: 2, Refused: 1, Released: 1})
		}
		if n > 0 { // the first key's held by all instances is known, the others' not
			all := int64(3)
			s.Top[0].HeldAll = &all
		}
		return s
	}
	return o
}

// The live report and the page show the slices (totals, the keys holding
// the most) and the concurrency slots; without slices the page says how
// to turn them on. Both read without the script.
func TestHoldingEndpoints(t *testing.T) {
	for _, on := range []bool{true, false} {
		c, _ := newTestConsole(t, fakeHolding(on, 3))
		srv := httptest.NewServer(c.Handler())
		defer srv.Close()
		_, _, body := get(t, srv.URL+"/console/api/live")
		var l struct {
			SlicesOn bool          `json:"slices_on"`
			Slices   []StoreSlices `json:"slices"`
			Slots    *Slots        `json:"slots"`
		}
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatal(err)
		}
		if l.SlicesOn != on || (len(l.Slices) == 1) != on || l.Slots == nil || len(l.Slots.Top) != 3 || l.Slots.Top[0].NextExpiryUS != 65_250_000 {
			t.Errorf("slices %v: live %s", on, body)
		}
		if h := l.Slots.Top; h[0].HeldAll == nil || *h[0].HeldAll != 3 || h[1].HeldAll != nil || strings.Count(body, `"held_all"`) != 1 {
			t.Errorf("held_all: %s", body)
		}
		if on && (l.Slices[0].Top[2].Key != "hot<2>" || l.Slices[0].Expired != 7 || l.Slices[0].CallsPer100() != "1.5") {
			t.Errorf("slices: %+v", l.Slices)
		}
		_, _, page := get(t, srv.URL+"/")
		for _, want := range []string{
			`<tr data-key="job:0"><td data-label="Key"><code>job:0</code></td><td class="num" data-k="held" data-label="Held here">1</td><td class="num" data-k="held_all" data-label="All instances">3</td><td class="num" data-k="limit" data-label="Limit">4</td>`,
			`<td class="num" data-k="held" data-label="Held here">1</td><td class="num" data-k="held_all" data-label="All instances">—</td>`,
			`data-label="Oldest held for">1.5s</td><td class="num" data-k="next_expiry" data-label="Next expiry in">1m5.3s</td>`,
			`Units held now: <span data-k="held">3</span>; keys followed: <span data-k="keys">3</span>, in <span data-k="bytes">1234</span> of the view's <span data-k="max_bytes">4194304</span> bytes; keys no longer followed, to make room: <span data-k="dropped">3</span>. Keys or leases were left out: <span data-k="bound">the keys the slots view follows with a new one: 1025, over the service&#39;s limit view-keys of 1024 (--limit view-keys=N raises it)</span>.`,
			`<a href="#slots">Slots</a>`,
		} {
			if !strings.Contains(page, want) {
				t.Errorf("slices %v: the page lacks %s", on, want)
			}
		}
		if got := strings.Contains(page, `id="slices-off"`); got == on {
			t.Errorf("slices %v: the page says slices are off: %v", on, got)
		}
		if on {
			for _, want := range []string{
				`<dd data-k="calls_per_100">1.5</dd>`, `<dd data-k="expired">7</dd>`, `<dd data-k="local">990</dd>`,
				`<tr data-key="hot&lt;1&gt;"><td data-label="Key"><code>hot&lt;1&gt;</code></td><td class="num" data-k="held" data-label="Units held">2</td>`,
				`data-label="First ends in">250ms</td>`,
			} {
				if !strings.Contains(page, want) {
					t.Errorf("the page lacks %s", want)
				}
			}
		} else if !strings.Contains(page, "--store-slices") {
			t.Errorf("the page does not say how to turn slices on")
		}
	}
	// Without Options.Slots the page has no slots, the report none.
	c, _ := newTestConsole(t, Options{})
	if l := c.Live(0); l.Slots != nil || l.SlicesOn || l.Slices == nil {
		t.Errorf("no options: %+v", l.holding)
	}
}

// However many keys the service holds, the page and the report list
// TopK of them.
func TestHoldingBounded(t *testing.T) {
	o := fakeHolding(true, 5000)
	o.TopK = 7
	c, _ := newTestConsole(t, o)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	_, _, page := get(t, srv.URL+"/")
	if n := strings.Count(page, `<tr data-key="job:`); n != 7 {
		t.Errorf("%d slot rows, want 7", n)
	}
	if n := strings.Count(page, `<tr data-key="hot&lt;`); n != 7 {
		t.Errorf("%d slice rows, want 7", n)
	}
	if len(page) > 200<<10 {
		t.Errorf("a page of %d bytes", len(page))
	}
	l := c.Live(0)
	if len(l.Slots.Top) != 7 || len(l.Slices[0].Top) != 7 {
		t.Errorf("the report lists %d slots, %d slices; want 7", len(l.Slots.Top), len(l.Slices[0].Top))
	}
}

// realHolding returns Options over view whose slices and slots have the
// long keys a real service has (for the screenshots and the fit test); the
// slice counters grow with the seconds tick counts.
func realHolding(view func() ConfigView, tick *atomic.Int64) Options {
	return Options{Config: view, Slices: func(int) []StoreSlices {
		k := float64(tick.Load())
		local := 1_482_113 + int64(1500*k+8000*math.Sin(k/20))
		return []StoreSlices{{Store: "main", Keys: 3, Held: 1460, Local: local, Redis: 2_204 + int64(3*k), Taken: 311 + int64(k/2), Units: 1_496_000, GivenBack: 9_930, Expired: 1_424, Top: []SliceKey{
			{Key: "/tenant:4f1c2a9e-0b7d-4c55-9a1e-7d2f3b9c8e61/global-api-budget", Held: 1200, Slices: 2, ExpiresInUS: 640_000, Demand: 4_800},
			{Key: "/tenant:acme/search", Held: 260, Slices: 1, ExpiresInUS: 210_000, Demand: 1_050},
		}}}
	}, Slots: func(int) Slots {
		return Slots{Keys: 4, Held: 5, Top: []HeldKey{
			{Key: "exports:customer-account-4f1c2a9e-0b7d-4c55-9a1e-7d2f3b9c8e61", Limit: 3, Held: 3, Leases: 2, OldestUS: 94_300_000, NextExpiryUS: 205_700_000, Acquired: 41, Refused: 6, Released: 38, Expired: 1},
			{Key: "reports:acme", Limit: 2, Held: 2, Leases: 2, OldestUS: 12_100_000, NextExpiryUS: 47_900_000, Acquired: 17, Refused: 0, Released: 15},
		}}
	}}
}

// SampleSlices counts each second's new decisions and slices of each
// slicing store, kept as the rules' counts are: a point a second in the
// window, a point a minute over the hours.
func TestSliceSamples(t *testing.T) {
	var local, redis, slices int64
	o := Options{Slices: func(int) []StoreSlices {
		return []StoreSlices{{Store: "main", Local: local, Redis: redis, Taken: slices}}
	}}
	c, clk := newTestConsole(t, o)
	c.SampleSlices() // notes the counters
	want := SlicePoint{}
	for s := range 200 {
		clk.Advance(time.Second)
		local, redis, slices = local+int64(100*s), redis+int64(s%3), slices+int64(s%2)
		c.SampleSlices()
		want.Local, want.Redis, want.Taken = want.Local+int64(100*s), want.Redis+int64(s%3), want.Taken+int64(s%2)
	}
	l := c.Live(clk.Now().Unix() - 2)
	if p := l.Slices[0].Points; len(p) != 3 || p[2] != (SlicePoint{T: clk.Now().Unix(), Local: 19900, Redis: 199 % 3, Taken: 1}) {
		t.Errorf("the last seconds: %+v", p)
	}
	var sum SlicePoint
	for _, p := range c.LiveRange(time.Hour, 0).Slices[0].Points {
		sum.Local, sum.Redis, sum.Taken = sum.Local+p.Local, sum.Redis+p.Redis, sum.Taken+p.Taken
	}
	if sum != want {
		t.Errorf("the hour's minutes sum to %+v, want %+v", sum, want)
	}
	// Counters that go back (a new store) start over rather than count less than nothing.
	local = 0
	clk.Advance(time.Second)
	c.SampleSlices()
	if p := c.Live(clk.Now().Unix()).Slices[0].Points; len(p) != 1 || p[0].Local != 0 {
		t.Errorf("after the counters went back: %+v", p)
	}
}
