package memstore_test

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

// A store in process, under a Limiter: 3 logins a minute per user. The
// store keeps one small entry per active key and forgets it once its state
// is fresh again.
func ExampleNew() {
	store := memstore.New()
	lim := sluice.New(store)
	ctx := context.Background()
	logins := sluice.PerMinute(3)

	for i := 1; i <= 4; i++ {
		r, err := lim.Take(ctx, "login:alice", logins, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("login %d: allowed=%v\n", i, r.Allowed)
	}
	fmt.Println("keys held:", store.Len())
	// Output:
	// login 1: allowed=true
	// login 2: allowed=true
	// login 3: allowed=true
	// login 4: allowed=false
	// keys held: 1
}
