package redisstore

import (
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/core"
)

// checkRequest reports why req cannot be decided (core.Check, and a
// limit that Validate refuses), or nil.
func checkRequest(req *core.Request) error {
	if err := req.Params.Validate(); err != nil {
		return err // wraps sluice.ErrInvalidLimit
	}
	if err := core.Check(req.Key, req.Params, req.Cost); err != nil {
		return err
	}
	if req.MaxDelay < 0 {
		return fmt.Errorf("%w: max delay %dµs is negative", sluice.ErrInvalidLimit, req.MaxDelay)
	}
	return nil
}

// checkRequests is checkRequest for every part of a composite, which must
// name distinct keys.
func checkRequests(reqs []core.Request) error {
	if len(reqs) == 0 {
		return fmt.Errorf("%w: a composite needs at least one part", sluice.ErrInvalidLimit)
	}
	for i := range reqs {
		if err := checkRequest(&reqs[i]); err != nil {
			return fmt.Errorf("part %d (%q): %w", i, reqs[i].Key, err)
		}
		for j := range i {
			if reqs[j].Key == reqs[i].Key {
				return fmt.Errorf("%w: %q", sluice.ErrDuplicateKey, reqs[i].Key)
			}
		}
	}
	return nil
}
