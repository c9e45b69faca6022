package fastclock

import (
	"testing"
	"time"
)

var (
	sinkInt  int64
	sinkTime time.Time
	sinkDur  time.Duration
)

func BenchmarkMicros(b *testing.B) {
	settle(b, &std, true)
	b.ReportAllocs()
	var s int64
	for b.Loop() {
		s += Micros()
	}
	sinkInt = s
	b.Logf("mode %s", Mode())
}

func BenchmarkMicrosParallel(b *testing.B) {
	settle(b, &std, true)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var s int64
		for pb.Next() {
			s += Micros()
		}
		sinkInt = s
	})
}

// BenchmarkMicrosMonotonic is Micros in monotonic mode, the fallback.
func BenchmarkMicrosMonotonic(b *testing.B) {
	c := newTestClock(monotonicOnly, reanchorPeriod, minCalibration)
	b.ReportAllocs()
	var s int64
	for b.Loop() {
		s += c.now()
	}
	sinkInt = s
}

func BenchmarkTimeNow(b *testing.B) {
	b.ReportAllocs()
	var t time.Time
	for b.Loop() {
		t = time.Now()
	}
	sinkTime = t
}

func BenchmarkTimeNowUnixMicro(b *testing.B) {
	b.ReportAllocs()
	var s int64
	for b.Loop() {
		s += time.Now().UnixMicro()
	}
	sinkInt = s
}

func BenchmarkNanotime(b *testing.B) {
	b.ReportAllocs()
	var s int64
	for b.Loop() {
		s += nanotime()
	}
	sinkInt = s
}

// BenchmarkTimeSince is the alternative to nanotime for the slow path.
func BenchmarkTimeSince(b *testing.B) {
	start := time.Now()
	b.ReportAllocs()
	var s time.Duration
	for b.Loop() {
		s += time.Since(start)
	}
	sinkDur = s
}

func BenchmarkRDTSC(b *testing.B) {
	if !tscArch {
		b.Skip("no TSC")
	}
	b.ReportAllocs()
	var s uint64
	for b.Loop() {
		s += rdtsc()
	}
	sinkInt = int64(s)
}
