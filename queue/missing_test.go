package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
)

// TestRedisJobDataMissing: a job whose data entry is gone (deleted, evicted)
// is not delivered with an empty payload but as an error naming the job;
// the job stays in flight, comes back after its visibility timeout with the
// same error, and Ack of the error's job drops it for good. An empty
// payload pushed as such is still delivered.
func TestRedisJobDataMissing(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client()
	clk := newFakeClock()
	q, err := NewRedis(c, queueName(t), leaky(10, time.Second, 9), WithClock(clk), WithVisibilityTimeout(time.Second), WithPollInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lost, err := q.Push(ctx, []byte("lost"))
	if err != nil || !lost.Accepted {
		t.Fatalf("push: %+v, %v", lost, err)
	}
	if _, err := q.Push(ctx, []byte{}); err != nil {
		t.Fatal(err)
	}
	if err := c.HDel(ctx, q.Keys()[2], lost.ID).Err(); err != nil {
		t.Fatal(err)
	}

	missing := func(job *Job, err error, attempt int) *Job {
		t.Helper()
		var dm *DataMissingError
		if job != nil || !errors.Is(err, ErrJobDataMissing) || !errors.As(err, &dm) {
			t.Fatalf("pop of a job without data: %+v, %v; want ErrJobDataMissing", job, err)
		}
		if dm.Job.ID != lost.ID || dm.Job.Attempt != attempt || dm.Job.Payload != nil || !strings.Contains(err.Error(), lost.ID) {
			t.Fatalf("error %q holds %+v; want job %s, attempt %d, no payload", err, dm.Job, lost.ID, attempt)
		}
		return dm.Job
	}
	job, _, err := q.TryPop(ctx)
	missing(job, err, 1)
	if n, err := q.Len(ctx); err != nil || n != 2 {
		t.Fatalf("Len = %d, %v; want 2: the job without data is still held", n, err)
	}
	clk.at(100 * time.Millisecond)
	empty, _, err := q.TryPop(ctx)
	if err != nil || empty == nil || empty.Payload == nil || len(empty.Payload) != 0 {
		t.Fatalf("the job pushed empty: %+v, %v", empty, err)
	}
	if err := q.Ack(ctx, empty); err != nil {
		t.Fatal(err)
	}
	// Past its visibility timeout it comes back, through Pop too.
	clk.at(time.Second)
	job, err = q.Pop(ctx)
	dropped := missing(job, err, 2)
	if err := q.Ack(ctx, dropped); err != nil {
		t.Fatalf("Ack of the job without data: %v", err)
	}
	if n, err := q.Len(ctx); err != nil || n != 0 {
		t.Fatalf("Len = %d, %v after the Ack; want 0", n, err)
	}
	clk.at(10 * time.Second)
	if job, wait, err := q.TryPop(ctx); job != nil || wait >= 0 || err != nil {
		t.Fatalf("after the Ack: %+v, %v, %v; want an empty queue", job, wait, err)
	}
}

// TestAckNil: Ack(nil) is an error, not a panic, on both queues.
func TestAckNil(t *testing.T) {
	t.Parallel()
	m, err := NewMemory(leaky(10, time.Second, 9))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRedis(redistest.Shared(t).Client(), queueName(t), leaky(10, time.Second, 9))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []Queue{m, r} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%T.Ack(nil) panicked: %v", q, p)
				}
			}()
			if err := q.Ack(context.Background(), nil); !errors.Is(err, ErrNilJob) {
				t.Errorf("%T.Ack(nil) = %v, want ErrNilJob", q, err)
			}
		}()
	}
}
