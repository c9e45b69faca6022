package storelink

import (
	"time"

	"github.com/sluice-go/sluice/internal/algo"
)

// The root package's Limit and Request, by their fields. This package cannot
// name them (the root imports it), yet the stores' exported methods take the
// root's requests unchecked and must check them as a Limiter does: they pass
// them to the functions below, whose type parameters match any struct of
// these fields. A field added to the root's types and not here stops those
// calls from compiling.
type (
	limitFields[A ~uint8] = struct {
		Algorithm A
		Rate      int64
		Period    time.Duration
		Burst     int64
		Debt      int64
	}
	requestFields[A ~uint8, L ~limitFields[A]] = struct {
		Key      string
		Limit    L
		Cost     int64
		MaxDelay time.Duration
		Window   int64
	}
)

// Params checks the root package's Limit l (the zero Algorithm is the token
// bucket) and returns it in the form the steps take, or an error wrapping
// ErrInvalidLimit.
func Params[A ~uint8, L ~limitFields[A]](l L) (algo.Params, error) {
	f := limitFields[A](l)
	return params(uint8(f.Algorithm), f.Rate, f.Period, f.Burst, f.Debt)
}

// Checked checks the root package's Request r as a Limiter does and returns
// it in this package's form.
func Checked[A ~uint8, L ~limitFields[A], R ~requestFields[A, L]](r *R) (Request, error) {
	f := requestFields[A, L](*r)
	p, err := Params(f.Limit)
	if err == nil {
		err = Check(f.Key, &p, f.Cost)
	}
	if err != nil {
		return Request{}, err
	}
	md, err := MaxDelay(f.MaxDelay)
	if err != nil {
		return Request{}, err
	}
	return Request{Key: f.Key, Params: p, Cost: f.Cost, MaxDelay: md}, nil
}

// CheckedRefund is Checked for a refund; it also returns r's Window.
func CheckedRefund[A ~uint8, L ~limitFields[A], R ~requestFields[A, L]](r *R) (Request, int64, error) {
	f := requestFields[A, L](*r)
	p, err := Params(f.Limit)
	if err == nil {
		err = CheckRefund(f.Key, &p, f.Cost)
	}
	if err != nil {
		return Request{}, 0, err
	}
	return Request{Key: f.Key, Params: p, Cost: f.Cost, MaxDelay: algo.Never}, f.Window, nil
}

// CheckedParts is Checked for the parts of a composite: the error says which
// part is wrong, or that two name one key.
func CheckedParts[A ~uint8, L ~limitFields[A], R ~requestFields[A, L]](rs []R) ([]Request, error) {
	out := make([]Request, len(rs))
	for i := range rs {
		r, err := Checked(&rs[i])
		if err != nil {
			return nil, PartError(i, requestFields[A, L](rs[i]).Key, err)
		}
		out[i] = r
	}
	if err := CheckComposite(out, func(r *Request) string { return r.Key }); err != nil {
		return nil, err
	}
	return out, nil
}
