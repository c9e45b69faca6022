package cli

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/console"
	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
	"github.com/sluice-go/sluice/observe"
)

// runServe serves o until ctx ends, with the web console mounted at "/" of
// the HTTP listener when withConsole is set, and its sign-in beside the
// HTTP token.
func runServe(ctx context.Context, o serve.Options, withConsole bool) error {
	if !withConsole {
		return serve.Run(ctx, o)
	}
	var srv atomic.Pointer[serve.Server]
	con, err := console.New(console.Options{Token: o.HTTPToken, Limits: o.Limits, Config: func() console.ConfigView {
		if s := srv.Load(); s != nil {
			return consoleView(s.Config())
		}
		return console.ConfigView{}
	}, Slices: func(n int) []console.StoreSlices {
		if s := srv.Load(); s != nil {
			return consoleSlices(s.Slices(n))
		}
		return nil
	}, Slots: func(n int) console.Slots {
		if s := srv.Load(); s != nil {
			return consoleSlots(s.Holds(n))
		}
		return console.Slots{}
	}, RLQS: func(n int) *console.RLQS {
		if s := srv.Load(); s != nil {
			if v, ok := s.RLQS(n, n); ok {
				return consoleRLQS(v)
			}
		}
		return nil
	}})
	if err != nil {
		return err
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go con.Sample(sampleCtx) // the slices' chart
	o.Observer = observe.Multi(o.Observer, con)
	o.Refused = con.Refused
	o.Charged = con.Charged
	o.Handler = con.Handler()
	o.Login = con
	o.ConsolePath = "/"
	s, err := serve.New(o)
	if err != nil {
		return err
	}
	srv.Store(s)
	return s.Serve(ctx)
}

var _ serve.Login = (*console.Console)(nil)

// consoleView is what the console shows of the service's configuration.
func consoleView(v serve.ConfigView) console.ConfigView {
	out := console.ConfigView{Sources: v.Sources, Origin: v.Origin, Loaded: v.Loaded, LastErrorAt: v.LastErrorAt}
	if v.LastError != nil {
		out.LastError = v.LastError.Error()
	}
	for _, r := range v.Rules {
		name := r.Domain + "." + r.Name // as the service names the rule's events
		if r.Name == "" {
			name = r.Domain + "." + r.Path
		}
		cr := console.Rule{Domain: r.Domain, Path: r.Path, Name: name, Shadow: r.Shadow, Unlimited: r.Unlimited, Unit: r.Unit, Charge: r.Charge}
		if !r.Unlimited {
			cr.Algorithm, cr.Rate, cr.Period, cr.Burst, cr.Debt = r.Limit.Algorithm.String(), r.Limit.Rate, r.Limit.Period, r.Limit.Burst, r.Limit.Debt
		}
		out.Rules = append(out.Rules, cr)
	}
	return out
}

// consoleSlices is what the console shows of the stores' slices; nil when
// no store slices budgets.
func consoleSlices(v []serve.StoreSlices) []console.StoreSlices {
	var out []console.StoreSlices
	for _, sl := range v {
		st := sl.Stats
		cs := console.StoreSlices{
			Store: sl.Store, Keys: st.Keys, Held: st.Held, Local: st.Local, Redis: st.Store,
			Taken: st.Slices, Units: st.Sliced, GivenBack: st.GivenBack, Expired: st.Expired, Top: []console.SliceKey{},
		}
		for _, k := range sl.Top {
			cs.Top = append(cs.Top, console.SliceKey{Key: k.Key, Held: k.Held, Slices: k.Slices, ExpiresInUS: k.ExpiresIn.Microseconds(), Demand: k.Demand})
		}
		out = append(out, cs)
	}
	return out
}

// consoleSlots is what the console shows of the concurrency leases held.
func consoleSlots(v serve.HoldsView) console.Slots {
	out := console.Slots{Keys: v.Keys, Held: v.Held, Dropped: v.Dropped, Bytes: v.Bytes, Top: []console.HeldKey{}}
	if v.Bound != nil {
		out.Bound = v.Bound.Error()
	}
	for _, k := range v.Top {
		h := console.HeldKey{
			Key: k.Key, Limit: k.Limit, Held: k.Held, Leases: k.Leases,
			OldestUS: k.Oldest.Microseconds(), NextExpiryUS: k.NextExpiry.Microseconds(),
			Acquired: k.Acquired, Refused: k.Refused, Released: k.Released, Expired: k.Expired, Partial: k.Partial,
		}
		if k.HeldAllKnown {
			h.HeldAll = &k.HeldAll
		}
		out.Top = append(out.Top, h)
	}
	return out
}

// consoleRLQS is what the console shows of the RLQS budgets.
func consoleRLQS(v serve.RLQSView) *console.RLQS {
	out := &console.RLQS{Budgets: v.Budgets, Clients: v.Clients, Bytes: v.Bytes, Top: []console.RLQSBudget{}}
	if v.Bound != nil {
		out.Bound = v.Bound.Error()
	}
	for _, b := range v.Top {
		cb := console.RLQSBudget{Domain: b.Domain, Rule: b.Rule, Key: b.Key, Rate: b.Rate, FillS: int64(b.Fill / time.Second),
			Outstanding: b.Outstanding, Room: b.Room, Clients: b.Clients, Holders: b.Holders,
			Demand: b.Demand, Granted: b.Granted, Shares: []console.RLQSShare{}}
		for _, sh := range b.Shares {
			cs := console.RLQSShare{Holder: uint64(sh.Holder), Weight: sh.Weight, State: sh.State, Granted: sh.Granted, Outstanding: sh.Outstanding,
				GrantEndsUS: sh.GrantEnds.Microseconds(), LeaseEndsUS: sh.LeaseEnds.Microseconds()}
			if sh.DemandKnown {
				d := sh.Demand
				cs.Demand = &d
			}
			cb.Shares = append(cb.Shares, cs)
		}
		out.Top = append(out.Top, cb)
	}
	return out
}
