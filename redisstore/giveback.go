package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/store"
)

// A failed acquire may still hold: a call that timed out, or whose reply
// was lost, may have reached Redis, which then ran it after the caller had
// its error (a server stalled past the store's timeout runs the calls it
// queued when it wakes). Its caller was answered that nothing is held, so
// nobody would release it: it would keep its slot until its lifetime. The
// store draws no id of its own: the caller's (the Limiter's) names the
// hold, so the store gives that id back, in the background, as soon as it
// can. A failed call spends nothing, for holds as for takes
// (SEMANTICS.md, "Concurrency limits").
//
// The give-back is best effort. Its release goes through the store's
// runner, so with one pipeline in flight it is sent after the acquire's,
// which Redis then runs first; with several, or after a dropped
// connection, Redis may run the release before a late acquire, so a
// release that finds nothing held is tried once more a timeout later.
// A give-back that cannot reach Redis is tried again, waits doubling,
// until the hold would have come back by itself; every failure is logged
// (WithLogger). At most maxGiveBacks run at once; beyond, the hold is
// left to its lifetime, logged.

// maxGiveBacks bounds the give-backs in flight: a Redis that is down
// fails every acquire, and each give-back waits for it.
const maxGiveBacks = 1024

// givebacks are a store's give-backs in flight.
type givebacks struct {
	slots   chan struct{} // a token per give-back in flight
	wg      sync.WaitGroup
	stop    chan struct{} // closed by Close
	stopped sync.Once
	given   atomic.Int64 // holds found and released
	dropped atomic.Int64 // give-backs not attempted: too many in flight
}

func newGivebacks() *givebacks {
	return &givebacks{slots: make(chan struct{}, maxGiveBacks), stop: make(chan struct{})}
}

// close stops the give-backs' waits and waits for those running.
func (g *givebacks) close() {
	g.stopped.Do(func() { close(g.stop) })
	g.wg.Wait()
}

// WithLogger makes the store log what it does in the background and no
// caller hears of: a hold a failed acquire may have left, given back, or
// not given back (the failure). Nil, the default, logs nothing.
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// mayHold reports whether an acquire that failed with err may have run in
// Redis all the same: it timed out, its reply was lost, its caller gave up
// while it was on its way. An error Redis answered (OOM, a foreign key, no
// permission) or a closed store ran nothing.
func mayHold(err error) bool {
	return errors.Is(err, store.ErrStoreUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// giveBackHold releases, in the background, the hold the acquire h may
// have taken though it failed (see above).
func (s *Store) giveBackHold(h *hold) {
	g := s.gb
	select {
	case g.slots <- struct{}{}:
	default:
		g.dropped.Add(1)
		s.logGiveBack(slog.LevelWarn, "a failed acquire's hold is not given back: too many give-backs in flight; it comes back by itself at the end of its lifetime",
			h, nil)
		return
	}
	// The key is copied: the store keeps nothing of the ops it is handed.
	rel := hold{op: algo.OpRelease, key: strings.Clone(h.key), c: h.c, id: h.id}
	until := time.Now().Add(time.Duration(h.c.Lifetime) * time.Microsecond)
	g.wg.Add(1)
	go func() {
		defer func() { <-g.slots; g.wg.Done() }()
		s.releaseUntil(&rel, until)
	}()
}

// releaseUntil releases rel's hold: at once, once more a timeout later
// when it found nothing (the acquire may not have run yet), and again,
// waits doubling, while Redis fails and the hold would still be held.
func (s *Store) releaseUntil(rel *hold, until time.Time) {
	g := s.gb
	wait, foundNone := time.Duration(0), false
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-g.stop:
				t.Stop()
				s.logGiveBack(slog.LevelWarn, "a failed acquire's hold was not given back before the store closed; it comes back by itself at the end of its lifetime", rel, nil)
				return
			}
		}
		released, err := s.releaseOnce(rel)
		switch {
		case err == nil && released:
			g.given.Add(1)
			s.logGiveBack(slog.LevelInfo, "a failed acquire's hold given back", rel, nil)
			return
		case err == nil && foundNone:
			return // the acquire did not run, or its hold came back
		case err == nil:
			foundNone, wait = true, s.timeout
		case errors.Is(err, ErrClosed):
			return
		default:
			wait = min(max(2*wait, s.timeout), time.Minute)
			if time.Now().Add(wait).After(until) {
				s.logGiveBack(slog.LevelWarn, "a failed acquire's hold could not be given back; it comes back by itself at the end of its lifetime", rel, err)
				return
			}
			s.logGiveBack(slog.LevelDebug, "a failed acquire's give-back failed; trying again", rel, err)
		}
	}
}

// releaseOnce sends rel once, within the store's timeout.
func (s *Store) releaseOnce(rel *hold) (released bool, err error) {
	now, err := s.clock()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	d, _, err := s.hold(ctx, rel, now)
	return d.Allowed, err
}

// logGiveBack logs a give-back's news, when the store has a logger.
func (s *Store) logGiveBack(level slog.Level, msg string, h *hold, err error) {
	if s.log == nil {
		return
	}
	attrs := []any{"key", h.key, "lease", h.id}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	s.log.Log(context.Background(), level, msg, attrs...)
}
