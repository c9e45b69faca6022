package store

// Key names one State a store keeps: the rate limit of the key Name, or,
// with Holds, the hold set of the concurrency limit of the key Name. A rate
// limit and a concurrency limit of one name are two states (SEMANTICS.md,
// "Concurrency limits").
type Key struct {
	Name  string
	Holds bool
}

// String is k as one string, distinct for every Key, for a store that keys
// its states by strings: "r:" and the name for a rate limit's state, "h:"
// and the name for a hold set.
func (k Key) String() string {
	if k.Holds {
		return "h:" + k.Name
	}
	return "r:" + k.Name
}

// Keys returns the keys of the States that op reads and may write, in the
// order Apply takes them:
//
//   - Take, Refund and Charge: Key's rate state; a composite Take's or
//     Charge's, each part's.
//   - Acquire, Release and Extend: Key's hold set; a composite Acquire's,
//     then each part's rate state.
//   - Reset: Key's rate state, then its hold set.
//
// An op of another Kind names none.
func Keys(op *Op) []Key {
	rate, holds := Key{Name: op.Key}, Key{Name: op.Key, Holds: true}
	var keys []Key
	switch op.Kind {
	case Take, Charge:
		if len(op.Parts) == 0 {
			return []Key{rate}
		}
	case Acquire:
		keys = []Key{holds}
	case Refund:
		return []Key{rate}
	case Release, Extend:
		return []Key{holds}
	case Reset:
		return []Key{rate, holds}
	default:
		return nil
	}
	for i := range op.Parts {
		keys = append(keys, Key{Name: op.Parts[i].Key})
	}
	return keys
}
