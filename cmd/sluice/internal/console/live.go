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
	// charged counts the units charged whatever the answer (a charge
	// rule's hits, /v1/charge), which no outcome counts.
	charged atomic.Int64
	_       [128 - 8*(1+len(observe.Outcomes)+4)]byte
}

// The coarse view keeps the last hours at a point a minute: coarseSlots
// minutes of coarseStep seconds. A second's counts move into its minute when
// its slot of the per-second ring is reused, so each second is counted in
// exactly one place, and the coarse view adds the ring's seconds still held.
// A range of MaxRange that does not start on a minute touches one minute
// more than it spans, hence the one slot over.
const (
	coarseStep  = 60
	coarseSlots = 6*60 + 1
	// MaxRange is the longest time range the live view reports: 6 hours.
	MaxRange = (coarseSlots - 1) * coarseStep * time.Second
)

// minute is one minute of one rule's counts in the coarse view; it is read
// and written under the series' lock.
type minute struct {
	m                    int64 // the minute, Unix seconds / coarseStep; -1 for none
	counts               [len(observe.Outcomes)]int64
	latSum, latN, latMax int64
	charged              int64
}

// series is one rule's ring of per-second slots, and its minutes.
type series struct {
	name string
	// mu is held to roll a slot over to a new second (moving the old
	// second into its minute) and to read the minutes.
	mu      sync.Mutex
	ring    []slot
	minutes []minute
}

func newSeries(name string, n int) *series {
	s := &series{name: name, ring: make([]slot, n), minutes: make([]minute, coarseSlots)}
	for i := range s.ring {
		s.ring[i].sec.Store(-1)
	}
	for i := range s.minutes {
		s.minutes[i].m = -1
	}
	return s
}

// fold adds the counts of second sec, held in sl, to its minute. The caller
// holds s.mu. A minute older than the one its slot holds now is dropped:
// it is over coarseSlots minutes old.
func (s *series) fold(sec int64, sl *slot) {
	m := sec / coarseStep
	mn := &s.minutes[uint64(m)%coarseSlots]
	if mn.m != m {
		if mn.m > m {
			return
		}
		*mn = minute{m: m}
	}
	for i := range sl.counts {
		mn.counts[i] += sl.counts[i].Load()
	}
	mn.latSum += sl.latSum.Load()
	mn.latN += sl.latN.Load()
	mn.latMax = max(mn.latMax, sl.latMax.Load())
	mn.charged += sl.charged.Load()
}

// minutePoints returns the minutes from the one holding second since to the
// one holding now that hold counts, oldest first, each a Point whose T is
// the minute's first second: the folded minutes plus the seconds the ring
// still holds.
func (s *series) minutePoints(since, now int64) []Point {
	first, last := since/coarseStep, now/coarseStep
	acc := make([]minute, last-first+1)
	for i := range acc {
		acc[i].m = -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	add := func(m int64, counts func(i int) int64, latSum, latN, latMax, charged int64) {
		if m < first || m > last {
			return
		}
		a := &acc[m-first]
		a.m = m
		for i := range a.counts {
			a.counts[i] += counts(i)
		}
		a.latSum += latSum
		a.latN += latN
		a.latMax = max(a.latMax, latMax)
		a.charged += charged
	}
	for m := first; m <= last; m++ {
		if mn := &s.minutes[uint64(m)%coarseSlots]; mn.m == m {
			add(m, func(i int) int64 { return mn.counts[i] }, mn.latSum, mn.latN, mn.latMax, mn.charged)
		}
	}
	// The ring's seconds not folded yet: within a short span, the span's
	// own slots; else every slot, which may hold seconds older than the
	// window (a rule gone quiet folds nothing).
	from, n := first*coarseStep, int64(len(s.ring))
	if now-from < n {
		for sec := from; sec <= now; sec++ {
			if sl := &s.ring[uint64(sec)%uint64(n)]; sl.sec.Load() == sec {
				add(sec/coarseStep, func(i int) int64 { return sl.counts[i].Load() }, sl.latSum.Load(), sl.latN.Load(), sl.latMax.Load(), sl.charged.Load())
			}
		}
	} else {
		for i := range s.ring {
			sl := &s.ring[i]
			if sec := sl.sec.Load(); sec >= 0 && sec <= now {
				add(sec/coarseStep, func(i int) int64 { return sl.counts[i].Load() }, sl.latSum.Load(), sl.latN.Load(), sl.latMax.Load(), sl.charged.Load())
			}
		}
	}
	var out []Point
	for _, a := range acc {
		if a.m >= 0 {
			out = append(out, minutePoint(&a))
		}
	}
	return out
}

func minutePoint(a *minute) Point {
	p := Point{
		T:            a.m * coarseStep,
		Allowed:      a.counts[observe.Allowed],
		Denied:       a.counts[observe.Denied],
		ShadowDenied: a.counts[observe.ShadowDenied],
		Error:        a.counts[observe.Error],
		Degraded:     a.counts[observe.Degraded],
		LatencyMaxUS: a.latMax,
		LatencyN:     a.latN,
		Charged:      a.charged,
	}
	if a.latN > 0 {
		p.LatencyAvgUS = a.latSum / a.latN
	}
	return p
}

// slotAt returns the slot of Unix second sec, rolled over to it (its old
// second folded into its minute) if it held another; nil when it holds a
// later second (a clock gone back: count nothing rather than corrupt a
// newer second).
func (s *series) slotAt(sec int64) *slot {
	sl := &s.ring[uint64(sec)%uint64(len(s.ring))]
	if sl.sec.Load() == sec {
		return sl
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := sl.sec.Load(); old != sec {
		if old > sec {
			return nil
		}
		if old >= 0 {
			s.fold(old, sl)
		}
		for i := range sl.counts {
			sl.counts[i].Store(0)
		}
		sl.latSum.Store(0)
		sl.latN.Store(0)
		sl.latMax.Store(0)
		sl.charged.Store(0)
		sl.sec.Store(sec)
	}
	return sl
}

// addCounts adds n[o] to each outcome o's count at Unix second sec.
func (s *series) addCounts(sec int64, n *[len(observe.Outcomes)]int64) {
	sl := s.slotAt(sec)
	if sl == nil {
		return
	}
	for i, v := range n {
		if v != 0 {
			sl.counts[i].Add(v)
		}
	}
}

// charge counts units charged at Unix second sec.
func (s *series) charge(sec, units int64) {
	if sl := s.slotAt(sec); sl != nil {
		sl.charged.Add(units)
	}
}

// add counts one event at Unix second sec.
func (s *series) add(sec int64, o observe.Outcome, latency time.Duration) {
	sl := s.slotAt(sec)
	if sl == nil {
		return
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

// Point is one second (or, in a range over the window, one minute) of one
// rule's live counts.
type Point struct {
	// T is the second's start, Unix seconds.
	T            int64 `json:"t"`
	Allowed      int64 `json:"allowed"`
	Denied       int64 `json:"denied"`
	ShadowDenied int64 `json:"shadow_denied"`
	Error        int64 `json:"error"`
	Degraded     int64 `json:"degraded"`
	// LatencyAvgUS and LatencyMaxUS are the store's latency over the events
	// of the second that called it, µs; 0 when none did. LatencyN counts
	// those events, so that averages can be summed over rules.
	LatencyAvgUS int64 `json:"latency_avg_us"`
	LatencyMaxUS int64 `json:"latency_max_us"`
	LatencyN     int64 `json:"latency_n"`
	// Charged is the units charged whatever the answer (a charge rule's
	// hits, /v1/charge and /v1/settle), beside the decisions: a charged
	// descriptor is also counted allowed or denied (over the limit).
	Charged int64 `json:"charged"`
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
			Charged:      sl.charged.Load(),
		}
		if ln := sl.latN.Load(); ln > 0 {
			p.LatencyAvgUS = sl.latSum.Load() / ln
			p.LatencyN = ln
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
