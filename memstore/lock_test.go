package memstore

import (
	"runtime"
	"sync"
	"testing"
)

// TestEntryLockExcludes: goroutines that add to a plain counter under one
// entryLock, more of them than Ps so that holders are descheduled while
// others wait, lose no addition, and each sees the others' additions.
func TestEntryLockExcludes(t *testing.T) {
	var l entryLock
	var n, seen int64
	const goroutines, each = 16, 20_000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				l.Lock()
				before := n
				n++
				if i%1000 == 0 {
					runtime.Gosched() // yield while holding it
				}
				if n != before+1 {
					seen++
				}
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	if n != goroutines*each || seen != 0 {
		t.Fatalf("counter %d, want %d; %d additions seen changed by another holder", n, goroutines*each, seen)
	}
}
