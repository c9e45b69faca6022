//go:build !amd64

package fastclock

// tscArch reports whether this architecture has a time-stamp counter that
// rdtsc can read. Without one the clock always runs in monotonic mode.
const tscArch = false

// rdtsc is never called when tscArch is false.
func rdtsc() uint64 { return 0 }

// rdtscOrdered is never called when tscArch is false.
func rdtscOrdered() uint64 { return 0 }
