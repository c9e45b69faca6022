package serve

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// GRPCMaxConnectionAge closes connections once they are that old (GOAWAY):
// the client reconnects and no call fails. Negative: never.
func TestMaxConnectionAge(t *testing.T) {
	for _, c := range []struct {
		name    string
		age     time.Duration
		atLeast int64
		atMost  int64
	}{
		{"150ms", 150 * time.Millisecond, 3, 1 << 20},
		{"never", -1, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cl := &countingListener{Listener: ln}
			ts := start(t, Options{GRPCListener: cl, GRPCMaxConnectionAge: c.age}, &fakeClock{t: t0})
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				ts.call(t, "any", desc("k=v")) // fails the test on any error
				time.Sleep(5 * time.Millisecond)
			}
			if n := cl.n.Load(); n < c.atLeast || n > c.atMost {
				t.Errorf("%d connections accepted in 1s, want %d to %d", n, c.atLeast, c.atMost)
			}
		})
	}
}
