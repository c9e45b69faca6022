package console

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

func TestTopKExactWhenFew(t *testing.T) {
	tk := newTopK(3, 60)
	for i, n := range []int{5, 1, 7, 3} {
		for range n {
			tk.add(100, "r", fmt.Sprintf("k%d", i))
		}
	}
	tk.add(100, "other", "k0")
	got := fmt.Sprint(tk.top(100))
	want := "[{r k2 7 0} {r k0 5 0} {r k3 3 0}]"
	if got != want {
		t.Errorf("top %s, want %s", got, want)
	}
}

// TestTopKBounded refuses 100,000 distinct keys, a few of them often: the
// summary stays within its capacity, and the frequent keys are reported
// with counts no lower than their true ones.
func TestTopKBounded(t *testing.T) {
	seed := testenv.SeedOr(t, 100_000)
	r := rand.New(rand.NewPCG(seed, 1))
	c, clk := newTestConsole(t, Options{TopK: 5, Window: time.Minute})
	heavy := map[string]int64{}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100_000 {
		c.Refused("api", fmt.Sprintf("user:%d", i))
		if i%10 == 0 { // and after every tenth, one of 5 frequent keys
			k := fmt.Sprintf("abuser:%d", r.IntN(5))
			heavy[k]++
			c.Refused("api", k)
		}
		if i%4000 == 0 {
			clk.Advance(100 * time.Millisecond)
		}
	}
	if n, capacity := c.refused.size(), 2*c.refused.cur.capacity; n > capacity {
		t.Fatalf("the summaries hold %d keys, over their capacity %d", n, capacity)
	}
	top := c.Live(0).Top
	if len(top) != 5 {
		t.Fatalf("top %d keys, want 5: %+v", len(top), top)
	}
	for _, x := range top {
		want, ok := heavy[x.Key]
		if !ok {
			t.Errorf("top holds %q, not one of the frequent keys %v", x.Key, heavy)
			continue
		}
		if x.Count < want || x.Count-x.Overcount > want {
			t.Errorf("%s: count %d (overcount %d), true count %d", x.Key, x.Count, x.Overcount, want)
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 1<<20 {
		t.Errorf("the heap grew %d bytes over 100,000 distinct keys; want it bounded (under 1 MiB)", grown)
	}
}

func TestTopKForgets(t *testing.T) {
	tk := newTopK(2, 10)
	for range 9 {
		tk.add(0, "r", "old")
	}
	tk.add(10, "r", "new") // the first summary becomes the older one
	if got := fmt.Sprint(tk.top(10)); got != "[{r old 9 0} {r new 1 0}]" {
		t.Errorf("one period on: %s", got)
	}
	tk.add(20, "r", "newer") // old is two periods back: dropped
	if got := fmt.Sprint(tk.top(20)); got != "[{r new 1 0} {r newer 1 0}]" {
		t.Errorf("two periods on: %s", got)
	}
	if got := tk.top(100); len(got) != 0 {
		t.Errorf("long after: %v", got)
	}
}

func BenchmarkRefused(b *testing.B) {
	c, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Refused("api", keys[i%len(keys)])
		i++
	}
}
