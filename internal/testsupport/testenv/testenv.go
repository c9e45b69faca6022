// Package testenv holds what sluice's tests read from the environment: whether
// wall-clock assertions run, and the seed of random tests; and the Clock
// tests move by hand.
//
// Wall-clock assertions (a drain within 5% of its ideal time, enough load in
// each phase of a fault test, a limiter saturated under load, a call back
// within a bound) hold on a quiet machine and fail now and then on a busy
// one. They run only when SLUICE_TIMING=1, as .ci/run sets it (with one
// package at a time, -p 1). Without it the tests still make every
// correctness check (no duplicates, exact counts, bounds) and log each
// wall-clock assertion they skip.
//
// Long runs (random tests' full iterations, load tests' long phases,
// comparisons that assert nothing) run only when SLUICE_LONG=1, as .ci/run
// sets it: without it every kind of test still runs, each with less work,
// so that `go test github.com/sluice-go/sluice/...` takes minutes, not ten.
//
// Random tests take their seed from SLUICE_SEED when it is set, and log the
// seed they use either way, so a failure can be replayed:
//
//	SLUICE_SEED=1764000000123 go test -run TestX ./pkg
package testenv

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TimingEnv is the environment variable that turns the wall-clock assertions
// on when set to "1".
const TimingEnv = "SLUICE_TIMING"

// LongEnv is the environment variable that turns the long runs on when set
// to "1".
const LongEnv = "SLUICE_LONG"

// Long reports whether the long runs are on (SLUICE_LONG=1): a test does
// its full amount of work (more random iterations, longer load phases)
// when it is, and a smaller one, with the same assertions, when not.
func Long() bool { return os.Getenv(LongEnv) == "1" }

// SeedEnv is the environment variable that sets the seed of random tests.
const SeedEnv = "SLUICE_SEED"

// Timing reports whether wall-clock assertions run (SLUICE_TIMING=1). When
// they do not, it logs that the assertion named what is skipped, and why.
func Timing(t testing.TB, what string) bool {
	t.Helper()
	if os.Getenv(TimingEnv) == "1" {
		return true
	}
	t.Logf("skipping the wall-clock assertion %q: it runs only with %s=1 (CI sets it, with -p 1); the correctness checks ran", what, TimingEnv)
	return false
}

// SkipUnlessTiming skips a test that is a wall-clock measurement and
// nothing else, so that it is reported skipped rather than passed when
// SLUICE_TIMING is not 1.
func SkipUnlessTiming(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(TimingEnv) != "1" {
		t.Skipf("the wall-clock measurement %q runs only with %s=1 (CI sets it, with -p 1)", what, TimingEnv)
	}
}

// TimingOn is Timing without the log line, for a check made in a loop.
func TimingOn() bool { return os.Getenv(TimingEnv) == "1" }

// Seed returns the seed of a random test: SLUICE_SEED when set, else a fresh
// one from the clock. It logs the seed either way.
func Seed(t testing.TB) uint64 {
	t.Helper()
	return seed(t, uint64(time.Now().UnixNano()), "fresh")
}

// SeedOr is Seed for a test whose seed is fixed, so that it explores the
// same cases on every run: SLUICE_SEED when set, else fixed.
func SeedOr(t testing.TB, fixed uint64) uint64 {
	t.Helper()
	return seed(t, fixed, "fixed")
}

func seed(t testing.TB, def uint64, kind string) uint64 {
	t.Helper()
	s := os.Getenv(SeedEnv)
	if s == "" {
		t.Logf("seed %d (%s; %s=%d replays it)", def, kind, SeedEnv, def)
		return def
	}
	n, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("%s=%q: want an unsigned integer", SeedEnv, s)
	}
	t.Logf("seed %d (from %s)", n, SeedEnv)
	return n
}
