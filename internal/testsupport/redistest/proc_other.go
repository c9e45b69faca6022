//go:build !linux

package redistest

import (
	"os/exec"
	"syscall"
)

// sysProcAttr returns nil: without Linux's parent death signal, processes are
// stopped only by test cleanups and Main. redis-server stays in the test
// binary's process group, so an interrupt from the terminal (Ctrl-C) reaches
// it as well.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }

func killCmd(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
