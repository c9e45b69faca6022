// Package traces draws the random traces the stores' checks share: the
// public conformance suite (store/storetest) and the module's own
// (internal/testsupport/storetest).
package traces

import (
	"math/rand/v2"
	"strconv"

	"github.com/sluice-go/sluice/internal/algo"
)

// Base is a time near the present, in µs since the epoch.
const Base = int64(1_764_000_000_000_000)

// Req is one request of a trace whose limits change.
type Req struct {
	Key       string
	Params    algo.Params
	Now, Cost int64
}

// Changed draws n requests over three keys, each under one of a few
// limits of every algorithm: a key often stays under one limit for a while,
// then moves to another (a new rate, period or burst, or another algorithm,
// as a rolling deploy does). Gaps run from zero to a few periods, costs from
// 0 to the capacity.
func Changed(r *rand.Rand, n int) []Req {
	kinds := algo.Kinds()
	shapes := [][2]int64{{3, 1_000_000}, {7, 100_000}, {1, 60_000_000}, {5, 1_000_000}, {4, 2_000_000}, {13, 1000}}
	var limits []algo.Params
	for range 3 + r.IntN(4) {
		k := kinds[r.IntN(len(kinds))]
		sh := shapes[r.IntN(len(shapes))]
		if len(limits) > 0 && r.IntN(2) == 0 { // a variant of a limit drawn before
			q := limits[r.IntN(len(limits))]
			if r.IntN(2) == 0 {
				k = q.Kind
			} else {
				sh = [2]int64{q.Rate, q.Period}
			}
		}
		burst := 1 + r.Int64N(6)
		if k == algo.LeakyBucket {
			burst--
		}
		limits = append(limits, algo.Params{Kind: k, Rate: sh[0], Period: sh[1], Burst: burst})
	}
	cur := map[string]algo.Params{}
	tr := make([]Req, n)
	now := Base + r.Int64N(1_000_000)
	for i := range tr {
		key := "k" + strconv.Itoa(r.IntN(3))
		p, ok := cur[key]
		if !ok || r.IntN(6) == 0 {
			p = limits[r.IntN(len(limits))]
			cur[key] = p
		}
		switch r.IntN(4) {
		case 0: // same instant
		case 1:
			now += r.Int64N(p.Period/p.Rate + 2)
		case 2:
			now += r.Int64N(p.Period + 1)
		default:
			now += r.Int64N(3*p.Period + 1)
		}
		tr[i] = Req{Key: key, Params: p, Now: now, Cost: r.Int64N(p.Capacity() + 1)}
	}
	return tr
}
