package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// --store-slices gives serve's Redis store slices: a hot key is then
// decided from its slices. --store-leases, its deprecated name, still
// does, and serve logs once that it is deprecated.
func TestStoreSlicesFlag(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, name := range []string{"store-slices", "store-leases"} {
		t.Run(name, func(t *testing.T) {
			var f serveFlags
			fs := f.define()
			err := fs.Parse([]string{"--store", "redis://" + srv.Addr() + "/0", "--prefix", fmt.Sprintf("cli-slices:%d:", time.Now().UnixNano()), "--" + name, "1m"})
			if err == nil {
				err = f.aliases(fs)
			}
			if err == nil {
				err = f.check()
			}
			if err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			o, done, err := f.options(&log)
			if err != nil {
				t.Fatal(err)
			}
			defer done()
			rs, ok := o.Store.(*redisstore.Store)
			if !ok || !rs.Slicing() {
				t.Fatalf("store %T, want a *redisstore.Store with slices", o.Store)
			}
			lim := sluice.New(rs)
			for i := range 200 {
				if _, err := lim.Take(context.Background(), "hot", sluice.Limit{Rate: 1000, Period: time.Second, Burst: 1000}, 1); err != nil {
					t.Fatalf("take %d: %v", i, err)
				}
			}
			if st := rs.SliceStats(); st.Local == 0 {
				t.Fatalf("no decision from a slice: %+v", st)
			}
			want := 0
			if name == "store-leases" {
				want = 1
			}
			if n := strings.Count(log.String(), "--store-leases is deprecated: it is --store-slices"); n != want {
				t.Errorf("the log warns %d times of --store-leases, want %d:\n%s", n, want, log.String())
			}
		})
	}
}

// Both names at once are an error; the deprecated one's errors name it.
func TestStoreLeasesAlias(t *testing.T) {
	var f serveFlags
	fs := f.define()
	if err := fs.Parse([]string{"--store-slices", "1s", "--store-leases", "1s"}); err != nil {
		t.Fatal(err)
	}
	if err := f.aliases(fs); err == nil || !strings.Contains(err.Error(), "give --store-slices alone") {
		t.Errorf("both names: %v", err)
	}
}
