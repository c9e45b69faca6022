package redisstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/store"
)

// FailurePolicy says what a decision does when Redis cannot be reached or
// does not answer in time.
type FailurePolicy uint8

const (
	// FailClosed returns an error wrapping sluice.ErrStoreUnavailable.
	FailClosed FailurePolicy = iota
	// FailOpen allows the request, flagged Degraded, and holds nothing.
	FailOpen
	// FailLocal decides with an in-process memstore for the outage, flagged
	// Degraded: each process then limits on its own.
	FailLocal
)

// Option configures a Store.
type Option func(*Store)

// WithPrefix puts prefix in front of every key (default "sluice:").
func WithPrefix(prefix string) Option { return func(s *Store) { s.prefix = prefix } }

// WithTimeout bounds each decision: a Redis that does not answer within d is
// unavailable for that call (default 1s). d must be positive.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d <= 0 {
			s.optErr = append(s.optErr, fmt.Errorf("WithTimeout(%v): a decision needs a positive time to reach Redis", d))
		}
		s.timeout = d
	}
}

// WithTTLMargin sets how long past the moment its state is equivalent to
// fresh a key is kept (default 1s). It covers the distance between the
// clock decisions use and the server's expiry clock. d must not be
// negative.
func WithTTLMargin(d time.Duration) Option {
	return func(s *Store) {
		if d < 0 {
			s.optErr = append(s.optErr, fmt.Errorf("WithTTLMargin(%v): a negative margin would expire keys before their state is fresh", d))
		}
		s.margin = d.Microseconds()
	}
}

// WithFailurePolicy sets what happens when Redis cannot be reached or does
// not answer in time (default FailClosed) to a take or an acquire; a
// refund or a charge that cannot reach Redis is an error under every
// policy (see Store.Run).
func WithFailurePolicy(p FailurePolicy) Option {
	return func(s *Store) {
		if p > FailLocal {
			s.optErr = append(s.optErr, fmt.Errorf("WithFailurePolicy(%d): not FailClosed, FailOpen or FailLocal", p))
		}
		s.policy = p
	}
}

// WithClock makes the store decide at c's time (the caller's) instead of the
// server's TIME, and makes c the clock a sluice.Limiter over the store waits
// by (unless the Limiter was given its own); the FailLocal fallback decides
// at c's time too.
//
// The server's TIME is the default because every process of a fleet then
// decides on one clock, whatever the skew between their own. Use caller time
// where that is not possible or not wanted: a Redis user that may not run
// TIME in scripts (some managed services), replays and simulations that
// decide at recorded instants, and tests that step a fake clock. With it,
// processes whose clocks disagree disagree on the limit: a process ahead
// sees more refill, one behind sees less, by the skew between them.
// c must not be nil.
func WithClock(c store.Clock) Option {
	return func(s *Store) {
		if c == nil {
			s.optErr = append(s.optErr, errors.New("WithClock(nil): no clock"))
			return
		}
		s.clk = c
		if m, ok := c.(interface{ Micros() int64 }); ok {
			s.now = m.Micros
			return
		}
		s.now = func() int64 { return c.Now().UnixMicro() }
	}
}

// WithoutBatching sends every decision in its own round trip, for callers
// who want strict per-call latency over throughput.
func WithoutBatching() Option { return func(s *Store) { s.batchN = 0 } }

// maxPipelines bounds WithBatching.
const maxPipelines = 1024

// WithBatching sets how many pipelines may be in flight at once (default 4;
// 0 is WithoutBatching; at most 1024). While one is on its way the next
// gathers the calls that come until it is back, and goes sooner only once
// 64 calls wait: more pipelines go at once when the calls come faster than
// the round trips carry them.
func WithBatching(pipelines int) Option {
	return func(s *Store) {
		if pipelines < 0 || pipelines > maxPipelines {
			s.optErr = append(s.optErr, fmt.Errorf("WithBatching(%d): pipelines in flight must be from 0 to %d", pipelines, maxPipelines))
		}
		s.batchN = pipelines
	}
}
