package redistest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	// serverBinary is the program started by this package, looked up on PATH.
	serverBinary = "redis-server"

	// startTimeout bounds how long one redis-server may take to answer PING.
	startTimeout = 10 * time.Second

	// stopTimeout bounds how long a killed redis-server may take to exit.
	stopTimeout = 10 * time.Second

	// portAttempts is how many fresh ports are tried when a port picked as
	// free turns out to be taken by the time redis-server binds it.
	portAttempts = 5

	// probeTimeout is the dial and I/O timeout of readiness probes and
	// cluster set-up commands.
	probeTimeout = time.Second
)

// errAddrInUse reports that redis-server exited because it could not bind
// one of its ports.
var errAddrInUse = errors.New("address already in use")

// procConfig describes one redis-server process.
type procConfig struct {
	port     int
	busPort  int    // cluster bus port; 0 unless cluster mode
	dir      string // working directory (--dir); must exist
	logFile  string // redis-server log file, appended to
	sentinel string // Sentinel mode: its configuration file (written to by Sentinel); "" for a server
	extra    []string
	// With tls set, the server serves TLS on tlsPort too (port stays
	// plain, for the harness); tlsBus and tlsReplication put a cluster's
	// bus and a replica's link on TLS.
	tls                    *TLS
	tlsPort                int
	tlsBus, tlsReplication bool
}

func (c procConfig) addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))
}

func (c procConfig) args() []string {
	var args []string
	if c.sentinel != "" {
		args = []string{c.sentinel, "--sentinel"}
	}
	args = append(args,
		"--port", strconv.Itoa(c.port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", c.dir,
		"--logfile", c.logFile,
		"--databases", "16",
		// DEBUG SLEEP and friends are handy for fault tests.
		"--enable-debug-command", "local",
	)
	if c.busPort != 0 {
		args = append(args, "--cluster-port", strconv.Itoa(c.busPort))
	}
	if c.tls != nil {
		args = append(args, c.tls.serverArgs(c.tlsPort, c.tlsBus, c.tlsReplication)...)
	}
	return append(args, c.extra...)
}

// process is one running redis-server.
type process struct {
	cfg     procConfig
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited and been reaped
	waitErr error         // valid once done is closed
}

// launch starts redis-server with cfg and waits until it answers PING.
// It returns an error wrapping errAddrInUse if redis-server could not bind
// its port(s). On any error the process has been killed and reaped.
func launch(cfg procConfig) (*process, error) {
	bin, err := exec.LookPath(serverBinary)
	if err != nil {
		return nil, err
	}
	// Redis must come up empty: remove persistence files a test may have
	// produced with SAVE/BGSAVE/BGREWRITEAOF during an earlier run.
	_ = os.Remove(filepath.Join(cfg.dir, "dump.rdb"))
	_ = os.RemoveAll(filepath.Join(cfg.dir, "appendonlydir"))

	var logStart int64
	if fi, err := os.Stat(cfg.logFile); err == nil {
		logStart = fi.Size()
	}

	// redis-server writes to --logfile once configured, but configuration
	// errors go to stderr before that: send both to the same file.
	logf, err := os.OpenFile(cfg.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(bin, cfg.args()...)
	cmd.Dir = cfg.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := startCmd(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cfg: cfg, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()

	addr := cfg.addr()
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for {
		select {
		case <-p.done:
			log := readLogFrom(cfg.logFile, logStart)
			err := fmt.Errorf("redis-server on %s exited during start-up (%v); log:\n%s", addr, p.waitErr, log)
			if strings.Contains(log, "Address already in use") {
				err = fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return nil, err
		default:
		}
		err := probe(addr, p.pid())
		if err == nil {
			return p, nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within %v (last error: %v); log:\n%s",
				addr, startTimeout, lastErr, readLogFrom(cfg.logFile, logStart))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// probe checks that the redis-server with process id pid answers PING on
// addr. Checking the process id matters: if another redis-server holds the
// port, it answers while ours is still failing to bind it.
func probe(addr string, pid int) error {
	reply, err := commandString(addr, probeTimeout, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("PING replied %q", reply)
	}
	info, err := commandString(addr, probeTimeout, "INFO", "server")
	if err != nil {
		return err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("%s is served by another redis-server (pid %s, ours is %d)", addr, v, pid)
			}
			return nil
		}
	}
	return fmt.Errorf("INFO server has no process_id")
}

// stop kills the process and waits for it to exit. Open connections to it
// fail (connection reset / EOF) and its port is released once stop returns.
func (p *process) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	killCmd(p.cmd)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("redis-server pid %d did not exit within %v of SIGKILL", p.cmd.Process.Pid, stopTimeout)
	}
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// clientPort is the port a cluster node or a Sentinel's server announces
// to clients, and a Sentinel's clients dial: its TLS port when the cluster
// bus or the replication runs on TLS.
func (p *process) clientPort() int {
	if p.cfg.tls != nil && (p.cfg.tlsBus || p.cfg.tlsReplication) {
		return p.cfg.tlsPort
	}
	return p.cfg.port
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago. Another process may take them before redis-server binds them; callers
// retry on errAddrInUse.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Keep the listener open until all n ports are picked so that they
		// are distinct.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// readLogFrom returns the tail of the log file starting at offset, at most
// 4 KiB, for error messages.
func readLogFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	const maxTail = 4 << 10
	if fi, err := f.Stat(); err == nil && fi.Size()-offset > maxTail {
		offset = fi.Size() - maxTail
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
