package policycore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sluice-go/sluice"
)

// An Outcome is what a door learnt of a request's response, for Settle.
type Outcome interface {
	// Counts reports whether the response counts under r, a counting
	// rule (Rule.Counts).
	Counts(r *Rule) bool
	// Used is what the response says the request used under r, a
	// settling rule (Rule.Settles); said is false when it says nothing.
	Used(r *Rule) (units int64, said bool)
}

// ErrNoCharge is Charge's error when no Spend is a settling rule's (of
// that name): the doors wrap it in their ErrNoDecision.
var ErrNoCharge = errors.New("no policy with a Used")

// Charge adds units to what the handler charged under the settling rule
// named name (every settling rule of ss when name is ""), for Settle: what
// both doors' Charge and ChargePolicy do with the request's Spends once
// they found them. settled reports that the request's handler returned:
// too late. The error, for the door to prefix, says why nothing was
// added.
func Charge(ss []Spend, settled bool, name string, units int64) error {
	switch {
	case units < 0:
		return fmt.Errorf("charge of %d units", units)
	case settled:
		return errors.New("charge after the handler returned: the request is settled")
	}
	found := false
	for i := range ss {
		s := &ss[i]
		if !s.Rule.Settles || name != "" && s.Rule.Name != name || seen(ss[:i], s.Rule) {
			continue
		}
		found = true
		for {
			old := s.charged.Load()
			if s.charged.CompareAndSwap(old, addUnits(old, units)) {
				break
			}
		}
		s.said.Store(true)
	}
	switch {
	case found:
		return nil
	case name != "":
		return fmt.Errorf("%w named %q", ErrNoCharge, name)
	}
	return ErrNoCharge
}

// seen reports whether a Spend of ss is r's: Charge and Settle keep a
// rule's figures on its first Spend.
func seen(ss []Spend, r *Rule) bool {
	for i := range ss {
		if ss[i].Rule == r {
			return true
		}
	}
	return false
}

// addUnits is a + b, at most math.MaxInt64 (both are ≥ 0).
func addUnits(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Settle settles a request's Spends once its response is known, each rule
// once:
//
//   - A settling rule (Settles) used what the handler charged (Charge) and
//     what the response says (out.Used), added; when neither says
//     anything, the take's estimate stands.
//   - A counting rule (Counts) used nothing when the response does not
//     count (out.Counts), else what was said if it also settles, else its
//     Cost.
//
// What the take spent (less what the handler gave back) is brought to what
// was used: the excess is refunded, to the windows it was spent in, as
// Refund does; the shortfall is charged, for every rule in one call
// (sluice.Limiter.ChargeAll), into debt if need be. The error names the
// rules whose refund or charge failed; nothing else changes.
func Settle(ctx context.Context, lim *sluice.Limiter, ss []Spend, out Outcome) error {
	var partBuf [2]sluice.Part
	var nameBuf [2]string
	charges, names := partBuf[:0], nameBuf[:0]
	var errs []error
	for i := range ss {
		s := &ss[i]
		r := s.Rule
		if !r.Settles && !r.Counts || seen(ss[:i], r) {
			continue
		}
		var cost, spent int64
		for j := i; j < len(ss); j++ {
			if t := &ss[j]; t.Rule == r {
				cost += t.Cost
				spent += t.spent() - t.refunded.Load()
			}
		}
		var used int64
		said := false
		if r.Settles {
			used, said = out.Used(r)
			if s.said.Load() {
				used, said = addUnits(max(used, 0), s.charged.Load()), true
			}
		}
		var actual int64
		switch {
		case r.Counts && !out.Counts(r):
		case said:
			actual = max(used, 0)
		case r.Counts:
			actual = cost
		default: // nothing said: the estimate stands
			continue
		}
		switch d := actual - spent; {
		case d > 0:
			charges = append(charges, sluice.Part{Key: s.Key, Limit: r.Limit, Cost: d})
			names = append(names, r.Name)
		case d < 0:
			if err := giveBackRule(ctx, lim, ss[i:], r, -d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	switch len(charges) {
	case 0:
	case 1:
		if _, err := lim.Charge(ctx, charges[0].Key, charges[0].Limit, charges[0].Cost); err != nil {
			errs = append(errs, fmt.Errorf("policy %q: charge: %w", names[0], err))
		}
	default:
		if _, err := lim.ChargeAll(ctx, charges, nil); err != nil {
			errs = append(errs, fmt.Errorf("policies %s: charge: %w", quoted(names), err))
		}
	}
	return errors.Join(errs...)
}

// giveBackRule gives n units of what r's Spends in ss spent back, the
// latest first.
func giveBackRule(ctx context.Context, lim *sluice.Limiter, ss []Spend, r *Rule, n int64) error {
	for j := len(ss) - 1; j >= 0 && n > 0; j-- {
		if ss[j].Rule != r {
			continue
		}
		given, err := ss[j].giveBack(ctx, lim, n)
		if err != nil {
			return err
		}
		n -= given
	}
	return nil
}

func quoted(names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(n))
	}
	return b.String()
}

// ParseUnits reads what a response field (a header, a trailer, a metadata
// value) says a request used: a decimal integer ≥ 0, with spaces or tabs
// around it.
func ParseUnits(v string) (int64, error) {
	i, j := 0, len(v)
	for i < j && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	for j > i && (v[j-1] == ' ' || v[j-1] == '\t') {
		j--
	}
	digits := v[i:j]
	var n int64
	for k := 0; k < len(digits); k++ {
		c := digits[k]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a whole number of units", shorten(digits))
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, fmt.Errorf("%q: more units than an int64 holds", shorten(digits))
		}
		n = n*10 + d
	}
	if digits == "" {
		return 0, errors.New("empty: not a number of units")
	}
	return n, nil
}

// shorten is v cut for an error message.
func shorten(v string) string {
	if len(v) > 32 {
		return v[:32] + "..."
	}
	return v
}
