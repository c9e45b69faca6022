package rlqs

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// A holder's leases against every grant remembered: the outstanding rate
// is never below the largest grant not yet ended, and equals it while no
// merge happened.
func TestLeasesMatchGrants(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 3))
	for range 500 {
		var s leases
		var grants []lease
		now := int64(0)
		merged := false
		for range 40 {
			now += rng.Int64N(3000)
			tokens := rng.Int64N(50)
			end := now + 5000 + rng.Int64N(2000)
			s.add(now, tokens, end)
			grants = append(grants, lease{tokens, end})
			merged = merged || steps(grants, now) > maxLeases
			for probe := now; probe < now+8000; probe += 250 {
				var want int64
				for _, g := range grants {
					if g.end > probe {
						want = max(want, g.tokens)
					}
				}
				got := s.at(probe)
				if got < want || (!merged && got != want) {
					t.Fatalf("after grants %v: at(%d) = %d, want %d (merged %v)", grants, probe, got, want, merged)
				}
			}
		}
	}
}

// The staircase by hand: a cut leaves the higher grant in force until it
// ends; a rise replaces what it covers.
func TestLeasesStaircase(t *testing.T) {
	var s leases
	s.add(0, 10, 100)
	s.add(20, 4, 120) // a cut: 10 until 100, then 4
	if s.at(50) != 10 || s.at(100) != 4 || s.at(120) != 0 || s.next(50) != 100 {
		t.Errorf("after a cut: at(50) %d, at(100) %d, at(120) %d, next %d", s.at(50), s.at(100), s.at(120), s.next(50))
	}
	s.add(30, 12, 130) // a rise covers both
	if s.n != 1 || s.at(40) != 12 || s.at(129) != 12 || s.at(130) != 0 {
		t.Errorf("after a rise: %+v", s)
	}
	s.rescale(1, 60) // a unit of a second became a minute
	if s.at(40) != 720 {
		t.Errorf("rescaled: %d, want 720", s.at(40))
	}
}

// steps is the number of grants in force at now that no other covers (as
// many tokens or more, ending no sooner): the leases a holder needs to
// keep them all exactly.
func steps(grants []lease, now int64) int {
	n := 0
	for i, g := range grants {
		if g.end <= now {
			continue
		}
		covered := false
		for j, h := range grants {
			if j != i && h.tokens >= g.tokens && h.end >= g.end && (h.tokens > g.tokens || h.end > g.end || j > i) {
				covered = true
				break
			}
		}
		if !covered {
			n++
		}
	}
	return n
}
