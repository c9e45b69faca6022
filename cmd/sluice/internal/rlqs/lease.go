package rlqs

// A lease is a rate granted to a client, counted as outstanding until its
// end: the instant the assignment was sent, plus its time to live, plus
// the slack that covers its trip to the client. Nothing acknowledges an
// assignment and a client enforces its last one until its TTL runs out,
// partitioned or not, so the server must assume each grant is in force
// until then, whatever it sent since.
type lease struct {
	tokens int64 // tokens per fill interval
	end    int64 // µs
}

// maxLeases bounds a holder's leases: past it the two that end first are
// merged into one that holds the larger rate until the later end, which
// over-counts (so the bound still holds) and never under-counts.
const maxLeases = 4

// leases are one holder's outstanding grants: ordered by end, each
// holding fewer tokens than the one before (a grant that ends no sooner
// and holds at least as many replaces those it covers). The holder's
// outstanding rate at t is the first one's that has not ended: the
// largest of those still in force.
type leases struct {
	l [maxLeases]lease
	n int
}

// at is the holder's outstanding rate at t (µs): the largest rate granted
// whose lease has not ended.
func (s *leases) at(t int64) int64 {
	for i := range s.n {
		if s.l[i].end > t {
			return s.l[i].tokens
		}
	}
	return 0
}

// next is the end of the first lease that has not ended at t, the next
// instant at which the outstanding rate may drop; 0 when none is left.
func (s *leases) next(t int64) int64 {
	for i := range s.n {
		if s.l[i].end > t {
			return s.l[i].end
		}
	}
	return 0
}

// add records a grant of tokens until end, made at t: the leases that
// ended at t go, and those the new one covers (no more tokens, ending no
// later).
func (s *leases) add(t, tokens, end int64) {
	var buf [maxLeases + 1]lease
	k := 0
	placed := false
	for i := range s.n {
		l := s.l[i]
		if l.end <= t || l.end <= end && l.tokens <= tokens {
			continue
		}
		// The new lease goes where its end puts it (before a lease that
		// ends later: one of a longer TTL, before a reload shortened it).
		if !placed && l.end > end {
			buf[k], placed = lease{tokens: tokens, end: end}, true
			k++
		}
		buf[k] = l
		k++
	}
	if !placed {
		buf[k] = lease{tokens: tokens, end: end}
		k++
	}
	k = staircase(buf[:k])
	if k > maxLeases {
		// Merge the first two: the larger rate (the first's) until the
		// later end (the second's).
		buf[1].tokens = buf[0].tokens
		copy(buf[:], buf[1:k])
		k--
	}
	s.n = copy(s.l[:], buf[:k])
}

// staircase keeps, of leases ordered by end, those no other covers (holds
// as many tokens or more and ends no sooner), and returns how many it
// kept, at the front: ends rise and tokens fall along them.
func staircase(ls []lease) int {
	k := 0
	for i := range ls {
		for k > 0 && ls[k-1].tokens <= ls[i].tokens {
			k--
		}
		if k > 0 && ls[k-1].end >= ls[i].end {
			continue // one with more tokens ends with it
		}
		ls[k] = ls[i]
		k++
	}
	return k
}

// rescale converts every lease from one fill interval to another, rounding
// up: the rate each stands for is never under-counted.
func (s *leases) rescale(fromFill, toFill int64) {
	for i := range s.n {
		s.l[i].tokens = min(convert(s.l[i].tokens, fromFill, toFill, true), maxTokens*2)
	}
	s.n = staircase(s.l[:s.n])
}

// mulDivCeil is ⌈a·b/c⌉ for c > 0, saturating.
func mulDivCeil(a, b, c uint64) uint64 {
	q := mulDiv(a, b, c)
	if q == ^uint64(0) {
		return q
	}
	if cmpProducts(q, c, a, b) < 0 {
		q++
	}
	return q
}
