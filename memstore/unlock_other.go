//go:build !amd64 || race

package memstore

import "sync/atomic"

// unlock stores 0 at p atomically (a release).
func unlock(p *uint32) { atomic.StoreUint32(p, 0) }
