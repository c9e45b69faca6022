package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// The errors of a walk over its bounds, for errors.Is: its callers name
// the bound (the service's walk-requests and answer-bytes, package limits).
var (
	// ErrTooManyRequests: ParseRequests was given more requests than its
	// limit.
	ErrTooManyRequests = errors.New("too many requests")
	// ErrWalkTooLarge: a walk's text grew past the bytes NewWalk was given.
	ErrWalkTooLarge = errors.New("the walk's text is over its bound")
)

// Field is one named value of a step: a field of the key's state or of the
// decision.
type Field struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// WalkStep is one request of a walk and what the algorithm did with it.
type WalkStep struct {
	// N counts the steps from 1.
	N int `json:"n"`
	// T is the request's time, µs since the epoch; At is the same time
	// relative to the walk's start ("t+200ms").
	T    int64  `json:"t_us"`
	At   string `json:"at"`
	Cost int64  `json:"cost"`
	// Charge: the step charged Cost units whatever the key had
	// (algo.Charge), rather than took them.
	Charge bool `json:"charge,omitempty"`
	// Before and After are the key's state as the algorithm keeps it, before
	// and after the step: the state is what a store would hold.
	Before []Field `json:"before"`
	After  []Field `json:"after"`
	// Math is the arithmetic of the step, a line per stage, in the
	// algorithm's own terms.
	Math []string `json:"math"`
	// Result is every field of the decision, formatted.
	Result []Field `json:"result"`
	// Decision is the step's answer as algo.Step returned it (zero when
	// Error is set).
	Decision algo.Decision `json:"-"`
	// Error is set when the request could never pass (a cost over the
	// limit's capacity): an error, not a denial; the state is unchanged.
	Error string `json:"error,omitempty"`
}

// Walk is one key's requests through one algorithm, step by step.
type Walk struct {
	Params algo.Params `json:"-"`
	// Algorithm and About describe the limit: "gcra", "burst 4, 1 per
	// 100ms".
	Algorithm string `json:"algorithm"`
	About     string `json:"about"`
	// Start is the time the steps' At is relative to, µs since the epoch.
	Start int64 `json:"start_us"`
	// Key is the key walked.
	Key   string     `json:"key"`
	Steps []WalkStep `json:"steps"`
}

// NewWalk runs reqs through p's algorithm on one fresh key, in order, each
// at its own time, and records each step: the state before and after, the
// arithmetic and the decision. The decisions are algo.Step's, the code every
// store runs. The requests must all be for one key and in time order (a
// clock that goes back is a store's concern, not a walk's); leaky-bucket
// runs with no bound on the delay. start is the time the steps are shown
// relative to. maxBytes, when positive, bounds the walk's text (Bytes):
// past it the walk stops with an error wrapping ErrWalkTooLarge, so that
// what a walk holds is bounded whatever it is asked (the caller bounds the
// number of requests).
func NewWalk(p algo.Params, start int64, reqs []Arrival, maxBytes int64) (*Walk, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, errors.New("no requests to walk through")
	}
	if err := algo.CheckTime(start); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	w := &Walk{Params: p, Algorithm: p.Kind.String(), About: describe(p), Start: start, Key: reqs[0].Key, Steps: make([]WalkStep, 0, len(reqs))}
	// before is the state before each step, for its arithmetic: a sliding
	// log's step reuses the log's backing array, so its entries are copied
	// into one buffer, reused from step to step.
	var s, before algo.State
	size := int64(len(w.Algorithm) + len(w.About) + len(w.Key))
	for i, r := range reqs {
		if err := algo.CheckTime(r.T); err != nil {
			return nil, fmt.Errorf("request %d: %w", i+1, err)
		}
		if r.Key != w.Key {
			return nil, fmt.Errorf("request %d is for key %q, the walk's is %q: a walk follows one key", i+1, r.Key, w.Key)
		}
		if i > 0 && r.T < reqs[i-1].T {
			return nil, fmt.Errorf("request %d at %s comes before request %d at %s: give the requests in time order", i+1, w.at(r.T), i, w.at(reqs[i-1].T))
		}
		st := WalkStep{N: i + 1, T: r.T, At: w.at(r.T), Cost: r.Cost, Charge: r.Charge, Before: w.state(s)}
		switch err := w.check(r); {
		case err != nil:
			st.Error = err.Error()
			st.After = st.Before
			st.Math = []string{fmt.Sprintf("cost %d is over the capacity %d: an error, not a denial; nothing is stored", r.Cost, p.Capacity())}
			if r.Charge {
				st.Math = []string{fmt.Sprintf("%s cannot carry a debt: a charge is an error; nothing is stored", p.Kind)}
			}
		default:
			log := before.Log
			before = s
			before.Log = append(log[:0], s.Log...)
			if r.Charge {
				algo.Charge(&p, &s, r.T, r.Cost, &st.Decision)
			} else {
				st.Decision = algo.Step(&p, &s, r.T, r.Cost, algo.Never)
			}
			st.After = w.state(s)
			st.Math = w.explain(before, r, st.Decision, s)
			st.Result = w.result(st.Decision, r.Charge)
		}
		if size += st.Bytes(); maxBytes > 0 && size > maxBytes {
			return nil, fmt.Errorf("%w: %d bytes by step %d of %d, over %d", ErrWalkTooLarge, size, i+1, len(reqs), maxBytes)
		}
		w.Steps = append(w.Steps, st)
	}
	return w, nil
}

// check says why r cannot be decided under the walk's limit: a take's
// cost over its capacity, a charge under an algorithm that cannot carry a
// debt.
func (w *Walk) check(r Arrival) error {
	if r.Charge {
		return storelink.CheckCharge(r.Key, &w.Params, r.Cost)
	}
	return storelink.Check(r.Key, &w.Params, r.Cost)
}

// Bytes is the size of st's text: its time, its fields' names and values,
// its arithmetic and its error. An answer that shows the step (JSON, HTML,
// a terminal's lines) is this and its markup.
func (st *WalkStep) Bytes() int64 {
	n := len(st.At) + len(st.Error)
	for _, fs := range [][]Field{st.Before, st.After, st.Result} {
		for _, f := range fs {
			n += len(f.Name) + len(f.Value)
		}
	}
	for _, m := range st.Math {
		n += len(m)
	}
	return int64(n)
}

// describe says what p is in a few words.
func describe(p algo.Params) string {
	s := describeKind(p, fmt.Sprintf("%d/%s", p.Rate, fmtDur(p.Period)), interval(p.Rate, p.Period))
	if p.Debt > 0 {
		s += fmt.Sprintf("; a charge may leave it owing %d", p.Debt)
	}
	return s
}

// describeKind says what p's algorithm does with lim (its RATE/PERIOD) and
// t (its interval).
func describeKind(p algo.Params, lim, t string) string {
	switch p.Kind {
	case algo.TokenBucket, algo.GCRA:
		return fmt.Sprintf("%s: a bucket of %d, refilled 1 per T = %s", lim, p.Burst, t)
	case algo.LeakyBucket:
		return fmt.Sprintf("%s: 1 leaves per T = %s, %d may wait", lim, t, p.Burst)
	case algo.FixedWindow:
		return fmt.Sprintf("%s: %d per window of %s opened by its first request", lim, p.Rate, fmtDur(p.Period))
	case algo.AlignedWindow:
		return fmt.Sprintf("%s: %d per window of %s aligned to the epoch", lim, p.Rate, fmtDur(p.Period))
	case algo.SlidingWindow:
		return fmt.Sprintf("%s: ~%d per %s, estimated from 2 aligned windows", lim, p.Rate, fmtDur(p.Period))
	default:
		return fmt.Sprintf("%s: %d in any trailing %s", lim, p.Rate, fmtDur(p.Period))
	}
}

// at formats the time t relative to the walk's start: "t+1.2s".
func (w *Walk) at(t int64) string {
	if t < w.Start {
		return "t-" + fmtDur(w.Start-t)
	}
	return "t+" + fmtDur(t-w.Start)
}

// dur formats a wait in µs, "never" for algo.Never.
func dur(us int64) string {
	if us == algo.Never {
		return "never"
	}
	return fmtDur(us)
}

// result formats every field of d, a charge's when charge is set.
func (w *Walk) result(d algo.Decision, charge bool) []Field {
	verdict := "denied"
	switch {
	case charge && d.Allowed:
		verdict = "charged"
	case charge:
		verdict = "charged up to the debt allowance, the rest forgiven"
	case d.Allowed:
		verdict = "allowed"
	}
	window := "none"
	if d.Window != 0 {
		window = "ends " + w.at(d.Window)
	}
	return []Field{
		{"decision", verdict},
		{"remaining", strconv.FormatInt(d.Remaining, 10)},
		{"retry after", dur(d.RetryAfter)},
		{"reset after", dur(d.ResetAfter)},
		{"delay", dur(d.Delay)},
		{"window", window},
		{"fresh at", w.at(d.FreshAt)},
	}
}

// ParseRequests reads requests typed as offsets from a start: a list
// separated by commas, each an offset in Go's duration syntax, then "xN"
// for N requests at that offset and "cost=N" for their cost (default 1),
// or "charge=N" for a charge of N units: "0ms x3, 200ms, 1s cost=2, 2s
// charge=40". The offsets must not go back. It returns at most limit
// requests (an error beyond), at start + offset, for key.
func ParseRequests(text string, start int64, key string, limit int) ([]Arrival, error) {
	var out []Arrival
	last := int64(0)
	for i, item := range strings.Split(text, ",") {
		words := strings.Fields(item)
		if len(words) == 0 {
			if strings.TrimSpace(text) == "" {
				return nil, errors.New("no requests: type offsets such as \"0ms x3, 200ms, 1s cost=2\"")
			}
			return nil, fmt.Errorf("request %d is empty: type an offset such as 200ms between the commas", i+1)
		}
		off, err := time.ParseDuration(words[0])
		if err != nil {
			return nil, fmt.Errorf("request %d: %q is not an offset such as 200ms or 1.5s", i+1, words[0])
		}
		if off < 0 || off%time.Microsecond != 0 || off.Microseconds() > algo.MaxTime-start {
			return nil, fmt.Errorf("request %d: offset %s is not a whole number of µs from 0 to the year 2112", i+1, words[0])
		}
		us := off.Microseconds()
		if us < last {
			return nil, fmt.Errorf("request %d: offset %s comes before %s: give the offsets in time order", i+1, words[0], fmtDur(last))
		}
		last = us
		n, cost := int64(1), int64(1)
		units := "" // cost= or charge=, once
		for _, w := range words[1:] {
			switch {
			case strings.HasPrefix(w, "x") || strings.HasPrefix(w, "×"):
				v, err := strconv.ParseInt(strings.TrimLeft(w, "x×"), 10, 64)
				if err != nil || v < 1 {
					return nil, fmt.Errorf("request %d: %q: want xN with N at least 1", i+1, w)
				}
				n = v
			case strings.HasPrefix(w, "cost=") || strings.HasPrefix(w, "charge="):
				name, num, _ := strings.Cut(w, "=")
				if units != "" {
					return nil, fmt.Errorf("request %d: %q after %s=: give a request one cost=N or charge=N", i+1, w, units)
				}
				v, err := strconv.ParseInt(num, 10, 64)
				if err != nil || v < 0 {
					return nil, fmt.Errorf("request %d: %q: want %s=N with N at least 0", i+1, w, name)
				}
				units, cost = name, v
			default:
				return nil, fmt.Errorf("request %d: %q: want xN (a count), cost=N or charge=N after the offset", i+1, w)
			}
		}
		if n > int64(limit-len(out)) {
			return nil, fmt.Errorf("%w: more than %d", ErrTooManyRequests, limit)
		}
		for range n {
			out = append(out, Arrival{T: start + us, Key: key, Cost: cost, Charge: units == "charge"})
		}
	}
	return out, nil
}

// DefaultWalk is the requests `sluice sim --steps` walks when none are given:
// a burst, a pause, and a request that costs 2.
const DefaultWalk = "0ms x3, 50ms, 100ms x2, 250ms, 1s cost=2"

// OneKey returns the requests of the first request's key, in their order,
// and how many requests of other keys it left out: a walk follows one key.
func OneKey(reqs []Arrival) ([]Arrival, int) {
	if len(reqs) == 0 {
		return nil, 0
	}
	var out []Arrival
	for _, r := range reqs {
		if r.Key == reqs[0].Key {
			out = append(out, r)
		}
	}
	return out, len(reqs) - len(out)
}

// WriteWalk writes w as terminal text: a header, then per step its request,
// its result on one line, and the state before, the arithmetic and the
// state after beneath. The text is the console's step table, line for line.
func WriteWalk(out io.Writer, w *Walk) error {
	bw := bufio.NewWriter(out)
	fmt.Fprintf(bw, "sluice sim --steps: %s %s\n", w.Algorithm, w.About)
	fmt.Fprintf(bw, "key %q, %d requests; t = %s (%dµs since the epoch)\n",
		w.Key, len(w.Steps), time.UnixMicro(w.Start).UTC().Format("2006-01-02T15:04:05.999999Z"), w.Start)
	fields := func(fs []Field) string {
		parts := make([]string, len(fs))
		for i, f := range fs {
			parts[i] = f.Name + " " + f.Value
		}
		return strings.Join(parts, "; ")
	}
	for _, st := range w.Steps {
		what := "cost"
		if st.Charge {
			what = "charge"
		}
		fmt.Fprintf(bw, "\nstep %d  %s  %s %d  ->  ", st.N, st.At, what, st.Cost)
		if st.Error != "" {
			fmt.Fprintf(bw, "error: %s\n", st.Error)
		} else {
			fmt.Fprintln(bw, fields(st.Result))
		}
		fmt.Fprintf(bw, "  before  %s\n", fields(st.Before))
		for i, m := range st.Math {
			label := "        "
			if i == 0 {
				label = "  math  "
			}
			fmt.Fprintf(bw, "%s  %s\n", label, m)
		}
		fmt.Fprintf(bw, "  after   %s\n", fields(st.After))
	}
	return bw.Flush()
}
