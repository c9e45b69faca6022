// Package rateslice is how holders that share one rate (sluice serve
// --rlqs's replicas) lease their slices of it from a store: the claim, the
// answer, and the hook by which redisstore lends its script (see
// redisstore's rateslices.go). It is internal: what a user of the library
// needs of slices is redisstore.WithSlices.
package rateslice

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-go/sluice/store"
)

// A Claim is what a holder asks of one shared rate: a slice of Rate,
// which all the holders of the rate share.
type Claim struct {
	// Key names the rate (the store's prefix goes before it).
	Key string
	// Rate is the rate the holders share; Want the slice asked for, at
	// least what the holder's own grants from its slice still hold: each
	// at most MaxRate tokens per Unit.
	Rate, Want int64
	// Unit is what Rate, Want, Demand and the answer's figures are per:
	// whole seconds, 1s to MaxUnit. Holders of one rate may claim it in
	// different units (a reload changed it): their slices count against
	// one another as the rates they stand for, rounded so that no rate is
	// under-counted.
	Unit time.Duration
	// Demand and Weight (at least 1) are what the holder's own users
	// want and weigh: the fair shares follow them (weighted max-min).
	Demand, Weight int64
}

// A Slice is the store's answer to a Claim.
type Slice struct {
	// Tokens is the slice leased: at most the claim's Want and what the
	// other holders' slices leave of the rate, at least the smaller of
	// Want and the slice the holder held.
	Tokens int64
	// Fair is the holder's weighted max-min share of the rate by the
	// demands of every holder whose slice has not ended.
	Fair int64
	// Err is why this claim got no answer (the slice held stays as it
	// was until it ends).
	Err error
}

// MaxRate is the most tokens per Unit a claim's figures may be; MaxUnit
// the longest Unit (over a year: 2^25 seconds).
const (
	MaxRate = 1<<33 - 1
	MaxUnit = 1 << 25 * time.Second
)

// MaxClaims is how many claims one script takes: a longer list is sent
// as several scripts, so that none holds the store long.
const MaxClaims = 256

// ErrClaim is what a claim that cannot be sent wraps.
var ErrClaim = errors.New("rate claim")

// Func leases holder its slices of shared rates, one per claim: at every
// instant the slices of a rate, over every holder, add up to at most the
// rate. Each slice lasts life from now (µs; -1 for the store's clock,
// which every holder must then share), and a holder's slice counts
// against the others' until it ends, whatever becomes of the holder.
// Holder names one holder among all that share the store, 1 to 256 bytes.
type Func func(ctx context.Context, holder string, now int64, life time.Duration, claims []Claim) []Slice

// For returns st's Func, or nil for a store that cannot lease slices of a
// rate (memstore: one process holds the whole rate). redisstore sets it
// when it is loaded.
var For = func(store.Store) Func { return nil }
