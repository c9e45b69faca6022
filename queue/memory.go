package queue

import (
	"container/heap"
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/fastclock"
)

// Memory is a Queue in the memory of one process: its workers share the
// rate, other processes do not see it. It makes the same decisions as Redis,
// step for step; scripts/pop.lua mirrors its pop.
type Memory struct {
	p   algo.Params
	vis int64 // µs
	now func() int64
	w   *waiter

	mu       sync.Mutex
	sched    schedule
	seq      int64   // of the last id, as in the Redis queue's state
	due      jobHeap // by slot
	inflight jobHeap // by visibility deadline
	jobs     map[string]*entry
}

var _ Queue = (*Memory)(nil)

// NewMemory returns an empty queue releasing jobs at limit, which must be a
// valid LeakyBucket limit: Rate jobs per Period, with up to Burst jobs
// waiting for their slot behind the next one.
func NewMemory(limit sluice.Limit, opts ...Option) (*Memory, error) {
	p, c, err := newConfig(limit, opts)
	if err != nil {
		return nil, err
	}
	m := &Memory{
		p:     p,
		vis:   c.visibility.Microseconds(),
		now:   fastclock.Micros,
		w:     newWaiter(c),
		sched: freshSchedule(),
		jobs:  make(map[string]*entry),
	}
	if c.clock != nil {
		m.now = func() int64 { return c.clock.Now().UnixMicro() }
	}
	return m, nil
}

// entry is one job the queue holds, in due or in inflight.
type entry struct {
	id       string
	payload  []byte
	slot     int64
	attempt  int
	key      int64 // its heap's order: slot in due, deadline in inflight
	inflight bool
	index    int
}

// Push schedules payload at the next free slot, or refuses it when that slot
// is more than Burst intervals away. The queue keeps its own copy of payload.
func (m *Memory) Push(ctx context.Context, payload []byte) (PushResult, error) {
	if err := ctx.Err(); err != nil {
		return PushResult{}, err
	}
	now, err := checkTime(m.now())
	if err != nil {
		return PushResult{}, err
	}
	m.mu.Lock()
	slot, retry := m.sched.take(&m.p, now, false)
	if retry > 0 {
		m.mu.Unlock()
		return PushResult{RetryAfter: time.Duration(retry) * time.Microsecond}, nil
	}
	m.seq++
	e := &entry{id: strconv.FormatInt(now, 10) + "-" + strconv.FormatInt(m.seq, 10), payload: append([]byte(nil), payload...), slot: slot, key: slot}
	m.jobs[e.id] = e
	heap.Push(&m.due, e)
	m.mu.Unlock()
	m.w.ring()
	return PushResult{Accepted: true, ID: e.id, ReleaseAt: micros(slot)}, nil
}

// Pop blocks until a job may be released and returns it; see Queue.
func (m *Memory) Pop(ctx context.Context) (*Job, error) { return m.w.pop(ctx, m.claim) }

// TryPop returns a job whose release time has come, or nil and the wait
// after which one may be; see Queue.
func (m *Memory) TryPop(ctx context.Context) (*Job, time.Duration, error) {
	return m.claim(ctx, 0)
}

func (m *Memory) claim(ctx context.Context, lead time.Duration) (*Job, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	now, err := checkTime(m.now())
	if err != nil {
		return nil, 0, err
	}
	job, wait := m.pop(now, lead.Microseconds())
	return job, time.Duration(wait) * time.Microsecond, nil
}

// pop is one look at the queue at now: jobs whose visibility deadline has
// passed go back to due with a fresh slot; then the earliest due job is
// released if its release instant is at most lead away. It returns the job
// and the wait until its release instant, or no job and the wait until one
// may be released (-1: the queue holds no job).
func (m *Memory) pop(now, lead int64) (*Job, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.inflight) > 0 && m.inflight[0].key <= now {
		e := heap.Pop(&m.inflight).(*entry)
		e.slot, _ = m.sched.take(&m.p, now, true)
		e.key, e.inflight = e.slot, false
		heap.Push(&m.due, e)
	}
	if len(m.due) == 0 {
		if len(m.inflight) == 0 {
			return nil, -1
		}
		return nil, m.inflight[0].key - now
	}
	e := m.due[0]
	at := max(m.sched.earliest(&m.p, e.slot), now)
	if at > now+lead {
		return nil, at - now - lead
	}
	heap.Pop(&m.due)
	e.attempt++
	m.sched.last = at
	e.key, e.inflight = at+m.vis, true
	heap.Push(&m.inflight, e)
	return &Job{
		ID:          e.id,
		Payload:     append([]byte(nil), e.payload...),
		Attempt:     e.attempt,
		ReleaseAt:   micros(e.slot),
		DeliveredAt: micros(at),
		Deadline:    micros(e.key),
	}, at - now
}

// Ack removes job for good, whether it is still in flight or already back
// in the queue for redelivery.
func (m *Memory) Ack(ctx context.Context, job *Job) error {
	if err := checkAck(job); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.jobs[job.ID]
	if !ok {
		return ErrUnknownJob
	}
	delete(m.jobs, job.ID)
	if e.inflight {
		heap.Remove(&m.inflight, e.index)
	} else {
		heap.Remove(&m.due, e.index)
	}
	return nil
}

// Len returns the number of jobs held: waiting, and delivered but not
// acknowledged.
func (m *Memory) Len(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.jobs), nil
}

// jobHeap orders entries by key, then by id as bytes, as a Redis ZSET does
// (ties come only from slots rounded to the same µs).
type jobHeap []*entry

func (h jobHeap) Len() int { return len(h) }
func (h jobHeap) Less(i, j int) bool {
	return h[i].key < h[j].key || h[i].key == h[j].key && h[i].id < h[j].id
}
func (h jobHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *jobHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *jobHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
