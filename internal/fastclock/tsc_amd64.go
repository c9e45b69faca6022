package fastclock

// tscArch reports whether this architecture has a time-stamp counter that
// rdtsc can read.
const tscArch = true

// rdtsc returns the time-stamp counter (RDTSC). It is not ordered with the
// instructions around it: the CPU may execute it a little early.
//
//go:noescape
func rdtsc() uint64

// rdtscOrdered is rdtsc behind an LFENCE, so it reads the counter only after
// every earlier instruction has completed. The slow path uses it to pair a
// counter reading tightly with a nanotime reading.
//
//go:noescape
func rdtscOrdered() uint64
