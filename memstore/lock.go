package memstore

import (
	"runtime"
	"sync/atomic"
)

// entryLock is an entry's lock: a word that Lock sets from 0 to 1 with a
// compare-and-swap, and Unlock sets back to 0 with a plain store where the
// processor orders stores (amd64: every store releases what came before
// it; unlock_amd64.s), an atomic store elsewhere and under the race
// detector. A decision thus makes one atomic instruction, not two. A
// waiter spins a little, then yields its P until the word is 0: the
// critical sections are a step's arithmetic, shorter than parking a
// goroutine and waking it (a sync.Mutex's way) would take.
type entryLock struct {
	v uint32
}

// lockSpins is how many times a waiter looks at the word before it yields.
const lockSpins = 32

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
		if i%lockSpins == 0 {
			runtime.Gosched()
		}
	}
}

// Unlock releases l, which the caller holds.
func (l *entryLock) Unlock() { unlock(&l.v) }
