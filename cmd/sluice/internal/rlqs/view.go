package rlqs

import (
	"cmp"
	"container/heap"
	"slices"
	"time"
)

// The budgets are kept in a max-heap by their holders' demand per second
// (Allocator.hot), so that Hottest finds the n hottest in O(n log n)
// whatever the number of budgets: a holder's demand moves at most once a
// second, and the heap moves with it in O(log budgets).

// demandOf is ho's demand as its budget's sum counts it (scaled tokens
// per fill): 0 while it is not known.
func demandOf(ho *holder) int64 {
	if !ho.demandKnown {
		return 0
	}
	return ho.demand
}

// hotter reports whether x's holders demand more per second than y's.
func hotter(x, y *bucket) bool {
	return cmpProducts(uint64(x.demand), uint64(y.fill), uint64(y.demand), uint64(x.fill)) > 0
}

func (a *Allocator) hotSwap(i, j int) {
	a.hot[i], a.hot[j] = a.hot[j], a.hot[i]
	a.hot[i].hot, a.hot[j].hot = i, j
}

func (a *Allocator) hotUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !hotter(a.hot[i], a.hot[p]) {
			return
		}
		a.hotSwap(i, p)
		i = p
	}
}

func (a *Allocator) hotDown(i int) {
	for {
		l, best := 2*i+1, i
		if l < len(a.hot) && hotter(a.hot[l], a.hot[best]) {
			best = l
		}
		if r := l + 1; r < len(a.hot) && hotter(a.hot[r], a.hot[best]) {
			best = r
		}
		if best == i {
			return
		}
		a.hotSwap(i, best)
		i = best
	}
}

// hotFix restores the heap after bk's demand or fill changed.
func (a *Allocator) hotFix(bk *bucket) {
	a.hotUp(bk.hot)
	a.hotDown(bk.hot)
}

func (a *Allocator) hotPush(bk *bucket) {
	bk.hot = len(a.hot)
	a.hot = append(a.hot, bk)
	a.hotUp(bk.hot)
}

func (a *Allocator) hotRemove(bk *bucket) {
	i, last := bk.hot, len(a.hot)-1
	a.hotSwap(i, last)
	a.hot[last] = nil
	a.hot = a.hot[:last]
	if i < last {
		a.hotFix(a.hot[i])
	}
}

// addDemand adds d (scaled tokens per fill) to bk's demand.
func (a *Allocator) addDemand(bk *bucket, d int64) {
	if d != 0 {
		bk.demand += d
		a.hotFix(bk)
	}
}

// BucketView is one budget as a console shows it, at an instant: its
// figures in tokens per its fill interval, and its largest shares.
type BucketView struct {
	Key, Family string
	Rate        int64
	Fill        time.Duration
	// Outstanding is Σ of the leases (at most Rate, but for the leases
	// granted before a reload lowered the rate or changed the fill
	// interval, counted in the new one), Room is Rate − Outstanding: what
	// the bound leaves to grant now (negative while those leases end).
	Outstanding, Room int64
	// Clients are the holders taking a share, Holders every holder kept
	// (with those gone or abandoned whose leases have not ended).
	Clients, Holders int
	// Demand is the clients' estimated demand, Granted the grants in
	// force at them.
	Demand  float64
	Granted int64
	// Shares are at most the m holders with the largest grants in force
	// (then the largest leases), the largest first.
	Shares []ShareView
}

// ShareView is one holder's share of a budget.
type ShareView struct {
	Holder Holder
	Weight int64
	// State is "active" (taking a share), "gone" (its stream closed),
	// "abandoned" (told to drop the bucket) or "silent" (no report for
	// IdleReports intervals).
	State string
	// Demand is its estimated demand, tokens per fill; DemandKnown is
	// false until a second of reports has made one.
	Demand      float64
	DemandKnown bool
	// Granted is the grant in force at the client (0 when none is),
	// GrantEnds when its TTL runs out.
	Granted   int64
	GrantEnds time.Duration
	// Outstanding is its lease (at least Granted: a cut counts until the
	// lease of the grant before it ends), LeaseEnds when the lease that
	// sets it ends (0 when none is left).
	Outstanding int64
	LeaseEnds   time.Duration
}

// frontier is the heap of a.hot's indices Hottest has yet to visit.
type frontier struct {
	a   *Allocator
	idx []int
}

func (f *frontier) Len() int           { return len(f.idx) }
func (f *frontier) Less(i, j int) bool { return hotter(f.a.hot[f.idx[i]], f.a.hot[f.idx[j]]) }
func (f *frontier) Swap(i, j int)      { f.idx[i], f.idx[j] = f.idx[j], f.idx[i] }
func (f *frontier) Push(x any)         { f.idx = append(f.idx, x.(int)) }
func (f *frontier) Pop() any {
	x := f.idx[len(f.idx)-1]
	f.idx = f.idx[:len(f.idx)-1]
	return x
}

// Hottest calls f with the n budgets whose holders demand the most per
// second at now, the hottest first, each with its m largest shares,
// until f returns false. Its work is O(n log n) and the holders of the
// budgets it shows, whatever the other budgets hold: a console may call
// it for each page.
func (a *Allocator) Hottest(now int64, n, m int, f func(*BucketView) bool) {
	now = max(now, a.last)
	if n <= 0 || len(a.hot) == 0 {
		return
	}
	fr := &frontier{a: a, idx: make([]int, 0, min(n+1, len(a.hot)))}
	heap.Push(fr, 0)
	var hs []*holder
	for ; n > 0 && fr.Len() > 0; n-- {
		i := heap.Pop(fr).(int)
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(a.hot) {
				heap.Push(fr, c)
			}
		}
		hs = hs[:0]
		if !f(a.view(now, a.hot[i], m, &hs)) {
			return
		}
	}
}

// view is bk's BucketView at now with its m largest shares; hs is
// scratch space.
func (a *Allocator) view(now int64, bk *bucket, m int, hs *[]*holder) *BucketView {
	v := &BucketView{Key: bk.key, Family: bk.family, Rate: bk.rate, Fill: time.Duration(bk.fill) * time.Microsecond,
		Outstanding: a.outstanding(now, bk), Holders: len(bk.holders)}
	v.Room = v.Rate - v.Outstanding
	for _, ho := range bk.holders {
		if a.active(now, ho) {
			v.Clients++
			v.Demand += float64(demandOf(ho)) / scale
			v.Granted += a.granted(now, ho)
		}
		*hs = append(*hs, ho)
	}
	if m <= 0 {
		return v
	}
	slices.SortFunc(*hs, func(x, y *holder) int {
		if c := cmp.Compare(a.granted(now, y), a.granted(now, x)); c != 0 {
			return c
		}
		if c := cmp.Compare(y.leases.at(now), x.leases.at(now)); c != 0 {
			return c
		}
		return cmp.Compare(x.id, y.id)
	})
	for _, ho := range (*hs)[:min(m, len(*hs))] {
		s := ShareView{Holder: ho.id, Weight: ho.weight, State: a.state(now, ho),
			Demand: float64(demandOf(ho)) / scale, DemandKnown: ho.demandKnown,
			Granted: a.granted(now, ho), Outstanding: ho.leases.at(now)}
		if s.Granted > 0 {
			s.GrantEnds = time.Duration(ho.curAt-now)*time.Microsecond + ho.cur.TTL
		}
		if end := ho.leases.next(now); end != 0 {
			s.LeaseEnds = time.Duration(end-now) * time.Microsecond
		}
		v.Shares = append(v.Shares, s)
	}
	return v
}

// granted is the grant in force at ho's client at now, 0 when none is.
func (a *Allocator) granted(now int64, ho *holder) int64 {
	if ho.inForce(now) {
		return ho.cur.Tokens
	}
	return 0
}

// state names ho's state at now (ShareView.State).
func (a *Allocator) state(now int64, ho *holder) string {
	switch {
	case ho.gone:
		return "gone"
	case ho.abandoned:
		return "abandoned"
	case !a.active(now, ho):
		return "silent"
	}
	return "active"
}

// Budgets is how many budgets a holds.
func (a *Allocator) Budgets() int { return len(a.list) }
