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
		// single.lua's arguments are kind … now, margin; multi.lua's are
		// margin, then kind … now per decision.
		m := &Call{Script: multi, Keys: make([]string, 0, len(g.members)), Args: make([]any, 1, 1+7*len(g.members))}
		m.Args[0] = g.members[0].Args[7]
		for _, c := range g.members {
			m.Keys = append(m.Keys, c.Keys[0])
			m.Args = append(m.Args, c.Args[:7]...)
		}
		g.merged = m
		out = append(out, m)
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
