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
func (b *batcher) run(ctx context.Context, c *Call) error {
	p := &pending{c: c, done: make(chan struct{})}
	select {
	case b.ch <- p:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
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
		calls = calls[:0]
		for _, p := range batch {
			calls = append(calls, p.c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
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
