package algo

// A store that keeps a key's holds outside the process (package store's
// State, in bytes) lists them and builds them back: the holds, in the
// order they come back, are all that HoldStep's decisions depend on.

// AppendList appends the holds kept in h to dst, in the order they come
// back (by Expiry; equal expiries in the order they were placed), and
// returns the extended slice. Holds that have come back but that no
// operation has dropped yet are listed too: Len of them.
func (h *Holds) AppendList(dst []Hold) []Hold {
	if !h.indexed {
		return append(dst, h.few...)
	}
	x := h.idx
	for i := x.first(); i != 0; i = x.nodes[i].next {
		dst = append(dst, x.nodes[i].Hold)
	}
	return dst
}

// SetList makes h keep exactly the holds of list, which must be sorted by
// Expiry with distinct IDs, as AppendList gives them: HoldStep then
// decides on h as on the holds that were listed. h keeps no reference to
// list.
func (h *Holds) SetList(list []Hold) {
	*h = Holds{few: append([]Hold(nil), list...)}
	if len(list) > manyHolds {
		h.index()
	}
}
