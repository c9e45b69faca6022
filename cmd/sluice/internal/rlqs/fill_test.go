package rlqs

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// Water-filling: the demand-bound clients get their caps, the others an
// equal level per weight.
func TestWaterfill(t *testing.T) {
	for _, c := range []struct {
		name          string
		capacity      int64
		caps, weights []int64
		want          []int64
	}{
		{"all fit", 100, []int64{10, 20, 30}, []int64{1, 1, 1}, []int64{10, 20, 30}},
		{"equal split", 90, []int64{100, 100, 100}, []int64{1, 1, 1}, []int64{30, 30, 30}},
		{"small first", 90, []int64{10, 100, 100}, []int64{1, 1, 1}, []int64{10, 40, 40}},
		{"weights", 100, []int64{1000, 1000}, []int64{1, 3}, []int64{25, 75}},
		{"weighted small", 100, []int64{10, 1000, 1000}, []int64{5, 1, 3}, []int64{10, 22, 67}},
		{"zero capacity", 0, []int64{5, 5}, []int64{1, 1}, []int64{0, 0}},
		{"zero caps", 10, []int64{0, 0, 50}, []int64{1, 1, 1}, []int64{0, 0, 10}},
	} {
		out := make([]int64, len(c.caps))
		waterfill(c.capacity, c.caps, c.weights, out, nil)
		if !slices.Equal(out, c.want) {
			t.Errorf("%s: waterfill(%d, %v, %v) = %v, want %v", c.name, c.capacity, c.caps, c.weights, out, c.want)
		}
	}
}

// On random inputs: no one above its cap, the sum within the capacity,
// the capacity used up when the caps ask for it (up to the floors), and
// max-min: a client below its cap has, per weight, at least what any
// other has, give or take the floor.
func TestWaterfillProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 1))
	for range 2000 {
		n := 1 + rng.IntN(20)
		caps, weights, out := make([]int64, n), make([]int64, n), make([]int64, n)
		var capSum int64
		for i := range n {
			caps[i] = rng.Int64N(1 << 40)
			weights[i] = 1 + rng.Int64N(100)
			capSum += caps[i]
		}
		capacity := rng.Int64N(1 << 42)
		waterfill(capacity, caps, weights, out, nil)
		var sum int64
		for i := range n {
			if out[i] < 0 || out[i] > caps[i] {
				t.Fatalf("caps %v weights %v capacity %d: out %v: %d outside [0, its cap]", caps, weights, capacity, out, i)
			}
			sum += out[i]
		}
		if sum > capacity || sum < min(capacity, capSum)-int64(n) {
			t.Fatalf("caps %v weights %v capacity %d: out %v sums to %d", caps, weights, capacity, out, sum)
		}
		for i := range n {
			if out[i] == caps[i] {
				continue
			}
			for j := range n {
				// out[i]/w[i] + 1 ≥ out[j]/w[j]
				if (out[i]+weights[i])*weights[j] < out[j]*weights[i] {
					t.Fatalf("caps %v weights %v capacity %d: out %v: %d below its cap has less per weight than %d", caps, weights, capacity, out, i, j)
				}
			}
		}
	}
}

// Largest remainder: whole tokens summing to the floor of the shares'
// sum, none more than a token from its share.
func TestApportion(t *testing.T) {
	shares := []int64{scale + scale/2, scale / 2, 2*scale + scale/4, scale / 4}
	out := make([]int64, 4)
	apportion(shares, out, nil)
	if want := []int64{2, 0, 2, 0}; !slices.Equal(out, want) {
		t.Errorf("apportion(%v) = %v, want %v", shares, out, want)
	}
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 2))
	for range 2000 {
		n := 1 + rng.IntN(30)
		shares, out := make([]int64, n), make([]int64, n)
		var sum, got int64
		for i := range n {
			shares[i] = rng.Int64N(100 * scale)
			sum += shares[i]
		}
		apportion(shares, out, nil)
		for i := range n {
			if d := out[i]*scale - shares[i]; d <= -scale || d >= scale {
				t.Fatalf("apportion(%v) = %v: %d moved a token or more", shares, out, i)
			}
			got += out[i]
		}
		if got != sum/scale {
			t.Fatalf("apportion(%v) = %v: sum %d, want %d", shares, out, got, sum/scale)
		}
	}
}
