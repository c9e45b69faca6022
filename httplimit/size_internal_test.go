package httplimit

import (
	"testing"
	"unsafe"
)

// A request under a policy that settles or counts is one allocation,
// settleReq: within 512 bytes the runtime makes it without a header, a
// faster path (BenchmarkMiddlewareUsed). A field added to state or
// usedWriter, or a larger http.Request, shows here.
func TestSettleReqSize(t *testing.T) {
	if n := unsafe.Sizeof(settleReq{}); n > 512 {
		t.Errorf("settleReq is %d bytes, over 512", n)
	}
}
