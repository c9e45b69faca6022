package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
)

// SliceAt runs the slice script on key at now (µs): the take's decision
// and the units it spent.
func SliceAt(s *Store, ctx context.Context, key string, p algo.Params, cost, want, now int64) (algo.Decision, int64, error) {
	d, got, at, err := s.takeSliceAt(ctx, key, &p, cost, want, now)
	if err == nil && at != now {
		err = fmt.Errorf("slice script: taken at %d, asked at %d", at, now)
	}
	return d, got, err
}

// GiveBackAt gives units spent at spent (µs) under p back to key at now, as
// a slice of the given life whose window ends at window (0: a bucket's):
// false when the slice had ended.
func GiveBackAt(s *Store, ctx context.Context, key string, p algo.Params, units, window, spent, life, now int64) (bool, error) {
	err := s.giveBackAt(ctx, key, &p, &slice{units: units, window: window, spent: spent}, life, now)
	if err == errSliceEnded {
		return false, nil
	}
	return err == nil, err
}
