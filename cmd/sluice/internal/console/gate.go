package console

import "time"

// maxRest bounds a gate's rest: a run that took longer (a slow client, a
// busy machine) is followed by this much.
const maxRest = time.Second

// gate lets the playground's runs through one at a time, each after a rest
// as long as the run before it took (up to maxRest), so that however it is
// asked the playground keeps at most about half of one CPU from the
// decisions the service is for. A run asked for while another holds the
// gate, or rests after it, is turned away at once, never queued: queued runs
// would pile up in memory. The rest matters most on a service running on
// one P, where a run shares the P with the decisions (docs/console.md).
type gate struct {
	slot  chan struct{}
	now   func() time.Time
	sleep func(time.Duration)
	// next is when the next run may start; it is read and written only by
	// the holder of slot.
	next time.Time
}

func newGate() *gate {
	return &gate{slot: make(chan struct{}, 1), now: time.Now, sleep: time.Sleep}
}

// enter takes the gate, then waits out the rest the run before left, and
// returns leave, to call once the run's answer is written; it reports false
// when another run holds the gate.
func (g *gate) enter() (leave func(), ok bool) {
	select {
	case g.slot <- struct{}{}:
	default:
		return nil, false
	}
	if wait := g.next.Sub(g.now()); wait > 0 {
		g.sleep(wait)
	}
	start := g.now()
	return func() {
		end := g.now()
		g.next = end.Add(min(end.Sub(start), maxRest))
		<-g.slot
	}, true
}
