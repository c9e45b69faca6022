package console

import (
	"container/heap"
	"sort"
	"sync"
)

// refusedKey names one refused key of one rule.
type refusedKey struct{ rule, key string }

// counter is one monitored key of a space-saving summary: count is an upper
// bound of its occurrences since it entered, overcount how much of it may
// belong to the keys it evicted.
type counter struct {
	k         refusedKey
	count     int64
	overcount int64
	index     int // in the heap
}

// summary is the space-saving summary (Metwally, Agrawal, El Abbadi 2005):
// at most capacity keys, each with a count that overestimates its true
// count by at most its overcount; any key seen more than total/capacity
// times is among them. Memory is bounded by capacity whatever the number
// of distinct keys.
type summary struct {
	capacity int
	total    int64
	byKey    map[refusedKey]*counter
	h        minHeap
}

func newSummary(capacity int) *summary {
	return &summary{capacity: capacity, byKey: make(map[refusedKey]*counter, capacity)}
}

func (s *summary) add(rule, key string) {
	s.total++
	if c, ok := s.byKey[refusedKey{rule, key}]; ok {
		c.count++
		heap.Fix(&s.h, c.index)
		return
	}
	k := refusedKey{string([]byte(rule)), string([]byte(key))} // the caller's strings are not ours to keep
	if len(s.h) < s.capacity {
		c := &counter{k: k, count: 1}
		heap.Push(&s.h, c)
		s.byKey[k] = c
		return
	}
	// Evict the least counted key: the newcomer inherits its count.
	c := s.h[0]
	delete(s.byKey, c.k)
	c.k, c.overcount = k, c.count
	c.count++
	s.byKey[k] = c
	heap.Fix(&s.h, 0)
}

type minHeap []*counter

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *minHeap) Push(x any) { c := x.(*counter); c.index = len(*h); *h = append(*h, c) }
func (h *minHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// Refusal is one of the keys refused most often recently.
type Refusal struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	// Count is an upper bound of the key's refusals over the recent period;
	// at most Overcount of it may belong to keys it displaced.
	Count     int64 `json:"count"`
	Overcount int64 `json:"overcount"`
}

// topK tracks the keys refused most often over the last one to two
// periods: two space-saving summaries, the current one and the one before,
// the older dropped when the current turns a period old.
type topK struct {
	mu       sync.Mutex
	k        int
	period   int64 // seconds
	started  int64 // the current summary's first second
	cur, old *summary
}

func newTopK(k int, period int64) *topK {
	capacity := max(8*k, 64)
	return &topK{k: k, period: max(period, 1), cur: newSummary(capacity), old: newSummary(capacity)}
}

func (t *topK) add(now int64, rule, key string) {
	t.mu.Lock()
	t.rotate(now)
	t.cur.add(rule, key)
	t.mu.Unlock()
}

// rotate starts a new summary when the current one is a period old, under
// t.mu.
func (t *topK) rotate(now int64) {
	switch {
	case now-t.started >= 2*t.period:
		t.old, t.cur = newSummary(t.cur.capacity), newSummary(t.cur.capacity)
		t.started = now
	case now-t.started >= t.period:
		t.old, t.cur = t.cur, newSummary(t.cur.capacity)
		t.started = now
	}
}

// top returns the k keys refused most often over both summaries, the most
// first (ties by rule, then key).
func (t *topK) top(now int64) []Refusal {
	t.mu.Lock()
	t.rotate(now)
	merged := make(map[refusedKey]*Refusal, len(t.cur.h)+len(t.old.h))
	for _, s := range [...]*summary{t.old, t.cur} {
		for _, c := range s.h {
			r, ok := merged[c.k]
			if !ok {
				r = &Refusal{Rule: c.k.rule, Key: c.k.key}
				merged[c.k] = r
			}
			r.Count += c.count
			r.Overcount += c.overcount
		}
	}
	t.mu.Unlock()
	out := make([]Refusal, 0, len(merged))
	for _, r := range merged {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return a.Key < b.Key
	})
	if len(out) > t.k {
		out = out[:t.k]
	}
	return out
}

// size returns the number of keys the summaries hold.
func (t *topK) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cur.byKey) + len(t.old.byKey)
}
