package algo_test

import (
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
)

// fuzzGap decodes one byte of a fuzz input into a gap in µs: small gaps, then
// eighths of T, sixteenths of the period, and whole periods.
func fuzzGap(b byte, p algo.Params) int64 {
	switch g := int64(b); {
	case g < 64:
		return g
	case g < 128:
		return (g - 64) * p.Period / (8 * p.Rate)
	case g < 192:
		return (g - 128) * p.Period / 16
	default:
		return (g - 192) * p.Period
	}
}

// fuzzCost decodes 7 bits into a cost in [0, capacity]; all ones is the
// capacity itself.
func fuzzCost(v byte, capacity int64) int64 {
	c := int64(v)
	switch {
	case c == 127:
		return capacity
	case c > capacity:
		return c % (capacity + 1)
	}
	return c
}

// FuzzStep runs a limit of any valid size over a request sequence decoded
// from data, two bytes a request (gap, then cost with the low bit choosing
// one of two keys), through Step and through the model, and requires the same
// decisions and sane fields. A shadow store that drops each state as soon as
// its FreshAt has come must decide the same; token-bucket and gcra must
// decide identically.
func FuzzStep(f *testing.F) {
	f.Add(byte(0), int64(3), int64(1_000_000), int64(2), []byte{0, 2, 0, 2, 0, 2, 100, 2, 200, 255, 70, 3})
	f.Add(byte(1), int64(7), int64(100_000), int64(5), []byte{0, 10, 0, 255, 1, 2, 65, 2, 66, 255, 192, 4})
	f.Add(byte(2), int64(3), int64(1_000_000), int64(4), []byte{0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 255, 90, 2})
	f.Add(byte(3), int64(5), int64(1_000), int64(0), []byte{10, 10, 0, 2, 190, 3, 130, 255, 0, 0})
	f.Add(byte(4), int64(10), int64(10), int64(0), []byte{3, 20, 6, 2, 6, 10, 1, 7, 1, 20, 14, 0})
	f.Add(byte(5), int64(3), int64(100), int64(0), []byte{5, 2, 0, 2, 15, 2, 10, 4, 85, 4, 14, 0, 1, 0})
	f.Add(byte(2), int64(7), int64(5), int64(10), []byte{0, 255, 0, 255, 1, 9, 1, 255, 2, 255})
	f.Add(byte(0), int64(1)<<40, int64(1000), int64(1000), []byte{0, 255, 1, 255, 64, 255, 255, 255})
	f.Fuzz(func(t *testing.T, kind byte, rate, period, burst int64, data []byte) {
		p := algo.Params{Kind: algo.Kind(kind%7 + 1), Rate: rate, Period: period, Burst: burst}
		if p.Validate() != nil {
			t.Skip()
		}
		if len(data) > 256 { // 128 requests: long enough, and quick to minimize
			data = data[:256]
		}
		m := model.New(p.Kind, p.Rate, p.Period, p.Burst)
		twin := p // token-bucket's gcra and the other way round
		if p.Kind == algo.TokenBucket || p.Kind == algo.GCRA {
			twin.Kind = algo.TokenBucket + algo.GCRA - p.Kind
		}
		var (
			state, shadow, other [2]algo.State
			freshAt              [2]int64
		)
		capacity := p.Capacity()
		now := t0
		for i := 0; i+1 < len(data); i += 2 {
			if now += fuzzGap(data[i], p); now > algo.MaxTime {
				return
			}
			k := data[i+1] & 1
			key := "ab"[k : k+1]
			cost := fuzzCost(data[i+1]>>1, capacity)

			d := algo.Step(&p, &state[k], now, cost, algo.Never)
			if err := checkInvariants(p, now, cost, d); err != nil {
				t.Fatalf("request %d (key %s, t0+%d, cost %d): %v: %+v", i/2, key, now-t0, cost, err, d)
			}
			if want := m.Take(key, now, cost); !same(want, d) {
				t.Fatalf("request %d (key %s, t0+%d, cost %d): step %+v, model %+v", i/2, key, now-t0, cost, d, want)
			}
			if now >= freshAt[k] {
				shadow[k] = algo.State{}
			}
			sd := algo.Step(&p, &shadow[k], now, cost, algo.Never)
			freshAt[k] = sd.FreshAt
			if !same(sd, d) {
				t.Fatalf("request %d (key %s, t0+%d, cost %d): %+v after dropping states at FreshAt, %+v keeping them", i/2, key, now-t0, cost, sd, d)
			}
			if twin != p {
				if od := algo.Step(&twin, &other[k], now, cost, algo.Never); od != d {
					t.Fatalf("request %d (key %s, t0+%d, cost %d): %v %+v, %v %+v", i/2, key, now-t0, cost, p.Kind, d, twin.Kind, od)
				}
			}
		}
	})
}

// FuzzChangedLimits runs two limits of any valid sizes and algorithms over one
// key, a request sequence decoded from data, two bytes a request (gap, then
// cost with the low bit choosing the limit), through Step and through the
// model, which reads each limit's state under the other as SEMANTICS.md's
// "Changed limits" says, and requires the same decisions. Dropping the state
// once its FreshAt has come must change nothing, and so must swapping
// token-bucket and gcra throughout.
func FuzzChangedLimits(f *testing.F) {
	f.Add(byte(0), int64(3), int64(1_000_000), int64(4), byte(1), int64(7), int64(100_000), int64(2), []byte{0, 2, 0, 3, 0, 2, 100, 3, 200, 255, 70, 2})
	f.Add(byte(3), int64(5), int64(1_000), int64(0), byte(6), int64(4), int64(2_000), int64(0), []byte{10, 10, 0, 3, 190, 2, 130, 255, 0, 1})
	f.Add(byte(2), int64(7), int64(5), int64(10), byte(5), int64(3), int64(10), int64(1), []byte{0, 255, 0, 254, 1, 9, 1, 255, 2, 254})
	f.Add(byte(4), int64(2), int64(1000), int64(0), byte(4), int64(2), int64(3000), int64(0), []byte{0, 2, 3, 3, 200, 2, 0, 3})
	f.Fuzz(func(t *testing.T, k1 byte, r1, p1, b1 int64, k2 byte, r2, p2, b2 int64, data []byte) {
		ps := [2]algo.Params{
			{Kind: algo.Kind(k1%7 + 1), Rate: r1, Period: p1, Burst: b1},
			{Kind: algo.Kind(k2%7 + 1), Rate: r2, Period: p2, Burst: b2},
		}
		if ps[0].Validate() != nil || ps[1].Validate() != nil {
			t.Skip()
		}
		if len(data) > 256 {
			data = data[:256]
		}
		ks := model.NewKeys()
		var state, shadow, other algo.State
		freshAt := int64(0)
		now := t0
		for i := 0; i+1 < len(data); i += 2 {
			p := ps[data[i+1]&1]
			if now += fuzzGap(data[i], p); now > algo.MaxTime {
				return
			}
			cost := fuzzCost(data[i+1]>>1, p.Capacity())
			d := algo.Step(&p, &state, now, cost, algo.Never)
			if err := checkInvariants(p, now, cost, d); err != nil {
				t.Fatalf("request %d (%+v, t0+%d, cost %d): %v: %+v", i/2, p, now-t0, cost, err, d)
			}
			want := ks.Take("k", model.Limit{Kind: p.Kind, Rate: p.Rate, Period: p.Period, Burst: p.Burst}, now, cost)
			if !same(want, d) {
				t.Fatalf("request %d (%+v, t0+%d, cost %d): step %+v, model %+v", i/2, p, now-t0, cost, d, want)
			}
			if now >= freshAt {
				shadow = algo.State{}
			}
			sd := algo.Step(&p, &shadow, now, cost, algo.Never)
			if cost > 0 {
				freshAt = sd.FreshAt
			}
			if !same(sd, d) {
				t.Fatalf("request %d (%+v, t0+%d, cost %d): %+v after dropping the state at FreshAt, %+v keeping it", i/2, p, now-t0, cost, sd, d)
			}
			q := p
			if q.Kind == algo.TokenBucket || q.Kind == algo.GCRA {
				q.Kind = algo.TokenBucket + algo.GCRA - q.Kind
			}
			if od := algo.Step(&q, &other, now, cost, algo.Never); od != d {
				t.Fatalf("request %d (%+v, t0+%d, cost %d): %+v, with token-bucket and gcra swapped %+v", i/2, p, now-t0, cost, d, od)
			}
		}
	})
}
