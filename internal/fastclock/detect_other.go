//go:build !linux

package fastclock

// counterStatus reports what the kernel says of the TSC (see the Linux
// version). Only Linux is asked (through /proc and /sys); elsewhere the
// answer is nothing, and the clock runs in monotonic mode.
func counterStatus() (invariant, kernelClock bool) { return false, false }
