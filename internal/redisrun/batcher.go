package redisrun

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// maxBatch is the most calls one pipeline carries.
const maxBatch = 256

// ShareBatch is the batch past which the next pipeline goes without
// waiting for those on their way to come back.
const ShareBatch = maxBatch / 4

// A Batcher gathers calls made concurrently into pipelines. One of its loops
// at a time gathers the next batch: it takes the first waiting call and
// everything behind it, and while another pipeline (or an inline call) is on
// its way it goes on gathering until that one comes back or the batch holds
// ShareBatch calls; then it sends the batch in one round trip (up to
// maxBatch calls) and the next loop gathers. Under no load a call goes alone
// at once; under load every round trip carries the calls that came during
// the previous one, so the round trips (and the server's cost of each) are
// shared by as many calls as the load brings, and more pipelines go out at
// once only when the batches fill faster than the round trips come back.
type Batcher[D any] struct {
	client  Client
	timeout time.Duration
	// merger merges the decisions (Decide) of one class and group into one
	// call; nil for a caller that sends Calls only.
	merger Merger[D]
	pool   *pool[D]
	// closed is the error of a call made or still waiting after Close.
	closed error
	// bounded: the client ends every call by its context's deadline
	// (BoundByContext), so callers wait without timers of their own (wait).
	bounded bool
	// group is the client's Router.Group: only decisions whose keys share
	// a group are merged.
	group func(key string) (uint64, bool)
	ch    chan *pending[D]
	quit  chan struct{} // closed by Close: the loops stop
	wg    sync.WaitGroup
	once  sync.Once
	// active counts the pipelines on their way, the batch being gathered
	// (from its first call on) and the calls a caller sends inline (Claim).
	active atomic.Int32
	// shared: the last pipeline carried several calls.
	shared atomic.Bool
	// gather is held by the loop gathering the next batch.
	gather sync.Mutex
	// back gets a signal (and keeps one) when a pipeline or an inline call
	// comes back: the gathering loop looks at active again.
	back chan struct{}
}

// Claim reports whether the batcher is idle (no pipeline on its way, no call
// waiting, none inline, and its last pipeline carried a single call) and,
// if so, takes its inline slot: the caller then sends its call itself and
// gives the slot back with Release. Under load the batcher is busy and
// calls queue to share pipelines; so does the first call after a shared
// pipeline came back (the callers it answered are likely to call again at
// once, and their calls join it).
func (b *Batcher[D]) Claim() bool {
	if len(b.ch) > 0 || b.active.Load() != 0 || b.shared.Load() {
		return false
	}
	if b.active.Add(1) == 1 {
		return true
	}
	b.active.Add(-1)
	return false
}

// Release gives back the inline slot Claim took.
func (b *Batcher[D]) Release() { b.done() }

// done ends a pipeline or an inline call: one fewer on its way, and the
// gathering loop is told.
func (b *Batcher[D]) done() {
	b.active.Add(-1)
	select {
	case b.back <- struct{}{}:
	default:
	}
}

// The states of a pending call: waiting for its answer, answered (by the loop
// that sent it), abandoned (by its caller, who gave up).
const (
	waiting uint32 = iota
	answered
	abandoned
)

// A pending is a call waiting for a pipeline: a decision, merged with others
// when it is sent, or any other call. Whoever moves it out of waiting owns
// the outcome: the loop answers it (the Merger's Split writing into d, or
// an error of its own in err; then it signals done), or the caller abandons
// it and the loop's answer, if one comes, is never read. Answered pendings
// are reused; abandoned ones are left to the collector.
type pending[D any] struct {
	deadline time.Time       // the caller gives up then
	ctx      context.Context // the caller's, while it waits
	state    atomic.Uint32
	done     chan struct{} // one signal, once answered
	d        D             // when call is nil
	self     [1]*D         // &d, for a Merger's Merge and Split of d alone
	call     *Call
	err      error // the error of a decision that was not sent
}

// pool holds the answered pendings of a Runner and its Batcher: a pending
// on the heap carries a caller's decision, which passing through the Merger
// would otherwise move there on every call.
type pool[D any] struct{ sync.Pool }

func newPool[D any]() *pool[D] {
	return &pool[D]{sync.Pool{New: func() any { return &pending[D]{done: make(chan struct{}, 1)} }}}
}

// get returns a pending holding the decision d (nil: none).
func (pl *pool[D]) get(d *D) *pending[D] {
	p := pl.Get().(*pending[D])
	p.call, p.err = nil, nil
	if d != nil {
		p.d = *d
		p.self[0] = &p.d
	}
	return p
}

// put returns an answered pending.
func (pl *pool[D]) put(p *pending[D]) {
	var zero D
	p.d, p.call = zero, nil
	pl.Put(p)
}

// timers hold the stopped timers callers wait with: a timer per call, not a
// context per call.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

func (p *pending[D]) answer() {
	if p.state.CompareAndSwap(waiting, answered) {
		p.done <- struct{}{}
	}
}

// newBatcher starts loops goroutines that send the calls of c's callers in
// pipelines, each call waiting at most timeout. m merges the decisions
// (Decide) of one class and group (see Router); nil for a caller that sends
// Calls only. closed is the error of a call made or still waiting after
// Close.
func newBatcher[D any](c Client, loops int, timeout time.Duration, m Merger[D], pl *pool[D], closed error) *Batcher[D] {
	b := &Batcher[D]{client: c, timeout: timeout, merger: m, pool: pl, closed: closed, bounded: BoundByContext(c), group: GroupOf(c), ch: make(chan *pending[D], maxBatch), quit: make(chan struct{}), back: make(chan struct{}, 1)}
	b.wg.Add(loops)
	for i := 0; i < loops; i++ {
		go b.loop()
	}
	return b
}

// Decide sends the decision d with the next pipeline, merged with the
// others of its class and group, and writes the Merger's answer into d. It
// returns the error of a decision that was not answered: the caller gave up
// (ctx, or the timeout), or the Batcher was closed.
func (b *Batcher[D]) Decide(ctx context.Context, d *D) error {
	p := b.pool.get(d)
	if err := b.wait(ctx, p); err != nil {
		return err
	}
	err := p.err
	*d = p.d
	b.pool.put(p)
	return err
}

// Run sends c with the next pipeline; c.Reply (or c.Values) or c.Err holds
// the outcome. It returns the error of a call that was not answered: the
// caller gave up (ctx, or the timeout), or the Batcher was closed.
func (b *Batcher[D]) Run(ctx context.Context, c *Call) error {
	p := b.pool.get(nil)
	p.call = c
	if err := b.wait(ctx, p); err != nil {
		return err
	}
	b.pool.put(p)
	return nil
}

// wait queues p and waits for its answer, for ctx, or for the store's timeout,
// whichever comes first. A caller that gives up abandons p: a loop that has
// not sent it yet drops it, so a caller told the store is unavailable is not
// charged later for a call that was still waiting to be sent; a pipeline
// already on its way may still reach the server. After Close it returns
// the closed error at once, and a call still waiting when the loops stopped is
// answered the closed error, never sent.
//
// With a client that ends its calls by their context's deadline (bounded)
// the caller waits for its answer alone, without a timer or its context: a
// loop that gathers a call whose context has ended or whose deadline has
// passed answers it that error (ctx.Err(), context.DeadlineExceeded)
// without sending it, and a pipeline ends by the latest deadline of its
// calls (all within the gathering of one batch of each other). A caller
// whose context ends while its call is on its way gets the call's outcome
// when the pipeline comes back, by that deadline.
func (b *Batcher[D]) wait(ctx context.Context, p *pending[D]) error {
	p.state.Store(waiting)
	p.deadline = time.Now().Add(b.timeout)
	// expired fires at the store's timeout; not needed when ctx ends first
	// (an Envoy's call carries its own, shorter, timeout) or the loops
	// keep the deadline (bounded).
	p.ctx = ctx
	defer func() { p.ctx = nil }()
	var expired <-chan time.Time
	if d, ok := ctx.Deadline(); ok && !d.After(p.deadline) {
		p.deadline = d
	} else if !b.bounded {
		t := timers.Get().(*time.Timer)
		t.Reset(b.timeout)
		defer func() {
			t.Stop()
			timers.Put(t)
		}()
		expired = t.C
	}
	select {
	case <-b.quit:
		return b.closed
	default:
	}
	select {
	case b.ch <- p: // the queue has room: no other channel is locked
	default:
		if expired == nil {
			// The queue is full: wait for room, but not past the deadline.
			t := time.NewTimer(time.Until(p.deadline))
			defer t.Stop()
			expired = t.C
		}
		select {
		case b.ch <- p:
		case <-b.quit:
			return b.closed
		case <-ctx.Done():
			return ctx.Err()
		case <-expired:
			return context.DeadlineExceeded
		}
	}
	select {
	case <-b.quit:
		// Close may have drained the queue before p came into it: drain
		// it again, so p is answered (by this or by whoever took it).
		b.drain()
	default:
	}
	if b.bounded {
		<-p.done
		return nil
	}
	var err error
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = context.DeadlineExceeded
	}
	if p.state.CompareAndSwap(waiting, abandoned) {
		return err
	}
	<-p.done // the answer came in time after all
	return nil
}

func (b *Batcher[D]) loop() {
	defer b.wg.Done()
	batch := make([]*pending[D], 0, maxBatch)
	for {
		b.gather.Lock()
		var ok bool
		batch, ok = b.next(batch[:0])
		b.gather.Unlock()
		if !ok {
			return
		}
		live := batch[:0]
		now := time.Now()
		for _, p := range batch {
			switch {
			case p.state.Load() != waiting:
			case b.bounded && p.ctx.Err() != nil:
				b.answerErr(p, p.ctx.Err())
			case b.bounded && !now.Before(p.deadline):
				b.answerErr(p, context.DeadlineExceeded)
			default:
				live = append(live, p)
			}
		}
		batch = live
		if len(batch) == 0 {
			b.done()
			continue
		}
		// Nor may the pipeline wait (for a connection, a dial, a retry) past
		// the moment its last caller gives up, and then send.
		var deadline time.Time
		for _, p := range batch {
			if p.deadline.After(deadline) {
				deadline = p.deadline
			}
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		b.shared.Store(len(batch) > 1)
		b.send(ctx, batch)
		b.done()
		cancel()
	}
}

// next gathers the next batch into batch: the first call to come and those
// behind it, and, while a pipeline or an inline call is on its way, those
// that come until it is back or the batch holds ShareBatch calls. The batch
// counts in active from its first call: the caller sends it, then calls
// done. next returns false once the Batcher is closed, having answered the
// closed error to the calls it had gathered.
func (b *Batcher[D]) next(batch []*pending[D]) ([]*pending[D], bool) {
	select {
	case <-b.quit:
		return batch, false // not another batch after close, even with calls waiting
	default:
	}
	select {
	case p := <-b.ch:
		batch = append(batch, p)
	case <-b.quit:
		return batch, false
	}
	b.active.Add(1)
	batch = b.drainInto(batch)
	for len(batch) < ShareBatch && b.active.Load() > 1 {
		select {
		case p := <-b.ch:
			batch = b.drainInto(append(batch, p))
		case <-b.back:
		case <-b.quit:
			for _, p := range batch {
				b.refuse(p)
			}
			b.done()
			return batch[:0], false
		}
	}
	if len(batch) < ShareBatch {
		// The batch goes now, but first the goroutines ready to run (the
		// callers a reply just woke, under load) may join it.
		runtime.Gosched()
		batch = b.drainInto(batch)
	}
	return batch, true
}

// drainInto adds to batch the calls waiting in the queue, up to maxBatch.
func (b *Batcher[D]) drainInto(batch []*pending[D]) []*pending[D] {
	for len(batch) < maxBatch {
		select {
		case p := <-b.ch:
			batch = append(batch, p)
		default:
			return batch
		}
	}
	return batch
}

// send runs the calls in one pipeline, the decisions merged per class and
// group (the Merger's): the server's cost per script (calling it, reading
// TIME, defining the helpers, reading each limit) is then paid once for
// all of them.
func (b *Batcher[D]) send(ctx context.Context, batch []*pending[D]) {
	type group struct {
		group uint64 // the keys' group (Router.Group)
		class int64
		alone bool // the key's group is unknown: merged with none
		ds    []*D
		call  *Call
	}
	var groups []*group
	calls := make([]*Call, 0, len(batch))
	for _, p := range batch {
		if p.call != nil {
			calls = append(calls, p.call)
			continue
		}
		key, class := b.merger.Class(&p.d)
		id, ok := b.group(key)
		var g *group
		if ok {
			for _, x := range groups {
				if x.group == id && x.class == class && !x.alone {
					g = x
					break
				}
			}
		}
		if g == nil {
			g = &group{group: id, class: class, alone: !ok}
			groups = append(groups, g)
		}
		g.ds = append(g.ds, &p.d)
	}
	for _, g := range groups {
		g.call = b.merger.Merge(g.ds)
		calls = append(calls, g.call)
	}
	b.client.Run(ctx, calls)
	for _, g := range groups {
		b.merger.Split(g.call, g.ds)
	}
	for _, p := range batch {
		p.answer()
	}
}

// Close stops the loops and answers the closed error to the calls waiting to be
// sent, at once; a loop sending a pipeline ends it first (its callers get
// its answer, or their timeout).
func (b *Batcher[D]) Close() {
	b.once.Do(func() {
		close(b.quit)
		b.drain()
		b.wg.Wait()
		b.drain() // calls queued while the loops stopped
	})
}

// drain answers the closed error to the calls waiting in the queue.
func (b *Batcher[D]) drain() {
	for {
		select {
		case p := <-b.ch:
			b.refuse(p)
		default:
			return
		}
	}
}

// refuse answers p the closed error, unless its caller gave up.
func (b *Batcher[D]) refuse(p *pending[D]) { b.answerErr(p, b.closed) }

// answerErr answers p, not sent, the error err, unless its caller gave up.
func (b *Batcher[D]) answerErr(p *pending[D], err error) {
	if !p.state.CompareAndSwap(waiting, answered) {
		return
	}
	if p.call != nil {
		p.call.Err = err
	} else {
		p.err = err
	}
	p.done <- struct{}{}
}
