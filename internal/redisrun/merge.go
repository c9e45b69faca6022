package redisrun

// A Merger is what a store knows of its decisions' scripts that a Batcher
// needs to carry several decisions in one script call: which decisions may
// share a call (one class, on keys of one group: see Router), the call that
// makes them, and how its reply splits among them. The argument layouts
// stay with the scripts, in the store. A decision is a value of the store's
// type D, copied into the Batcher's own memory until it is sent, so that
// gathering decisions allocates nothing per decision.
type Merger[D any] interface {
	// Class returns the key d is routed by and d's class: decisions of one
	// class whose keys share a group are merged.
	Class(d *D) (key string, class int64)
	// Merge returns the call that makes ds (one decision or several), all
	// of one class and group.
	Merge(ds []*D) *Call
	// Split gives each of ds its part of the reply of m, Merge(ds)'s call
	// once run, or m's error.
	Split(m *Call, ds []*D)
}
