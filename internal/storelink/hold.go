package storelink

import (
	"fmt"
)

// CheckUnits checks a hold's key and units under a valid limit: a key
// not empty, 0 ≤ units ≤ limit.
func CheckUnits(key string, limit, units int64) error {
	if key != "" && uint64(units) <= uint64(limit) { // inlined where a lease is taken
		return nil
	}
	return badUnits(key, limit, units)
}

// badUnits is CheckUnits's error.
func badUnits(key string, limit, units int64) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case units < 0:
		return fmt.Errorf("%w: %d is negative", ErrInvalidCost, units)
	case units > limit:
		return fmt.Errorf("%w: %d units, concurrency limit %d", ErrCostExceedsCapacity, units, limit)
	}
	return nil
}
