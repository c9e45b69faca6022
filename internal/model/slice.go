package model

import (
	"fmt"
	"math/big"
	"slices"

	"github.com/sluice-go/sluice/internal/algo"
)

// Sliceable reports whether SEMANTICS.md's "Leases" lets a process hold a
// slice of a key's budget under kind: the algorithms that can give units
// back. The sliding window, sliding log and leaky bucket cannot, so they are
// never leased.
func Sliceable(kind algo.Kind) bool {
	switch kind {
	case algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.AlignedWindow:
		return true
	}
	return false
}

// LeaseTake is the lease script: at now it takes cost units for key and,
// when they pass, up to want − cost more, never more than the key has
// available (the Remaining of a look at now). got is how many units it
// spent: 0 when refused, else from cost to max(cost, want). d is the
// decision of the take that spent got (a refusal: of cost).
func (m *Model) LeaseTake(key string, now, cost, want int64) (d algo.Decision, got int64) {
	look := m.Take(key, now, 0)
	n := min(max(want, cost), look.Remaining)
	if n < cost {
		return m.Take(key, now, cost), 0
	}
	d = m.Take(key, now, n)
	if !d.Allowed {
		panic(fmt.Sprintf("model: a lease of %d of %d available was refused", n, look.Remaining))
	}
	return d, n
}

// A Lease is a slice of a key's budget one process holds: units spent in
// the store at Taken under Lim, which the process may admit until Expires
// (exclusive). Reset is the store's reset_after at the take and Window the
// window the units were spent in (0 for the buckets).
type Lease struct {
	Lim            Limit
	Units          int64
	Taken, Expires int64
	Reset, Window  int64
}

// Process is one process's lease table over a shared key space: what
// SEMANTICS.md's "Leases" says a process does, step by step. Life is the
// longest lease lifetime L (µs).
type Process struct {
	ks     *Keys
	Life   int64
	leases map[string][]*Lease
}

// Process returns a process with no lease over ks, whose leases live at
// most life µs.
func (ks *Keys) Process(life int64) *Process {
	if life <= 0 {
		panic(fmt.Sprintf("model: lease life %d", life))
	}
	return &Process{ks: ks, Life: life, leases: make(map[string][]*Lease)}
}

// expiry is when a lease taken at now, whose take decided d, runs out: after
// Life, and never past the window its units were spent in.
func (p *Process) expiry(lim Limit, now int64, d algo.Decision) int64 {
	e := now + p.Life
	if lim.Kind == algo.FixedWindow || lim.Kind == algo.AlignedWindow {
		e = min(e, d.Window)
	}
	return e
}

// Take decides cost units for key under lim at now. A leasable limit is
// decided from a live lease of this limit holding at least cost units (the
// one that runs out first): locally, local is true. Otherwise the key's
// leases that could not serve it (another limit, too few units) are given
// back, and the lease script takes cost and up to want − cost more, which
// become a lease when more than cost passed.
// Its decision reports the take's figures, Remaining counting the new
// lease's units. An unleasable limit is decided in the store as without
// leases.
//
// A local decision reports: allowed; Remaining the units the process's live
// leases of this limit on key still hold; RetryAfter 0; ResetAfter the
// lease's Reset less the time since its take (at least 0); Window the
// lease's.
func (p *Process) Take(key string, lim Limit, now, cost, want int64) (d algo.Decision, local bool) {
	m := p.ks.Model(lim)
	if !Sliceable(lim.Kind) {
		return m.Take(key, now, cost), false
	}
	p.expire(key, now)
	for _, l := range p.leases[key] {
		if l.Lim == lim && l.Units >= cost {
			l.Units -= cost
			return p.local(key, l, now), true
		}
	}
	for _, l := range p.leases[key] {
		p.giveBack(key, l, now)
	}
	p.leases[key] = nil
	d, got := p.Refill(key, lim, now, cost, want)
	d.Remaining += got
	return d, false
}

// Refill takes a slice for key under lim at now, ahead of need: the lease
// script with cost (0 for a prefetch) and want. A slice beyond cost is kept
// as a new lease. It returns the take's decision and the units leased.
func (p *Process) Refill(key string, lim Limit, now, cost, want int64) (algo.Decision, int64) {
	m := p.ks.Model(lim)
	d, got := m.LeaseTake(key, now, cost, want)
	if got > cost {
		l := &Lease{Lim: lim, Units: got - cost, Taken: now, Expires: p.expiry(lim, now, d), Reset: d.ResetAfter, Window: d.Window}
		p.leases[key] = append(p.leases[key], l)
		slices.SortStableFunc(p.leases[key], func(a, b *Lease) int { return cmpInt(a.Expires, b.Expires) })
	}
	return d, got - min(got, cost)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// local is the decision a lease l gives at now (see Take).
func (p *Process) local(key string, l *Lease, now int64) algo.Decision {
	var held int64
	for _, o := range p.leases[key] {
		if o.Lim == l.Lim {
			held += o.Units
		}
	}
	return algo.Decision{Allowed: true, Remaining: held, ResetAfter: max(0, l.Reset-(now-l.Taken)), Window: l.Window}
}

// expire drops key's leases that have run out at now: their units are
// neither admitted nor given back (a give-back after the lease's end could
// land where the bound no longer counts them).
func (p *Process) expire(key string, now int64) {
	p.leases[key] = slices.DeleteFunc(p.leases[key], func(l *Lease) bool { return now >= l.Expires })
}

// GiveBack ends the process's leases on key at now, giving back the units
// of those still live (a refund under the lease's limit, naming its
// window), as when demand drops or the process closes its store.
func (p *Process) GiveBack(key string, now int64) {
	p.expire(key, now)
	for _, l := range p.leases[key] {
		p.giveBack(key, l, now)
	}
	delete(p.leases, key)
}

func (p *Process) giveBack(key string, l *Lease, now int64) {
	if now < l.Expires && l.Units > 0 {
		p.ks.Refund(key, l.Lim, now, l.Units, l.Window)
	}
	l.Units = 0
}

// Drop forgets the process's leases on key without giving anything back:
// what a reset does to the leases of the process that resets.
func (p *Process) Drop(key string) { delete(p.leases, key) }

// Held is how many units the process's live leases on key hold at now.
func (p *Process) Held(key string, now int64) int64 {
	var n int64
	for _, l := range p.leases[key] {
		if now < l.Expires {
			n += l.Units
		}
	}
	return n
}

// An Admission is units admitted (or, negative, refunded by the caller) at
// a time, in the window that ends at Window (0 for the buckets).
type Admission struct {
	T, Units, Window int64
}

// CheckBucketBound checks SEMANTICS.md's bound for leased token-bucket and
// gcra limits: in every span [a, b], the units admitted never exceed
// burst + floor((b − a + life)·rate/period) plus the units callers refunded
// in [a − life, b] (an admitted unit was spent in the store at most life
// before, so a unit refunded there may be spent again). Refunds are the
// Admissions of negative Units. Pass the largest rate a trace used under
// one period and burst. It returns the first span that breaks it, or nil.
func CheckBucketBound(adm []Admission, burst, rate, period, life int64) error {
	var in, back []Admission
	for _, x := range adm {
		if x.Units > 0 {
			in = append(in, x)
		} else if x.Units < 0 {
			back = append(back, x)
		}
	}
	byTime := func(x, y Admission) int { return cmpInt(x.T, y.T) }
	slices.SortStableFunc(in, byTime)
	slices.SortStableFunc(back, byTime)
	// refunded(a, b) is the units refunded in [a, b]: a prefix sum.
	pre := make([]int64, len(back)+1)
	for i, x := range back {
		pre[i+1] = pre[i] - x.Units
	}
	refunded := func(a, b int64) int64 {
		lo, _ := slices.BinarySearchFunc(back, a, func(x Admission, t int64) int { return cmpInt(x.T, t) })
		hi, _ := slices.BinarySearchFunc(back, b+1, func(x Admission, t int64) int { return cmpInt(x.T, t) })
		return pre[hi] - pre[lo]
	}
	for i := range in {
		var sum int64
		for j := i; j < len(in); j++ {
			sum += in[j].Units
			d := in[j].T - in[i].T
			lim := new(big.Int).Mul(big.NewInt(d+life), big.NewInt(rate))
			lim.Quo(lim, big.NewInt(period))
			lim.Add(lim, big.NewInt(burst+refunded(in[i].T-life, in[j].T)))
			if big.NewInt(sum).Cmp(lim) > 0 {
				return fmt.Errorf("%d units admitted in [%d, %d] (span %d µs), bound %s", sum, in[i].T, in[j].T, d, lim)
			}
		}
	}
	return nil
}

// CheckWindowBound checks SEMANTICS.md's bound for leased fixed-window and
// aligned-window limits: every unit admitted in a window was admitted
// before the window ended and at or after it began (end − period), and each
// window's units admitted less those refunded never exceed rate. It returns
// the first window that breaks it, or nil.
func CheckWindowBound(adm []Admission, rate, period int64) error {
	sums := make(map[int64]int64)
	peak := make(map[int64]int64)
	a := slices.Clone(adm)
	slices.SortStableFunc(a, func(x, y Admission) int { return cmpInt(x.T, y.T) })
	for _, x := range a {
		if x.Units > 0 && (x.T >= x.Window || x.T < x.Window-period) {
			return fmt.Errorf("%d units admitted at %d, outside the window ending at %d", x.Units, x.T, x.Window)
		}
		sums[x.Window] += x.Units
		peak[x.Window] = max(peak[x.Window], sums[x.Window])
		if peak[x.Window] > rate {
			return fmt.Errorf("window ending at %d admitted %d > %d", x.Window, peak[x.Window], rate)
		}
	}
	return nil
}

// Refund gives back units the caller was admitted (a, its admission) to
// key under lim at now, in the store, naming a's window; the process's
// leases are kept: their units are still spent in the store.
func (p *Process) Refund(key string, lim Limit, now int64, a Admission) algo.Decision {
	return p.ks.Refund(key, lim, now, a.Units, a.Window)
}
