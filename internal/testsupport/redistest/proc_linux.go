//go:build linux

package redistest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// sysProcAttr makes the kernel SIGKILL redis-server when its parent dies, so
// a crashed, timed-out or killed test binary leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// On Linux the "parent" of Pdeathsig is the OS thread that forked the child,
// not the process: if that thread exits (the Go runtime ends threads whose
// goroutine exits while locked with runtime.LockOSThread), the child would be
// killed early. So all processes are forked from one goroutine that is locked
// to its thread and never exits.

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnRequest
)

func spawner() {
	runtime.LockOSThread() // never unlocked: this thread lives as long as the process
	for req := range spawnCh {
		req.done <- req.cmd.Start()
	}
}

func startCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnRequest)
		go spawner()
	})
	req := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	spawnCh <- req
	return <-req.done
}

func killCmd(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
