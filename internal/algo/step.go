package algo

// Never stands for "no bound" where a step takes a maximum delay.
const Never = int64(1<<63 - 1)

// State is the stored state of one key. Its fields mean what the algorithm of
// Kind says (see each step); the zero State is the fresh state. Log holds
// sliding-log's entries.
//
// A State records the Rate and Period of the limit that wrote it, so that a
// call under another limit or algorithm reads it as SEMANTICS.md's "Changed
// limits" says (see held and bucketLevel) instead of misreading it.
type State struct {
	Kind         Kind
	A, B, C      int64
	Rate, Period int64
	Log          []Entry
}

// Entry is one admitted request of a sliding log: its time and cost. Requests in
// the same microsecond share an entry.
type Entry struct {
	T, N int64
}

// Decision is a step's answer. Durations are whole microseconds, rounded as
// SEMANTICS.md says.
type Decision struct {
	Allowed bool
	// Remaining is the whole units that could still pass now, after this
	// decision; negative for a key in debt (see Charge): −Remaining is the
	// debt, rounded up to whole units.
	Remaining  int64
	RetryAfter int64 // denied: smallest wait after which the same request would pass
	ResetAfter int64 // wait until the key is back to its fresh state
	Delay      int64 // leaky-bucket: how long the admitted request waits before it proceeds
	// Window is, under fixed-window and aligned-window, the end (µs) of the
	// window the decision counted in, which names that window: a refund
	// that carries it gives units back only to it (see Refund). It is 0
	// where no window is open (a fixed window a query found ended) and under
	// the other algorithms.
	Window int64
	// FreshAt is the time (µs) from which the state returned with this
	// decision is equivalent to the fresh state: the earliest a store may drop
	// it (a Redis key's expiry).
	FreshAt int64
}

// Step applies one request of cost units at time now (µs) to the state s under
// the limit p: it updates *s in place and returns the decision.
//
// Preconditions, which the stores check before they call it: p is valid,
// 0 ≤ cost ≤ p.Capacity(), now passes CheckTime. maxDelay bounds the delay a
// leaky-bucket admission may carry: a request whose turn would come later is
// denied, spending nothing, with RetryAfter = Never, since asking again later
// does not bring its turn closer. Pass Never for no bound.
//
// A request of cost > 0 stores the state as its algorithm reads it, allowed
// or denied (a denial holds the same units it found). Cost 0 is a query: it
// leaves *s as it was. A sliding log's step reuses s.Log's backing array: a
// caller that needs the old state afterwards (to undo a step) must copy s.Log
// first.
func Step(p *Params, s *State, now, cost, maxDelay int64) (d Decision) {
	StepTo(p, s, now, cost, maxDelay, &d)
	return d
}

// StepTo is Step writing the decision into *d, which must be zero: stores'
// hot paths use it because copying a struct just built costs more there than
// the arithmetic (the CPU cannot forward the narrow stores into the wide
// loads of the copy).
func StepTo(p *Params, s *State, now, cost, maxDelay int64, d *Decision) {
	switch p.Kind {
	case TokenBucket:
		tokenBucket(p, s, now, cost, d)
	case GCRA:
		gcra(p, s, now, cost, d)
	case LeakyBucket:
		leakyBucket(p, s, now, cost, maxDelay, d)
	case FixedWindow:
		fixedWindow(p, s, now, cost, d)
	case AlignedWindow:
		alignedWindow(p, s, now, cost, d)
	case SlidingWindow:
		slidingWindow(p, s, now, cost, d)
	case SlidingLog:
		slidingLog(p, s, now, cost, d)
	default:
		panic("algo: Step with invalid params; call Params.Validate first")
	}
}

// set stores a single-state algorithm's fields under the limit p.
func (s *State) set(p *Params, a, b, c int64) {
	s.Kind, s.A, s.B, s.C, s.Rate, s.Period = p.Kind, a, b, c, p.Rate, p.Period
	if s.Log != nil {
		s.Log = nil
	}
}

// same reports whether s was written by p's algorithm under p's rate and
// period: then the step reads it directly.
func (s *State) same(p *Params) bool {
	return s.Kind == p.Kind && s.Rate == p.Rate && s.Period == p.Period
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}
