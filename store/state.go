package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-go/sluice/internal/algo"
)

// State is one key's stored state, as Apply reads and writes it: a rate
// limit's (its algorithm's integers, or a sliding log's entries) or a
// concurrency limit's hold set. The zero State is the fresh state of any
// key: a store hands Apply a zero State for a key it does not hold, and
// need not hold one that is fresh.
//
// A store keeps a State as the bytes of MarshalBinary, and may drop it
// from FreshAt on (a TTL), since it is then equivalent to the fresh state.
// A State holds slices, which a copy shares: keep one State per key.
type State struct {
	rate    algo.State
	holds   algo.Holds
	freshAt int64
	changed bool
}

// FreshAt is the time (µs since the epoch) from which s is equivalent to
// the fresh state: a store may delete it then (a TTL), and need not save a
// State whose FreshAt is at or before the op's time. It is 0 for a fresh
// State.
func (s *State) FreshAt() int64 { return s.freshAt }

// Changed reports whether the last Apply changed s. A store saves the
// States that changed and need not write the others.
func (s *State) Changed() bool { return s.changed }

// wrote records that Apply changed s, which is then fresh from freshAt.
func (s *State) wrote(freshAt int64) {
	s.freshAt, s.changed = freshAt, true
}

// fresh reports whether s holds nothing.
func (s *State) fresh() bool { return s.rate.Kind == 0 && s.holds.Len() == 0 }

// ErrMalformedState is wrapped by the error of UnmarshalBinary on bytes
// that are not a State's, and by Apply's when a store hands it a hold
// set's State for a rate limit's key, or the reverse.
var ErrMalformedState = errors.New("sluice: malformed store state")

// The binary form's version and tags (see MarshalBinary).
const (
	stateVersion = 1
	tagFresh     = 0
	tagHolds     = 8
	// maxExact bounds every integer of a State: the steps keep them below
	// 2^53 (algo.MaxTime plus a period, at most algo.MaxScaled).
	maxExact = 1<<53 - 1
)

// MarshalBinary encodes s: a few dozen bytes for a rate limit, two or more
// per entry of a sliding log, a few per hold. The form, version 1, is a
// version byte (1), a tag byte, then unsigned varints (encoding/binary's
// Uvarint), each below 2^53:
//
//	fresh:         1, 0
//	a rate limit:  1, its algorithm (1 to 7, sluice.Algorithm's value),
//	               FreshAt, the rate and period (µs) that wrote it, then
//	               the algorithm's three integers; for a sliding log (6)
//	               instead the number of entries, then each entry's time
//	               and units, the first time in µs since the epoch and each
//	               other as its distance (≥ 1) from the one before
//	a hold set:    1, 8, FreshAt, the number of holds, then each hold's id,
//	               units and expiry, in the order they expire, the first
//	               expiry in µs since the epoch and each other as its
//	               distance (≥ 0) from the one before
//
// A later version of this package reads every earlier version.
func (s *State) MarshalBinary() ([]byte, error) {
	b := []byte{stateVersion, tagFresh}
	switch {
	case s.rate.Kind != 0 && s.holds.Len() != 0:
		return nil, fmt.Errorf("%w: a rate limit's state and holds at once", ErrMalformedState)
	case s.rate.Kind != 0:
		b = s.appendRate(b)
	case s.holds.Len() != 0:
		b = s.appendHolds(b)
	}
	return b, nil
}

// appendRate appends the tag and the fields of a rate limit's state to b.
func (s *State) appendRate(b []byte) []byte {
	r := &s.rate
	b[1] = byte(r.Kind)
	b = appendUints(b, s.freshAt, r.Rate, r.Period)
	if r.Kind != algo.SlidingLog {
		return appendUints(b, r.A, r.B, r.C)
	}
	b = appendUints(b, int64(len(r.Log)))
	last := int64(0)
	for _, e := range r.Log {
		b = appendUints(b, e.T-last, e.N)
		last = e.T
	}
	return b
}

// appendHolds appends the tag and the holds of a hold set to b.
func (s *State) appendHolds(b []byte) []byte {
	list := s.holds.AppendList(nil)
	b[1] = tagHolds
	b = appendUints(b, s.freshAt, int64(len(list)))
	last := int64(0)
	for _, h := range list {
		b = appendUints(b, h.ID, h.Units, h.Expiry-last)
		last = h.Expiry
	}
	return b
}

func appendUints(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return b
}

// UnmarshalBinary sets s to the State that data encodes (see
// MarshalBinary), or returns an error wrapping ErrMalformedState and
// leaves s as it was. s keeps no reference to data.
func (s *State) UnmarshalBinary(data []byte) error {
	if len(data) < 2 {
		return fmt.Errorf("%w: %d bytes", ErrMalformedState, len(data))
	}
	if data[0] != stateVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrMalformedState, data[0], stateVersion)
	}
	var st State
	r := reader{b: data[2:]}
	switch tag := data[1]; {
	case tag == tagFresh:
	case tag == tagHolds:
		st.readHolds(&r)
	case algo.Kind(tag).Valid():
		st.readRate(&r, algo.Kind(tag))
	default:
		return fmt.Errorf("%w: tag %d", ErrMalformedState, tag)
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d bytes after the state", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("%w: %w", ErrMalformedState, r.err)
	}
	*s = st
	return nil
}

// readRate reads a rate limit's state of kind k.
func (s *State) readRate(r *reader, k algo.Kind) {
	s.freshAt = r.uint(0, maxExact)
	s.rate = algo.State{Kind: k, Rate: r.uint(1, algo.MaxScaled), Period: r.uint(1, algo.MaxScaled)}
	if k != algo.SlidingLog {
		s.rate.A, s.rate.B, s.rate.C = r.uint(0, maxExact), r.uint(0, maxExact), r.uint(0, maxExact)
		return
	}
	if n := r.count(2); n > 0 {
		s.rate.Log = make([]algo.Entry, n)
	}
	last := int64(0)
	for i := range s.rate.Log {
		e := &s.rate.Log[i]
		e.T = r.add(last, min(i, 1))
		e.N = r.uint(1, algo.MaxScaled)
		last = e.T
	}
}

// readHolds reads a hold set.
func (s *State) readHolds(r *reader) {
	s.freshAt = r.uint(0, maxExact)
	list := make([]algo.Hold, r.count(3))
	last := int64(0)
	for i := range list {
		list[i] = algo.Hold{ID: r.uint(1, algo.MaxHoldID), Units: r.uint(1, algo.MaxScaled), Expiry: r.add(last, 0)}
		last = list[i].Expiry
	}
	if id, twice := twiceID(list); twice && r.err == nil {
		r.err = fmt.Errorf("hold id %d twice", id)
	}
	if r.err == nil {
		s.holds.SetList(list)
	}
}

// twiceID returns an id that two of the holds have, if any.
func twiceID(list []algo.Hold) (int64, bool) {
	ids := make([]int64, len(list))
	for i, h := range list {
		ids[i] = h.ID
	}
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return ids[i], true
		}
	}
	return 0, false
}

// reader reads a State's varints, keeping the first error.
type reader struct {
	b   []byte
	err error
}

// uint reads a varint in [lo, hi] (0 after an error).
func (r *reader) uint(lo, hi int64) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	switch {
	case n <= 0:
		r.err = errors.New("truncated")
		return 0
	case v < uint64(lo) || v > uint64(hi):
		r.err = fmt.Errorf("%d outside [%d, %d]", v, lo, hi)
		return 0
	}
	r.b = r.b[n:]
	return int64(v)
}

// add reads a distance of at least least from base and returns the time it
// names, which must stay below 2^53.
func (r *reader) add(base int64, least int) int64 {
	d := r.uint(int64(least), maxExact)
	if r.err == nil && d > maxExact-base {
		r.err = fmt.Errorf("time %d+%d over 2^53", base, d)
	}
	return base + d
}

// count reads a number of items of at least size bytes each: no more than
// the bytes left can hold, so that no input makes a large allocation.
func (r *reader) count(size int) int {
	return int(r.uint(0, int64(len(r.b)/size)))
}
