// Package childproc runs copies of the test binary as child processes, for
// the tests that need several processes on one Redis (the multi-process load
// tests of redisstore and queue) or a process run another way (under
// GODEBUG=fips140=only).
//
// The parent starts a child with Start: the test binary again, running one
// test, with one environment variable that both marks it as a child and
// carries its configuration. That test reads the variable with Config (and
// skips itself when it is not set), prints ReadyLine with Ready once it is
// set up, then does its work, reading its start line from stdin (ReadLine)
// if the parent sends one, and printing what it saw on stdout. The parent
// waits with WaitReady, may Send lines and CloseInput, and reads the
// child's lines as they come (the onLine function of Start) or all at once
// when it is done (Output).
package childproc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// ReadyLine is the line a child prints (Ready) once it is set up.
const ReadyLine = "sluice-child: ready"

// Config returns the value of the environment variable env, and whether it
// is set (non-empty): whether this process is a child started with it.
func Config(env string) (string, bool) {
	v := os.Getenv(env)
	return v, v != ""
}

// Ready tells the parent this child is set up: it prints ReadyLine.
func Ready() { fmt.Println(ReadyLine) }

var stdin = sync.OnceValue(func() *bufio.Reader { return bufio.NewReader(os.Stdin) })

// ReadLine returns the next line the parent sent (Send), without its
// newline, or io.EOF once the parent closed the child's input.
func ReadLine() (string, error) {
	line, err := stdin().ReadString('\n')
	if err != nil && line == "" {
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// Child is a running child process.
type Child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan struct{} // closed when the child printed ReadyLine
	done  chan struct{} // closed when its stdout is read to the end
	mu    sync.Mutex
	out   strings.Builder // stdout but ReadyLine and the lines onLine took, and stderr
}

// Start runs the test binary's test named run (matched as ^run$) as a child
// process with env ("NAME=value" entries: one of them marks the child, see
// Config) added to its environment, -test.v (its t.Log lines and its
// verdict are in Output), and a -test.timeout of timeout (none when 0). Each line the child prints on stdout, but ReadyLine, goes
// to onLine when it is not nil, from one goroutine; the lines it does not
// take (it returns false) and stderr are kept for Output. A child still
// running when t ends is killed.
func Start(t testing.TB, run string, env []string, timeout time.Duration, onLine func(string) bool) *Child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-test.run=^" + run + "$", "-test.count=1", "-test.v"}
	if timeout > 0 {
		args = append(args, "-test.timeout="+timeout.String())
	}
	c := &Child{cmd: exec.Command(exe, args...), ready: make(chan struct{}), done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stderr = writerFunc(c.keep)
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		_ = c.cmd.Wait()
	})
	go c.scan(stdout, onLine)
	return c
}

func (c *Child) scan(stdout io.Reader, onLine func(string) bool) {
	defer close(c.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	ready := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == ReadyLine && !ready:
			ready = true
			close(c.ready)
		case onLine != nil && onLine(line):
		default:
			_, _ = c.keep([]byte(line + "\n"))
		}
	}
}

func (c *Child) keep(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// WaitReady waits until the child printed ReadyLine; it fails t when the
// child ends first or is not ready within d.
func (c *Child) WaitReady(t testing.TB, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-c.ready:
	case <-c.done:
		t.Fatalf("child process ended before it was ready: %v\n%s", c.cmd.Wait(), c.Output())
	case <-timer.C:
		t.Fatalf("child process not ready within %v:\n%s", d, c.Output())
	}
}

// Send writes line, and a newline, to the child's stdin.
func (c *Child) Send(line string) error {
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// CloseInput closes the child's stdin: its ReadLine then returns io.EOF.
func (c *Child) CloseInput() { _ = c.stdin.Close() }

// Done is closed once the child's stdout is read to the end (it exited, or
// closed it).
func (c *Child) Done() <-chan struct{} { return c.done }

// Wait waits for the child's output and its exit, and returns its exit
// error.
func (c *Child) Wait() error {
	<-c.done
	return c.cmd.Wait()
}

// Run runs the test named run as a child process with env (see Start) and
// no input, and returns what it printed and its exit error.
func Run(t testing.TB, run string, env ...string) (string, error) {
	t.Helper()
	c := Start(t, run, env, 0, nil)
	c.CloseInput()
	err := c.Wait()
	return c.Output(), err
}

// Kill ends the child at once.
func (c *Child) Kill() error { return c.cmd.Process.Kill() }

// Output returns what the child printed (stdout but ReadyLine and the lines
// onLine took, and stderr) so far.
func (c *Child) Output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}
