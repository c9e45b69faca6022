//go:build !unix

package procs

import "time"

// ProcessCPU cannot read the process's CPU time here: false.
func ProcessCPU() (time.Duration, bool) { return 0, false }
