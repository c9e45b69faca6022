package algo

import (
	"errors"
	"fmt"
)

// Concurrency is a validated concurrency limit: at most Limit units held at
// once (by holds), each hold coming back by itself Lifetime µs after it
// was acquired or last extended, if it was not released before.
type Concurrency struct {
	Limit    int64
	Lifetime int64 // µs
}

// MaxHoldID is the largest hold id: ids stay below 2^53 so that a Lua
// double holds them exactly, as it does every other quantity.
const MaxHoldID = int64(1)<<53 - 1

// Validate reports why c cannot be used, or nil: Limit and Lifetime must be
// positive and at most MaxScaled (a lifetime of 2^50 µs is 35 years).
func (c Concurrency) Validate() error {
	// The valid case in two comparisons, inlined where a lease is taken.
	if uint64(c.Limit-1) < uint64(MaxScaled) && uint64(c.Lifetime-1) < uint64(MaxScaled) {
		return nil
	}
	return c.invalid()
}

// invalid is Validate's error for an invalid c.
func (c Concurrency) invalid() error {
	switch {
	case c.Limit <= 0:
		return fmt.Errorf("%w: a concurrency limit must be positive, got %d", ErrInvalid, c.Limit)
	case c.Limit > MaxScaled:
		return fmt.Errorf("%w: concurrency limit %d is over the exact range (at most 2^50)", ErrInvalid, c.Limit)
	case c.Lifetime <= 0:
		return fmt.Errorf("%w: a lease lifetime must be at least 1µs, got %dµs", ErrInvalid, c.Lifetime)
	case c.Lifetime > MaxScaled:
		return fmt.Errorf("%w: lease lifetime %dµs is over the exact range (at most 2^50µs)", ErrInvalid, c.Lifetime)
	}
	return nil
}

// Hold is one hold of a key: its id, the units it holds and the time
// (µs) it comes back by itself. It is held at every instant before Expiry.
type Hold struct {
	ID, Units, Expiry int64
}

// ErrHoldID is returned by Acquire when a hold of the key that is still
// held has the id asked for: the caller draws another and asks again.
var ErrHoldID = errors.New("sluice: lease id in use")

// The hold operations a store runs (HoldStep): the codes are those of the
// Lua twin's op argument.
const (
	OpAcquire int64 = iota + 1
	OpRelease
	OpExtend
)

// HoldStep runs one hold operation at now on the holds of a key, which
// it updates in place (the zero value is the fresh state):
//
//   - OpAcquire of units under c with the id id: the holds that have come
//     back are dropped; the request passes when the units still held plus
//     units fit c.Limit, and then keeps a hold {id, units, now +
//     c.Lifetime}. Units 0 is a query: always allowed, nothing held.
//     Refused, RetryAfter is the wait until enough of the holds come
//     back by themselves for it to fit, were none released or extended.
//   - OpRelease of the hold id: Allowed reports that it was still held;
//     it is then dropped. A hold that had come back, or was never held,
//     changes nothing.
//   - OpExtend of the hold id by c.Lifetime: a hold still held is held
//     until now + c.Lifetime (Allowed); one that had come back stays gone.
//
// Every operation reports Remaining, the units that could still be acquired
// (c.Limit less those held; 0 when a lowered limit is below them),
// ResetAfter, the wait until the last hold comes back, and FreshAt. expiry
// is the hold's Expiry when an acquire or extend is allowed, else 0.
//
// An operation costs the same whatever the number of holds (see Holds),
// but for two walks: the holds that have come back are dropped one by one
// (each once in its life), and a refusal walks the holds in the order
// they come back until enough units would be free, so its cost grows with
// the units it asks for beyond those free.
//
// Preconditions, which the stores check: c is valid (for a release, only
// its Limit is read, for the figures), 0 ≤ units ≤ c.Limit, 1 ≤ id ≤
// MaxHoldID, now passes CheckTime. The only error is ErrHoldID, when an
// acquire names the id of a hold still held: nothing changes.
func HoldStep(c *Concurrency, held *Holds, op, now, units, id int64, d *Decision) (expiry int64, err error) {
	if held.indexed {
		expiry, err = held.idx.step(c, op, now, units, id, d)
		if held.idx.n <= fewHolds {
			held.unindex()
		}
		return expiry, err
	}
	h := held.few
	n := 0
	for n < len(h) && h[n].Expiry <= now {
		n++
	}
	if n > 0 {
		h = h[:copy(h, h[n:])]
	}
	at, used := -1, int64(0)
	for i := range h {
		if h[i].ID == id {
			at = i
		}
		used += h[i].Units
	}
	switch op {
	case OpAcquire:
		switch {
		case at >= 0 && units > 0:
			held.few = h
			return 0, ErrHoldID
		case units == 0:
			d.Allowed = true
		case used+units <= c.Limit:
			d.Allowed = true
			expiry = now + c.Lifetime
			h = insertHold(h, Hold{ID: id, Units: units, Expiry: expiry})
			used += units
		default:
			d.RetryAfter = freeAt(h, used+units, c.Limit) - now
		}
	case OpRelease, OpExtend:
		if at >= 0 {
			d.Allowed = true
			h, used, expiry = releaseOrExtend(h, at, op, now+c.Lifetime, used)
		}
	}
	d.Remaining = max(0, c.Limit-used)
	if len(h) > 0 {
		d.ResetAfter = h[len(h)-1].Expiry - now
	}
	d.FreshAt = now + d.ResetAfter
	held.few = h
	if len(h) > manyHolds {
		held.index()
	}
	return expiry, nil
}

// freeAt is the expiry of the first of the holds h (sorted by expiry) by
// whose return left − limit units have come back; left is more than limit.
func freeAt(h []Hold, left, limit int64) int64 {
	for i := range h {
		if left -= h[i].Units; left <= limit {
			return h[i].Expiry
		}
	}
	return 0 // not reached: the holds' units add up to left
}

// releaseOrExtend drops h[at] (OpRelease) or makes it come back at
// expiry (OpExtend), and returns the holds, the units held and the
// expiry to report.
func releaseOrExtend(h []Hold, at int, op, expiry, used int64) ([]Hold, int64, int64) {
	l := h[at]
	if at < len(h)-1 {
		copy(h[at:], h[at+1:])
	}
	h = h[:len(h)-1]
	if op == OpRelease {
		return h, used - l.Units, 0
	}
	l.Expiry = expiry
	return insertHold(h, l), used, expiry
}

// step is HoldStep on indexed holds: the same steps, each a lookup or a
// link in the index rather than a scan.
func (x *holdIndex) step(c *Concurrency, op, now, units, id int64, d *Decision) (expiry int64, err error) {
	x.dropUntil(now)
	at, slot := x.find(id)
	switch op {
	case OpAcquire:
		switch {
		case at != 0 && units > 0:
			return 0, ErrHoldID
		case units == 0:
			d.Allowed = true
		case x.used+units <= c.Limit:
			d.Allowed = true
			expiry = now + c.Lifetime
			x.insert(Hold{ID: id, Units: units, Expiry: expiry}, slot)
		default:
			d.RetryAfter = x.freeAt(x.used+units, c.Limit) - now
		}
	case OpRelease:
		if at != 0 {
			d.Allowed = true
			x.remove(at, slot)
		}
	case OpExtend:
		if at != 0 {
			d.Allowed = true
			expiry = now + c.Lifetime
			x.move(at, expiry)
		}
	}
	d.Remaining = max(0, c.Limit-x.used)
	if last := x.last(); last != 0 {
		d.ResetAfter = x.nodes[last].Expiry - now
	}
	d.FreshAt = now + d.ResetAfter
	return expiry, nil
}

// insertHold inserts l into h, sorted by expiry, after the holds that
// expire with it: the order of a Redis sorted set is not needed, only that
// of expiries.
func insertHold(h []Hold, l Hold) []Hold {
	i := len(h)
	for i > 0 && h[i-1].Expiry > l.Expiry {
		i--
	}
	h = append(h, l)
	if i < len(h)-1 { // not the last to expire: the later ones move up
		copy(h[i+1:], h[i:])
		h[i] = l
	}
	return h
}
