package redisstore

import (
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
)

// NewOver is New over a redisrun.Client, for the tests that plug in clients
// of their own (counting, failing, unrouted).
func NewOver(c redisrun.Client, opts ...Option) (*Store, error) { return newStore(c, opts...) }

// ScriptFor returns the single-decision script of algorithm k.
func ScriptFor(k algo.Kind) *redisrun.Script { return scripts.single[k] }

// RateKey returns the Redis key that holds key's rate state.
func RateKey(s *Store, key string) string { return s.rateKey(key) }

// HoldKey returns the Redis key that holds key's holds.
func HoldKey(s *Store, key string) string { return s.holdKey(key) }
