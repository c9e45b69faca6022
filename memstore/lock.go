package memstore

import (
	"runtime"
	"sync/atomic"
	"time"
)

// entryLock is an entry's lock: a word that Lock sets from 0 to 1 with a
// compare-and-swap, and Unlock sets back to 0 with a plain store where the
// processor orders stores (amd64: every store releases what came before
// it; unlock_amd64.s), an atomic store elsewhere and under the race
// detector. A decision thus makes one atomic instruction, not two. A
// waiter spins a little, then yields its P, then sleeps between looks at
// the word: the critical sections are a step's arithmetic, shorter than
// parking a goroutine and waking it (a sync.Mutex's way) would take, and a
// wait longer than a few yields means the holder is not running.
type entryLock struct {
	v uint32
}

// A waiter looks at the word lockSpins times, then yields its P between
// looks lockYields times, then sleeps lockSleep between looks: a holder
// that has not let go by then is not running (its thread was descheduled),
// and spinning or yielding would keep the CPU from it on a machine with
// more threads than CPUs.
const (
	lockSpins  = 32
	lockYields = 16
	lockSleep  = 20 * time.Microsecond
)

// Lock takes l, waiting for it if need be.
func (l *entryLock) Lock() {
	if !atomic.CompareAndSwapUint32(&l.v, 0, 1) {
		l.lockSlow()
	}
}

func (l *entryLock) lockSlow() {
	for i := 1; ; i++ {
		if atomic.LoadUint32(&l.v) == 0 && atomic.CompareAndSwapUint32(&l.v, 0, 1) {
			return
		}
		switch {
		case i < lockSpins:
		case i < lockSpins+lockYields:
			runtime.Gosched()
		default:
			time.Sleep(lockSleep)
		}
	}
}

// Unlock releases l, which the caller holds.
func (l *entryLock) Unlock() { unlock(&l.v) }
