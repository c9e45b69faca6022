//go:build !linux

package fastclock

// tscTrusted reports whether the TSC can be trusted as a clock. Only Linux is
// asked (through /proc and /sys); elsewhere the answer is no, and the clock
// runs in monotonic mode.
func tscTrusted() bool { return false }
