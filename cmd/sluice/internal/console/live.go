package console

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/observe"
)

// maxSeries bounds the rules the live view keeps apart; events of further
// policy names are counted under otherSeries. Policy names come from
// configuration, so the bound is only reached by a misbehaving caller.
const maxSeries = 1024

// otherSeries names the series that gathers the policies beyond maxSeries.
const otherSeries = "(other)"

// slot is one second of one rule's counts. sec is the Unix second it holds;
// a slot whose sec is stale is zeroed (under the series' lock) before it is
// reused, so Observe takes no lock except once per second per rule.
type slot struct {
	sec    atomic.Int64
	counts [len(observe.Outcomes)]atomic.Int64
	latSum atomic.Int64 // µs, over the events that called the store
	latN   atomic.Int64
	latMax atomic.Int64 // µs
	_      [128 - 8*(1+len(observe.Outcomes)+3)]byte
}

// series is one rule's ring of per-second slots.
type series struct {
	name string
	mu   sync.Mutex // held only to roll a slot over to a new second
	ring []slot
}

func newSeries(name string, n int) *series {
	s := &series{name: name, ring: make([]slot, n)}
	for i := range s.ring {
		s.ring[i].sec.Store(-1)
	}
	return s
}

// add counts one event at Unix second sec.
func (s *series) add(sec int64, o observe.Outcome, latency time.Duration) {
	sl := &s.ring[uint64(sec)%uint64(len(s.ring))]
	if sl.sec.Load() != sec {
		s.mu.Lock()
		if old := sl.sec.Load(); old != sec {
			if old > sec { // a clock gone back: count nothing rather than corrupt a newer second
				s.mu.Unlock()
				return
			}
			for i := range sl.counts {
				sl.counts[i].Store(0)
			}
			sl.latSum.Store(0)
			sl.latN.Store(0)
			sl.latMax.Store(0)
			sl.sec.Store(sec)
		}
		s.mu.Unlock()
	}
	if int(o) < len(sl.counts) {
		sl.counts[o].Add(1)
	}
	if latency > 0 {
		us := latency.Microseconds()
		sl.latSum.Add(us)
		sl.latN.Add(1)
		for {
			m := sl.latMax.Load()
			if us <= m || sl.latMax.CompareAndSwap(m, us) {
				break
			}
		}
	}
}

// Point is one second of one rule's live counts.
type Point struct {
	// T is the second's start, Unix seconds.
	T            int64 `json:"t"`
	Allowed      int64 `json:"allowed"`
	Denied       int64 `json:"denied"`
	ShadowDenied int64 `json:"shadow_denied"`
	Error        int64 `json:"error"`
	Degraded     int64 `json:"degraded"`
	// LatencyAvgUS and LatencyMaxUS are the store's latency over the events
	// of the second that called it, µs; 0 when none did.
	LatencyAvgUS int64 `json:"latency_avg_us"`
	LatencyMaxUS int64 `json:"latency_max_us"`
}

// points returns the seconds from since to now (both included) that hold
// counts, oldest first.
func (s *series) points(since, now int64) []Point {
	var out []Point
	n := int64(len(s.ring))
	since = max(since, now-n+1)
	for sec := since; sec <= now; sec++ {
		sl := &s.ring[uint64(sec)%uint64(n)]
		if sl.sec.Load() != sec {
			continue
		}
		p := Point{
			T:            sec,
			Allowed:      sl.counts[observe.Allowed].Load(),
			Denied:       sl.counts[observe.Denied].Load(),
			ShadowDenied: sl.counts[observe.ShadowDenied].Load(),
			Error:        sl.counts[observe.Error].Load(),
			Degraded:     sl.counts[observe.Degraded].Load(),
			LatencyMaxUS: sl.latMax.Load(),
		}
		if ln := sl.latN.Load(); ln > 0 {
			p.LatencyAvgUS = sl.latSum.Load() / ln
		}
		if sl.sec.Load() != sec { // rolled over while read
			continue
		}
		out = append(out, p)
	}
	return out
}

// live holds every rule's series. The map is replaced, never changed, so
// Observe reads it without a lock; a new policy name copies it once.
type live struct {
	seconds int
	m       atomic.Pointer[map[string]*series]
	mu      sync.Mutex // serializes the copies
}

func newLive(seconds int) *live {
	l := &live{seconds: seconds}
	m := map[string]*series{}
	l.m.Store(&m)
	return l
}

// get returns the series of name, creating it on first sight.
func (l *live) get(name string) *series {
	if s, ok := (*l.m.Load())[name]; ok {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := *l.m.Load()
	if s, ok := old[name]; ok {
		return s
	}
	if len(old) >= maxSeries {
		if s, ok := old[otherSeries]; ok {
			return s
		}
		name = otherSeries
	} else {
		name = string([]byte(name)) // the event's string is not ours to keep
	}
	m := make(map[string]*series, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	s := newSeries(name, l.seconds)
	m[name] = s
	l.m.Store(&m)
	return s
}
