package redistest

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// A port already served by another redis-server must be reported as
// errAddrInUse (so that callers pick another port), not mistaken for ours.
func TestLaunchPortTakenByRedis(t *testing.T) {
	Require(t)
	t.Parallel()
	dir := t.TempDir()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := launch(procConfig{port: ports[0], dir: dir, logFile: filepath.Join(dir, "a.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	q, err := launch(procConfig{port: ports[0], dir: dir, logFile: filepath.Join(dir, "b.log")})
	if err == nil {
		q.stop()
		t.Fatal("second redis-server on the same port started")
	}
	if !errors.Is(err, errAddrInUse) {
		t.Fatalf("err = %v, want errAddrInUse", err)
	}
}

// A taken cluster bus port is errAddrInUse too.
func TestLaunchBusPortTaken(t *testing.T) {
	Require(t)
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	q, err := launch(procConfig{
		port: ports[0], busPort: l.Addr().(*net.TCPAddr).Port, dir: dir,
		logFile: filepath.Join(dir, "c.log"),
		extra:   []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf")},
	})
	if err == nil {
		q.stop()
		t.Fatal("redis-server started with its bus port taken")
	}
	if !errors.Is(err, errAddrInUse) {
		t.Fatalf("err = %v, want errAddrInUse", err)
	}
}

// Configuration errors, written to stderr before the log file is set up,
// show in the error.
func TestLaunchBadConfig(t *testing.T) {
	Require(t)
	t.Parallel()
	dir := t.TempDir()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	q, err := launch(procConfig{port: ports[0], dir: dir, logFile: filepath.Join(dir, "d.log"),
		extra: []string{"--no-such-option", "x"}})
	if err == nil {
		q.stop()
		t.Fatal("redis-server started with a bad option")
	}
	if errors.Is(err, errAddrInUse) || !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("err = %v, want the config error", err)
	}
}
