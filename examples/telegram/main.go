// Command telegram is the Telegram sender: Telegram allows about 30 messages a
// second in all and about one a second to any one chat, and a send must pass
// both. A refused send is not an error: the job is put back with a delay of
// RetryAfter, and the worker moves on.
//
// It decides with Limiter.TakeAll rather than waiting in an
// httplimit.Transport: a worker that waited for one busy chat would hold up
// every other chat, while a refusal put back costs nothing. The HTTP client
// that talks to the Bot API can still send through an httplimit.Transport
// with no policies, so that a 429 with Retry-After from Telegram holds every
// worker sharing the store (see examples/partnerapi).
//
//	go run ./examples/telegram
package main

import (
	"container/heap"
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

// The limits every send must pass.
var (
	global  = sluice.PerSecond(30)
	perChat = sluice.PerSecond(1)
)

// Message is one job: a text for a chat.
type Message struct {
	Chat int
	Text string
	Due  time.Time // not before
}

// Sender sends messages through the two limits, re-enqueueing refused ones.
type Sender struct {
	lim   *sluice.Limiter
	queue jobs
	send  func(Message, time.Time)
	// Deferred counts the re-enqueues.
	Deferred int
}

// NewSender returns a sender over lim that calls send for each message it may
// send now.
func NewSender(lim *sluice.Limiter, send func(Message, time.Time)) *Sender {
	return &Sender{lim: lim, send: send}
}

// Enqueue adds a message.
func (s *Sender) Enqueue(m Message) { heap.Push(&s.queue, m) }

// Step sends or defers every message due at now and returns when the next
// one is due (zero when the queue is empty).
func (s *Sender) Step(ctx context.Context, now time.Time) (time.Time, error) {
	for len(s.queue) > 0 && !s.queue[0].Due.After(now) {
		m := heap.Pop(&s.queue).(Message)
		r, err := s.lim.TakeAll(ctx, []sluice.Part{
			{Key: fmt.Sprintf("chat:%d", m.Chat), Limit: perChat, Cost: 1}, // the narrow limit first
			{Key: "global", Limit: global, Cost: 1},
		}, nil)
		if err != nil {
			return time.Time{}, err
		}
		if !r.Allowed {
			// The worker's answer to a refusal: delay the job, don't fail it.
			m.Due = now.Add(r.RetryAfter)
			s.Deferred++
			heap.Push(&s.queue, m)
			continue
		}
		s.send(m, now)
	}
	if len(s.queue) == 0 {
		return time.Time{}, nil
	}
	return s.queue[0].Due, nil
}

// jobs is a min-heap of messages by due time.
type jobs []Message

func (j jobs) Len() int           { return len(j) }
func (j jobs) Less(a, b int) bool { return j[a].Due.Before(j[b].Due) }
func (j jobs) Swap(a, b int)      { j[a], j[b] = j[b], j[a] }
func (j *jobs) Push(x any)        { *j = append(*j, x.(Message)) }
func (j *jobs) Pop() any {
	old := *j
	m := old[len(old)-1]
	*j = old[:len(old)-1]
	return m
}

func main() {
	lim := sluice.New(memstore.New())
	start := time.Now()
	sent := 0
	s := NewSender(lim, func(m Message, at time.Time) {
		sent++
		if sent <= 3 || sent%20 == 0 {
			fmt.Printf("%6.3fs  chat %d: %s\n", at.Sub(start).Seconds(), m.Chat, m.Text)
		}
	})
	// A broadcast to 40 chats, and 5 messages in a row to chat 1.
	for c := 0; c < 40; c++ {
		s.Enqueue(Message{Chat: c, Text: "broadcast", Due: start})
	}
	for i := 0; i < 5; i++ {
		s.Enqueue(Message{Chat: 1, Text: fmt.Sprintf("reply %d", i), Due: start})
	}
	ctx := context.Background()
	for {
		next, err := s.Step(ctx, time.Now())
		if err != nil {
			panic(err)
		}
		if next.IsZero() {
			break
		}
		time.Sleep(time.Until(next))
	}
	fmt.Printf("sent %d messages in %.2fs, %d re-enqueues\n", sent, time.Since(start).Seconds(), s.Deferred)
}
