//go:build linux

package bench

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// sysProcAttr makes the kernel SIGKILL redis-server when its parent dies, so
// an interrupted benchmark leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// The "parent" of Pdeathsig is the OS thread that forked the child: servers
// are forked from one goroutine locked to a thread that never exits, so that
// the runtime retiring a thread does not kill them early.

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnRequest
)

func spawner() {
	runtime.LockOSThread() // never unlocked
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

// StartProcess starts cmd as the harness starts redis-server: on Linux the
// kernel kills it when the process that started it dies, so an interrupted
// benchmark leaves no server behind. It sets cmd.SysProcAttr.
func StartProcess(cmd *exec.Cmd) error {
	cmd.SysProcAttr = sysProcAttr()
	return startCmd(cmd)
}
