package redisstore

import (
	"embed"
	"fmt"
	"strings"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/store"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts are the store's scripts, assembled from scripts/*.lua: for each
// algorithm (by algo.Kind) the helpers and prelude, the guard, the
// algorithm's step and the single-decision main (single) or the
// multi-decision main (multi); every step and the composite main
// (composite); the charge main over one algorithm's step (charge) or the
// four that charge (chargeAll); refund and reset.
var scripts = assemble()

// stepFiles are each algorithm's step (its take and, for the four that
// can carry a debt, its charge) after the files of helpers it needs.
var stepFiles = [...][]string{
	algo.TokenBucket:   {"bucket.lua", "token_bucket.lua"},
	algo.GCRA:          {"timestamp.lua", "bucket.lua", "gcra.lua"},
	algo.LeakyBucket:   {"timestamp.lua", "leaky_bucket.lua"},
	algo.FixedWindow:   {"window.lua", "fixed_window.lua"},
	algo.AlignedWindow: {"window.lua", "aligned_window.lua"},
	algo.SlidingWindow: {"sliding_window.lua"},
	algo.SlidingLog:    {"sliding_log.lua"},
}

// chargeKinds are the algorithms that can charge, in the order the
// scripts holding all of them define their steps.
var chargeKinds = []algo.Kind{algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.AlignedWindow}

// stepsOf returns the steps of kinds, in order, each after the helpers it
// needs; a file of helpers two steps need comes once.
func stepsOf(kinds ...algo.Kind) string {
	var src strings.Builder
	seen := map[string]bool{}
	for _, k := range kinds {
		for _, f := range stepFiles[k] {
			if !seen[f] {
				seen[f] = true
				src.WriteString(mustRead(f))
			}
		}
	}
	return src.String()
}

// prelude is what every decision script starts with: the shared helpers,
// the prelude (load, store, decision) and the reading of other limits'
// states (convert.lua).
func prelude() string {
	return redisrun.LuaHelpers + mustRead("prelude.lua") + mustRead("convert.lua")
}

func assemble() *scriptSet {
	// Each script defines only the helpers its steps use: Lua recreates
	// every local function on every call. Every step reads the states other
	// limits wrote (convert.lua). Digests are computed on first use
	// (Script.SHA), not here.
	s := new(scriptSet)
	prelude, guard := prelude(), mustRead("guard.lua")
	for _, k := range algo.Kinds() {
		s.single[k] = redisrun.NewScript(prelude + guard + stepsOf(k) + mustRead("single.lua"))
		s.multi[k] = redisrun.NewScript(prelude + guard + stepsOf(k) + mustRead("multi.lua"))
	}
	for _, k := range chargeKinds {
		s.charge[k] = redisrun.NewScript(prelude + guard + stepsOf(k) + mustRead("charge.lua"))
	}
	s.chargeAll = redisrun.NewScript(prelude + guard + stepsOf(chargeKinds...) + mustRead("charge.lua"))
	s.composite = redisrun.NewScript(prelude + guard + stepsOf(algo.Kinds()...) + mustRead("class.lua") + mustRead("composite.lua"))
	s.refund = redisrun.NewScript(prelude + refundSteps() + mustRead("refund.lua"))
	s.reset = redisrun.NewScript(mustRead("reset.lua"))
	return s
}

// refundSteps is what refund.lua needs before it: the window steps, and
// the buckets' figures.
func refundSteps() string {
	return stepsOf(algo.FixedWindow, algo.AlignedWindow) + mustRead("bucket.lua")
}

// mustRead returns one of the package's embedded scripts.
func mustRead(name string) string { return redisrun.MustRead(scriptFiles, name) }

// The codes of a decision the script could not make (guard.lua).
const (
	codeForeignType int64 = iota + 1
	codeForeignData
	codeNoMemory
	codeNoPermission
	codeNoTime
	codeNotWritable
	codeOther
)

// decisionOf reads a script's reply of one decision on key, or the error
// the script reports for it (allowed -1, then a code: see guard.lua).
func decisionOf(r []int64, key string) (algo.Decision, error) {
	if r[0] < 0 {
		return algo.Decision{}, failure(r[1], key)
	}
	d := algo.Decision{Allowed: r[0] == 1, Remaining: r[1], RetryAfter: r[2], ResetAfter: r[3], Delay: r[4], Window: r[5]}
	if d.RetryAfter < 0 {
		d.RetryAfter = algo.Never
	}
	return d, nil
}

// failure is the error of a decision on key that the script reports with
// code.
func failure(code int64, key string) error {
	switch code {
	case codeForeignType:
		return fmt.Errorf("%w: %q holds another type than a string (WRONGTYPE): delete it, or give the store a prefix of its own (WithPrefix)", ErrForeignKey, key)
	case codeForeignData:
		return fmt.Errorf("%w: %q holds a string that is not a sluice state: delete it, or give the store a prefix of its own (WithPrefix)", ErrForeignKey, key)
	case codeNoMemory:
		return fmt.Errorf("%w: the write of %q was refused; raise maxmemory, or give the limiter a Redis of its own", ErrOutOfMemory, key)
	case codeNoPermission:
		return fmt.Errorf("%w: on %q (grant the user read and write on the store's keys, ~prefix*)", ErrNoPermission, key)
	case codeNoTime:
		return fmt.Errorf("%w: TIME, in the script for %q: give the store the caller's time (WithClock), or grant +time", ErrNoPermission, key)
	case codeNotWritable:
		return fmt.Errorf("%w: Redis refused the write of %q (a replica, loading, or failing to persist)", store.ErrStoreUnavailable, key)
	}
	return fmt.Errorf("redisstore: the script failed on %q (code %d)", key, code)
}
