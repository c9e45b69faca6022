package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// maxBatch is the most calls one pipeline carries.
const maxBatch = 256

// batcher gathers calls made concurrently into pipelines: each of its loops
// takes the first waiting call, everything else waiting behind it (up to
// maxBatch), and sends them in one round trip. Under no load a call goes alone
// at once; under load the round trips are shared.
type batcher struct {
	client    Client
	timeout   time.Duration
	clustered bool // merge only decisions whose keys share a slot
	ch        chan *pending
	quit      chan struct{}
	wg        sync.WaitGroup
	once      sync.Once
}

type pending struct {
	ctx  context.Context // the caller's: once done, the call is not sent
	c    *Call
	done chan struct{}
}

func newBatcher(c Client, loops int, timeout time.Duration, clustered bool) *batcher {
	b := &batcher{client: c, timeout: timeout, clustered: clustered, ch: make(chan *pending, maxBatch), quit: make(chan struct{})}
	b.wg.Add(loops)
	for i := 0; i < loops; i++ {
		go b.loop()
	}
	return b
}

// run sends c with the next pipeline and waits for its reply or for ctx.
// A call whose ctx is done before a loop takes it is dropped, and a pipeline
// gives up (short of a reply already on its way) once all its callers have:
// a caller told the store is unavailable is not charged later for a call
// that was still waiting to be sent.
func (b *batcher) run(ctx context.Context, c *Call) error {
	p := &pending{ctx: ctx, c: c, done: make(chan struct{})}
	select {
	case b.ch <- p:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		select {
		case <-p.done: // the reply came in time after all
			return nil
		default:
			return ctx.Err()
		}
	}
}

func (b *batcher) loop() {
	defer b.wg.Done()
	batch := make([]*pending, 0, maxBatch)
	calls := make([]*Call, 0, maxBatch)
	for {
		select {
		case p := <-b.ch:
			batch = append(batch[:0], p)
		case <-b.quit:
			return
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case p := <-b.ch:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		// A caller that gave up while its call waited here (all loops busy
		// on a slow Redis) was told the store is unavailable: sending its
		// call now would charge it for a request it did not make.
		live := batch[:0]
		for _, p := range batch {
			if err := p.ctx.Err(); err != nil {
				p.c.Err = err
				close(p.done)
				continue
			}
			live = append(live, p)
		}
		batch = live
		if len(batch) == 0 {
			continue
		}
		// Nor may the pipeline wait (for a connection, a dial, a retry) past
		// the moment its last caller gives up, and then send.
		deadline := time.Now().Add(b.timeout)
		latest := time.Time{}
		calls = calls[:0]
		for _, p := range batch {
			calls = append(calls, p.c)
			if d, ok := p.ctx.Deadline(); !ok {
				latest = deadline
			} else if d.After(latest) {
				latest = d
			}
		}
		if latest.Before(deadline) {
			deadline = latest
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		b.send(ctx, calls)
		cancel()
		for _, p := range batch {
			close(p.done)
		}
	}
}

// send runs the calls in one pipeline, the single decisions among them merged
// into one multi-decision script per slot: the server's cost per script
// (calling it, reading TIME, defining the helpers) is then paid once.
func (b *batcher) send(ctx context.Context, calls []*Call) {
	type group struct {
		merged  *Call
		members []*Call
	}
	var groups []*group
	bySlot := map[int]*group{}
	out := make([]*Call, 0, len(calls))
	for _, c := range calls {
		if !isSingle(c.Script) {
			out = append(out, c)
			continue
		}
		slot := 0
		if b.clustered {
			slot = Slot(c.Keys[0])
		}
		g := bySlot[slot]
		if g == nil {
			g = &group{}
			bySlot[slot] = g
			groups = append(groups, g)
		}
		g.members = append(g.members, c)
	}
	for _, g := range groups {
		if len(g.members) == 1 {
			out = append(out, g.members[0])
			continue
		}
		g.merged = merge(g.members)
		out = append(out, g.merged)
	}
	b.client.Run(ctx, out)
	for _, g := range groups {
		if g.merged == nil {
			continue
		}
		r, err := g.merged.Reply, g.merged.Err
		if err == nil && len(r) != 5*len(g.members) {
			err = fmt.Errorf("multi-decision script replied %d values for %d decisions", len(r), len(g.members))
		}
		for i, c := range g.members {
			if err != nil {
				c.Err = err
			} else {
				c.Reply = r[5*i : 5*i+5 : 5*i+5]
			}
		}
	}
}

// A limitKey is a single decision's limit: kind, rate, period, burst, max
// delay, as single.lua's arguments.
type limitKey [5]any

// merge returns one multi.lua call for the single decisions cs: each distinct
// limit once, then each decision's limit position, cost and, when any
// decision carries its own time, now.
func merge(cs []*Call) *Call {
	// single.lua's arguments: kind, rate, period, burst, cost, max delay,
	// now, margin.
	var limits []limitKey
	var index map[limitKey]int // past a few limits, instead of a scan
	pos := make([]int, len(cs))
	timed := false
	last := -1
	for i, c := range cs {
		a := c.Args
		k := limitKey{a[0], a[1], a[2], a[3], a[5]}
		j := -1
		switch {
		case last >= 0 && limits[last] == k:
			j = last
		case index != nil:
			if x, ok := index[k]; ok {
				j = x
			}
		default:
			for x := range limits {
				if limits[x] == k {
					j = x
					break
				}
			}
		}
		if j < 0 {
			j = len(limits)
			limits = append(limits, k)
			if index != nil {
				index[k] = j
			} else if len(limits) > 8 {
				index = make(map[limitKey]int, 2*len(limits))
				for x, l := range limits {
					index[l] = x
				}
			}
		}
		pos[i], last = j, j
		if t, _ := a[6].(int64); t >= 0 {
			timed = true
		}
	}
	per := 2
	if timed {
		per = 3
	}
	m := &Call{Script: multi, Keys: make([]string, len(cs)), Args: make([]any, 0, 3+5*len(limits)+per*len(cs))}
	m.Args = append(m.Args, cs[0].Args[7], int64(len(limits)), int64(per-2))
	for _, l := range limits {
		m.Args = append(m.Args, l[:]...)
	}
	for i, c := range cs {
		m.Keys[i] = c.Keys[0]
		m.Args = append(m.Args, int64(pos[i]+1), c.Args[4])
		if timed {
			m.Args = append(m.Args, c.Args[6])
		}
	}
	return m
}

// isSingle reports whether s is a single-decision script, which send may
// merge.
func isSingle(s *Script) bool {
	for _, t := range scripts {
		if s == t && t != nil {
			return true
		}
	}
	return false
}

func (b *batcher) close() {
	b.once.Do(func() {
		close(b.quit)
		b.wg.Wait()
	})
}
