package serve

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// simRules is one budget per value of "name", 6000 a minute (100 a
// second) each.
const simRules = `domain: sim
descriptors:
  - key: name
    rate_limit: {unit: minute, requests_per_unit: 6000}
`

// A few clients on one budget, by hand: they share it, within the bound.
func TestRLQSSimSmall(t *testing.T) {
	s := newSim(t, simRules, RLQSOptions{}, testenv.SeedOr(t, 1))
	deny := simOptions{noAssignment: simDenyAll}
	for i, r := range []float64{20, 60, 200} {
		c := s.addClient(string(rune('a'+i)), "sim", deny)
		r := r
		c.demand(map[string]string{"name": "b0"}, func(int64) float64 { return r })
	}
	s.run(60 * simSec)
	var before [3]int64
	for i, c := range s.clients {
		before[i] = c.admitted
	}
	s.run(120 * simSec)
	for i, c := range s.clients {
		t.Logf("client %s: %.1f a second", c.name, float64(c.admitted-before[i])/60)
	}
	bt := s.trace["b0"]
	admitted := 0
	for _, at := range bt.admitted {
		if at >= 60*simSec {
			admitted++
		}
	}
	t.Logf("last 60s: %d admitted of %d a second's budget (%.1f%%), %d demanded in all", admitted, 100*60, 100*float64(admitted)/6000, bt.demanded)
	s.checkBound(map[string]int64{"b0": 6000}, 60*simSec)
	_ = time.Second
}

// The proof on one replica: 100 clients (Envoy's profile, but a
// tenth of them A77's) × 50 budgets of 100 a second, skewed demand that
// changes every 40s (each budget's total drawn among 0.6, 1.5 and 2.5
// times its rate, shared among the clients by a Zipf law of a fresh
// order), clients configured DENY_ALL when they have no assignment: no
// window over the bound, and the budgets used up while demand exceeds
// them. The race detector makes it a tenth of the budgets for one phase
// (CI runs it whole without).
func TestRLQSHundredClients(t *testing.T) {
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 9))
	const clients, rate = 100, 1000.0
	budgets, phases := 50, 2
	switch {
	case raceEnabled:
		budgets, phases = 5, 1
	case testenv.Long():
		phases = 6
	}
	const phase = 30 * simSec
	s := newSim(t, strings.ReplaceAll(simRules, "6000", "60000"), RLQSOptions{}, seed)
	// demand[p][j][i]: client i's rate for budget j in phase p
	demand := make([][][]float64, phases)
	totals := make([][]float64, phases)
	for p := range demand {
		demand[p], totals[p] = make([][]float64, budgets), make([]float64, budgets)
		for j := range budgets {
			total := rate * []float64{0.6, 1.5, 2.5, 1.5}[rng.IntN(4)]
			order := rng.Perm(clients)
			z := make([]float64, clients)
			sum := 0.0
			for i, rank := range order {
				z[i] = 1 / math.Pow(float64(rank+1), 1.1)
				sum += z[i]
			}
			demand[p][j] = make([]float64, clients)
			for i := range clients {
				demand[p][j][i] = total * z[i] / sum
			}
			totals[p][j] = total
		}
	}
	for i := range clients {
		o := simOptions{noAssignment: simDenyAll}
		if i%10 == 9 {
			o.profile, o.reportEvery = a77Profile, 2*simSec
		}
		c := s.addClient(fmt.Sprintf("c%02d", i), "sim", o)
		for j := range budgets {
			c.demand(map[string]string{"name": fmt.Sprintf("b%02d", j)}, func(at int64) float64 {
				return demand[min(int(at/phase), phases-1)][j][i]
			})
		}
	}
	end := int64(phases) * phase
	s.run(end)
	rates := map[string]int64{}
	for j := range budgets {
		rates[fmt.Sprintf("b%02d", j)] = 60000
	}
	s.checkBound(rates, 60*simSec)
	// Utilisation: in each phase where a budget's demand is over its rate,
	// from 15s after the phase began (the first from the end of the
	// server's warm-up and the clients' first reports).
	var used, offered, worst float64 = 0, 0, 2
	windows := 0
	for p := range phases {
		from, to := int64(p)*phase+15*simSec, int64(p+1)*phase
		for j := range budgets {
			if totals[p][j] < 1.4*rate {
				continue
			}
			n := 0
			for _, at := range s.trace[fmt.Sprintf("b%02d", j)].admitted {
				if at >= from && at < to {
					n++
				}
			}
			u := float64(n) / (rate * float64(to-from) / float64(simSec))
			if u < 0.85 {
				t.Logf("phase %d budget %d: demand %.0f/s, %.1f%%", p, j, totals[p][j], 100*u)
			}
			used += float64(n)
			offered += rate * float64(to-from) / float64(simSec)
			worst = min(worst, u)
			windows++
		}
	}
	t.Logf("utilisation while demand exceeds the rate: %.1f%% over %d budget-phases, the lowest %.1f%%", 100*used/offered, windows, 100*worst)
	if used/offered < 0.9 {
		t.Errorf("utilisation %.1f%%, want at least 90%%", 100*used/offered)
	}
}
