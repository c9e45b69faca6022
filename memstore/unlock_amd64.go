//go:build !race

package memstore

// unlock stores 0 at p with a MOV: on amd64 a store is never reordered
// with the loads and stores before it, so it releases the critical
// section without the locked instruction an atomic store is (XCHG).
//
//go:noescape
func unlock(p *uint32)
