package cli

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// --store-leases gives serve's Redis store leases: a hot key is then
// decided from its slices.
func TestStoreLeasesFlag(t *testing.T) {
	srv := redistest.Standalone(t)
	f := &serveFlags{store: "redis://" + srv.Addr() + "/0", onError: "fail-closed", storeTimeout: time.Second, pipelines: 1,
		prefix: fmt.Sprintf("cli-leases:%d:", time.Now().UnixNano()), leases: time.Minute}
	var o serve.Options
	done, err := f.openStores(&o)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	rs, ok := o.Store.(*redisstore.Store)
	if !ok {
		t.Fatalf("store %T, want a *redisstore.Store", o.Store)
	}
	lim := sluice.Limit{Rate: 1000, Period: time.Second, Burst: 1000}
	for i := range 200 {
		if _, err := rs.Take(context.Background(), sluice.Request{Key: "hot", Limit: lim, Cost: 1}); err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
	}
	if st := rs.LeaseStats(); st.Local == 0 {
		t.Fatalf("no decision from a lease: %+v", st)
	}
}
