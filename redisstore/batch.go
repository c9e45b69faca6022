package redisstore

import (
	"context"
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
	client  Client
	timeout time.Duration
	ch      chan *pending
	quit    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

type pending struct {
	ctx  context.Context // the caller's: once done, the call is not sent
	c    *Call
	done chan struct{}
}

func newBatcher(c Client, loops int, timeout time.Duration) *batcher {
	b := &batcher{client: c, timeout: timeout, ch: make(chan *pending, maxBatch), quit: make(chan struct{})}
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
		b.client.Run(ctx, calls)
		cancel()
		for _, p := range batch {
			close(p.done)
		}
	}
}

func (b *batcher) close() {
	b.once.Do(func() {
		close(b.quit)
		b.wg.Wait()
	})
}
