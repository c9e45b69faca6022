package rlqs

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

const sec = int64(1_000_000)

// One client at 10 a second with a burst of 10: the burst at once, then
// one every 100ms, is exactly the bound; one more is over it by one.
func TestCheckOneBucket(t *testing.T) {
	lim := []Limiter{{Start: 0, End: 10 * sec, Tokens: 10, Burst: 10}}
	var adm []int64
	for range 10 {
		adm = append(adm, 0)
	}
	for k := int64(1); k <= 90; k++ {
		adm = append(adm, k*sec/10)
	}
	if v, err := Check(10, sec, lim, adm); v != nil || err != nil {
		t.Fatalf("at the bound: %v, %v", v, err)
	}
	v, err := Check(10, sec, lim, append(adm, 5*sec))
	if err != nil || v == nil || v.Excess != 1 {
		t.Fatalf("one over: %+v, %v; want an excess of 1", v, err)
	}
	if v.From > 5*sec || v.To < 5*sec {
		t.Errorf("the window [%d, %d] misses the extra admission", v.From, v.To)
	}
}

// A client whose bucket is replaced starts the new one full: each
// limiter in force in a window counts its burst.
func TestCheckReplacedBucket(t *testing.T) {
	lim := []Limiter{{Start: 0, End: sec, Tokens: 1, Burst: 5}, {Start: sec, End: 3 * sec, Tokens: 1, Burst: 5}}
	adm := []int64{0, 0, 0, 0, 0, sec, sec, sec, sec, sec}
	if v, err := Check(1, sec, lim, adm); v != nil || err != nil {
		t.Fatalf("two full buckets: %v, %v", v, err)
	}
	if v, _ := Check(1, sec, lim[1:], adm); v == nil {
		t.Fatal("without the first limiter the first burst is over")
	}
}

// A fallback limiter adds its own rate and burst over its span.
func TestCheckFallback(t *testing.T) {
	lim := []Limiter{{Start: 0, End: 10 * sec, Tokens: 0, Burst: 0}, {Start: 0, End: 10 * sec, Tokens: 5, Burst: 1, Fallback: true}}
	var adm []int64
	for k := range int64(50) {
		adm = append(adm, k*sec/5)
	}
	if v, err := Check(0, sec, lim, adm); v != nil || err != nil {
		t.Fatalf("within the fallback: %v, %v", v, err)
	}
	if v, _ := Check(0, sec, lim[:1], adm); v == nil {
		t.Fatal("without the fallback, a budget of 0 admits nothing")
	}
	if _, _, ok := CheckRates(0, lim); !ok {
		t.Error("CheckRates counted a fallback")
	}
	if at, sum, ok := CheckRates(4, []Limiter{{Start: 0, End: 2, Tokens: 3}, {Start: 1, End: 3, Tokens: 2}}); ok || at != 1 || sum != 5 {
		t.Errorf("CheckRates: %d, %d, %v; want 5 at 1", at, sum, ok)
	}
}

// Random clients whose rates never add up to more than the budget's,
// each taking greedily from its exact bucket: never over the bound. The
// same trace with one admission more somewhere is over it.
func TestCheckGreedyClients(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 5))
	for range 200 {
		rate, fill := 1+rng.Int64N(100), sec*(1+rng.Int64N(3))
		var lim []Limiter
		var adm []int64
		left := rate
		for range 1 + rng.IntN(6) {
			// a client: a few limiters in a row, each at most what is left
			share := rng.Int64N(left + 1)
			left -= share
			at := int64(0)
			for at < 20*sec {
				end := at + sec/2 + rng.Int64N(5*sec)
				tokens := rng.Int64N(share + 1)
				burst := max(1, rng.Int64N(tokens+2))
				lim = append(lim, Limiter{Start: at, End: end, Tokens: tokens, Burst: burst})
				b := NewTokenBucket(tokens, burst, fill, at)
				for range burst {
					if !b.Take(at, 1) {
						t.Fatal("a full bucket refused its burst")
					}
					adm = append(adm, at)
				}
				for t := at + 1; t < end; t += 1 + rng.Int64N(sec/10) {
					if b.Take(t, 1) {
						adm = append(adm, t)
					}
				}
				at = end
			}
		}
		if _, _, ok := CheckRates(rate, lim); !ok {
			t.Fatal("the trace's rates are over its budget")
		}
		v, err := Check(rate, fill, lim, adm)
		if v != nil || err != nil {
			t.Fatalf("rate %d per %dµs, limiters %v: %v, %v", rate, fill, lim, v, err)
		}
		if len(adm) == 0 {
			continue
		}
		// Every client took its first burst at 0: one more admission
		// then is over.
		extra := append(adm, adm[0])
		for range rng.IntN(3) {
			extra = append(extra, adm[0])
		}
		if v, _ := Check(rate, fill, lim, extra); v == nil {
			t.Fatalf("rate %d per %dµs, limiters %v: an extra admission at %d went unseen", rate, fill, lim, adm[0])
		}
	}
}
