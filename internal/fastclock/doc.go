// Package fastclock is a cheap wall clock in microseconds, for code that
// reads the time on every operation: the in-memory limiter store asks for the
// time on each decision, whose whole budget is a few tens of nanoseconds.
//
// Reading the CPU's time-stamp counter (RDTSC) costs several times less than
// time.Now or the runtime's monotonic clock (BenchmarkMicros against
// BenchmarkTimeNow measures it on a given machine). Micros is built on the
// counter where that is sound and on the monotonic clock elsewhere.
//
// # Guarantees
//
// Micros returns µs since the Unix epoch. It is anchored to the wall clock
// (time.Now) once, at package initialization, and then advances with the
// monotonic clock: it never goes backwards, and it does not follow steps of
// the wall clock, so it can drift from time.Now by as much as the wall clock
// has been stepped since the process started. It is safe for concurrent use
// and never allocates. Mode reports which source is in use.
//
// # TSC mode
//
// On linux/amd64, when the CPU has an invariant TSC (the constant_tsc and
// nonstop_tsc flags in /proc/cpuinfo) and the kernel keeps time with it (the
// current clocksource is tsc, which also means the kernel found the counters
// synchronized across CPUs), Micros reads the counter and converts ticks to
// µs with a 64-bit multiply and shift against an anchor: a (counter, time)
// pair and a rate, in an immutable struct behind an atomic pointer.
//
// The rate is measured against the runtime's monotonic clock, without
// blocking initialization: the clock starts in monotonic mode, and the first
// call to Micros at least 20 ms after initialization (longer if the readings
// were disturbed, until the rate is known to 10 ppm) measures the rate and
// switches to TSC mode. After that, the first call once an anchor has served
// for about a second re-anchors: it re-measures the rate over that second and
// puts the new anchor on the monotonic clock's time, so TSC time tracks the
// monotonic clock (and NTP's slewing of it) to within a few µs. A re-anchor
// never moves the output back: if TSC time had got ahead, the new anchor
// starts where the old one got to and runs slow, by at most 500 ppm, until
// the lead is gone. If the counter misbehaves (goes back, or changes rate by
// more than 1%), the clock falls back to monotonic mode for good.
//
// # Cached mode
//
// Where the CPU has an invariant TSC but the kernel keeps time with another
// clocksource (a VM on kvm-clock, a kernel told tsc=unstable), the counter
// is not trusted as a clock: its counters may not be synchronized across
// CPUs. Micros then reads the monotonic clock (as in monotonic mode below),
// but at most once a µs on each P (the scheduler's processor): each P keeps
// its last reading with the counter values between which it is surely the
// current µs, from just after the reading until, at the most a tick may
// take (the rate measured as in TSC mode, plus a margin), the µs ends, and
// returns it while the counter is in that range. A read of the monotonic
// clock costs a few times a read of the counter on such machines, and a
// busy P decides many times a µs.
//
// A reused reading is the µs the monotonic clock gives at the moment the
// counter is read, exactly, where the counters are synchronized (as the
// kernel's own paravirtual clocks assume). Where they are not, a reading a
// P took on one CPU and reuses on another can be behind by as much as the
// two counters differ; it is never ahead of the monotonic clock, since it
// was read before. The rate is measured again every second; a change of
// more than 1% ends cached mode for good.
//
// # Monotonic mode
//
// Elsewhere (other systems and architectures, no invariant TSC, or the
// environment variable SLUICE_FASTCLOCK=monotonic), Micros is the wall-clock
// time at initialization plus the runtime's monotonic clock since then, read
// through runtime.nanotime.
//
// Micros does not see the fake time of testing/synctest bubbles.
package fastclock
