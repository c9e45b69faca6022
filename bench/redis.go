package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisEnv names the environment variable that points the Redis benchmarks
// and tests at an existing server ("host:port") instead of a redis-server
// they start. That server must be dedicated to them: TestOneRoundTrip and
// cmd/compare -redis reset its command statistics (CONFIG RESETSTAT) and
// count every command it serves.
const RedisEnv = "SLUICE_BENCH_REDIS"

// Callers is the number of goroutines of the concurrent Redis workloads
// (BenchmarkRedisKeys10k64, the -64g variants of BenchmarkComposite).
const Callers = 64

// RedisOptions returns the go-redis options every Redis library is given:
// the same client for all, with a pool large enough for Callers goroutines
// each holding a connection.
func RedisOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:     addr,
		PoolSize: Callers,
		// CLIENT SETINFO does not exist before Redis 7.2.
		DisableIdentity: true,
		// Calls end by their context's deadline, as sluice's docs/stores.md
		// advises: the store's timeout then holds without a goroutine
		// per call.
		ContextTimeoutEnabled: true,
	}
}

// RedisServer is a redis-server the benchmarks run against: one this package
// started (Stop kills it) or, with RedisEnv set, an existing one.
type RedisServer struct {
	Addr     string
	External bool // from RedisEnv: Stop leaves it running
	cmd      *exec.Cmd
	dir      string
	done     chan struct{}
}

// ErrNoRedisServer is returned by StartRedis when RedisEnv is unset and
// redis-server is not on PATH.
var ErrNoRedisServer = errors.New("redis-server not found on PATH (and " + RedisEnv + " not set)")

// StartRedis returns the server named by RedisEnv if it is set, and otherwise
// starts one on a free port P of the loopback interface,
//
//	redis-server --port P --bind 127.0.0.1 --save '' --appendonly no
//
// with its working directory in a temporary directory, and waits until it
// answers PING. On Linux the server is killed when the process that started
// it dies.
func StartRedis() (*RedisServer, error) {
	if addr := os.Getenv(RedisEnv); addr != "" {
		if err := ping(addr, 0); err != nil {
			return nil, fmt.Errorf("%s=%s: %w", RedisEnv, addr, err)
		}
		return &RedisServer{Addr: addr, External: true}, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	dir, err := os.MkdirTemp("", "sluice-bench-redis-")
	if err != nil {
		return nil, err
	}
	for range 5 { // a port free a moment ago may be taken by the time redis binds it
		var s *RedisServer
		s, err = launch(bin, dir)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, err
}

var errAddrInUse = errors.New("address already in use")

func launch(bin, dir string) (*RedisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logFile := dir + "/redis.log"
	logf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--daemonize", "no", "--dir", dir)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := startCmd(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &RedisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.done:
			log, _ := os.ReadFile(logFile)
			err := fmt.Errorf("redis-server on %s exited during start-up; log:\n%s", s.Addr, log)
			if strings.Contains(string(log), "Address already in use") {
				err = fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return nil, err
		default:
		}
		// The pid check tells our server from another one that holds the port.
		err := ping(s.Addr, cmd.Process.Pid)
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("redis-server on %s did not answer within 10s: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping checks that addr answers PING and, if pid is not 0, that it is the
// redis-server with that process id.
func ping(addr string, pid int) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1, DialTimeout: time.Second, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return err
	}
	if pid == 0 {
		return nil
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	if v := infoField(info, "process_id"); v != strconv.Itoa(pid) {
		return fmt.Errorf("%s is served by another redis-server (pid %s, ours is %d)", addr, v, pid)
	}
	return nil
}

func infoField(info, name string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), name+":"); ok {
			return v
		}
	}
	return ""
}

// Pid returns the process id of a server StartRedis started, or 0 for an
// external one.
func (s *RedisServer) Pid() int {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Port returns the server's port.
func (s *RedisServer) Port() string {
	_, p, _ := net.SplitHostPort(s.Addr)
	return p
}

// Host returns the server's host.
func (s *RedisServer) Host() string {
	h, _, _ := net.SplitHostPort(s.Addr)
	return h
}

// Stop kills a server StartRedis started, waits for it to exit and removes
// its directory; an external server is left alone.
func (s *RedisServer) Stop() error {
	if s == nil || s.External {
		return nil
	}
	err := s.kill()
	if rmErr := os.RemoveAll(s.dir); err == nil {
		err = rmErr
	}
	return err
}

func (s *RedisServer) kill() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("redis-server pid %d did not exit within 10s of SIGKILL", s.cmd.Process.Pid)
	}
}
