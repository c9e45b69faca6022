// Package observe is the hook through which sluice's doors (the HTTP
// middleware, the gRPC interceptors, the rate-limit service) report each
// decision they make, so that metrics live outside them.
//
// An Observer sees one Event per policy per decision: which policy, what came
// of it, whether the store's failure policy made it, and how long the store
// took. A policy that granted its part of a composite that another policy
// refused reports nothing: it neither admitted the request nor refused it,
// and it spent nothing. It is called on the request's path, so it must be fast and safe for
// concurrent use; it must not keep the Event's strings past the call unless it
// copies them. The package imports only the standard library; a Prometheus
// adapter is in package promobserve.
//
// Events carry no key: a key is per client and would give metrics an
// unbounded number of series.
package observe

import "time"

// Outcome is what came of one policy's part of a decision.
type Outcome uint8

const (
	// Allowed: the policy granted its part and the request went on.
	Allowed Outcome = iota
	// Denied: the policy refused (the request was refused or, for a leaky
	// bucket, would have waited longer than it could).
	Denied
	// ShadowDenied: a shadow policy would have refused; the request went on.
	ShadowDenied
	// Error: the store could not decide (an outage under fail-closed, a
	// cancelled context, a bad request); the request was not served by the
	// limit's verdict.
	Error
	// Degraded: the store was unavailable and its failure policy (fail open,
	// or a local fallback) admitted the request.
	Degraded
	// Expired: a concurrency policy's lease had come back by itself (the
	// end of its lifetime) before the request that held it ended: its slot
	// may have been given to another while it still ran. Reported when the
	// request ends, with no latency.
	Expired
)

// Outcomes lists every Outcome of a decision, for adapters that declare
// their series up front. Expired, which only a concurrency policy reports
// (when its request ends), is not among them: an adapter counts it as it
// comes, so that rate policies gain no series.
var Outcomes = [...]Outcome{Allowed, Denied, ShadowDenied, Error, Degraded}

// String returns the outcome's label: "allowed", "denied", "shadow_denied",
// "error", "degraded" or "expired".
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	case ShadowDenied:
		return "shadow_denied"
	case Error:
		return "error"
	case Degraded:
		return "degraded"
	case Expired:
		return "expired"
	}
	return "unknown"
}

// Event is one policy's share of one decision.
type Event struct {
	// Source names the door that decided: "http", "grpc", "serve", or an
	// adapter's own name.
	Source string
	// Policy is the policy's (or the service's rule's) name. Names are set by
	// configuration, so their number is bounded.
	Policy string
	// Outcome is what came of the policy's part.
	Outcome Outcome
	// Latency is how long the store took to decide the whole request (all of
	// its policies, one composite call); 0 when the store was not called.
	Latency time.Duration
	// Index is the policy's place among the Events of one store call (0 for
	// the first): the call's Events all carry its Latency, so an adapter
	// that measures calls rather than policies (a latency histogram) reads
	// Latency and Wait only where Index is 0.
	Index int
	// Wait is how long the request waited for its turn before it went on (an
	// outbound client's wait for its budget or for an upstream's
	// Retry-After, a leaky bucket's delay); 0 when it did not wait. Like
	// Latency, it is the request's and is carried by each of its Events.
	Wait time.Duration
}

// Observer receives Events. Implementations must be safe for concurrent use
// and must not block.
type Observer interface {
	Observe(Event)
}

// Func adapts a function to an Observer.
type Func func(Event)

// Observe calls f(e).
func (f Func) Observe(e Event) { f(e) }

// Multi returns an Observer that passes each Event to every non-nil observer
// in order; nil when none is left.
func Multi(observers ...Observer) Observer {
	var out multi
	for _, o := range observers {
		if o != nil {
			out = append(out, o)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return out
}

type multi []Observer

func (m multi) Observe(e Event) {
	for _, o := range m {
		o.Observe(e)
	}
}
