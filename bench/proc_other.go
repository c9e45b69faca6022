//go:build !linux

package bench

import (
	"os/exec"
	"syscall"
)

// sysProcAttr returns nil: without Linux's parent death signal the server is
// stopped by Stop only; it stays in the caller's process group, so Ctrl-C
// reaches it too.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }

// StartProcess starts cmd; without Linux's parent death signal it is stopped
// by its caller only.
func StartProcess(cmd *exec.Cmd) error { return cmd.Start() }
