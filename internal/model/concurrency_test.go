package model_test

import (
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
)

// The contract's hold rules by hand: held while t < expiry, the refusal's
// wait the one until enough holds end, a release or an extension of a
// hold that came back changes nothing.
func TestHoldsByHand(t *testing.T) {
	ls := model.NewHolds()
	check := func(what string, got algo.Decision, allowed bool, remaining, retry, reset int64) {
		t.Helper()
		if got.Allowed != allowed || got.Remaining != remaining || got.RetryAfter != retry || got.ResetAfter != reset {
			t.Fatalf("%s: %+v, want allowed=%v remaining=%d retry=%d reset=%d", what, got, allowed, remaining, retry, reset)
		}
	}
	check("a", ls.Acquire("k", 2, 100, 0, 1, 1), true, 1, 0, 100)
	check("b", ls.Acquire("k", 2, 100, 50, 1, 2), true, 0, 0, 100)
	check("c refused", ls.Acquire("k", 2, 100, 60, 1, 3), false, 0, 40, 90)
	check("two units", ls.Acquire("k", 2, 100, 60, 2, 3), false, 0, 90, 90)
	check("a at its expiry", ls.Acquire("k", 2, 100, 100, 1, 3), true, 0, 0, 100)
	check("release of a", ls.Release("k", 2, 110, 1), false, 0, 0, 90)
	check("extend b", ls.Extend("k", 2, 100, 120, 2), true, 0, 0, 100)
	check("release b", ls.Release("k", 2, 130, 2), true, 1, 0, 70)
	if ls.Held("k", 199) != 1 || ls.Held("k", 200) != 0 {
		t.Fatalf("held at 199 and 200: %d %d, want 1 0", ls.Held("k", 199), ls.Held("k", 200))
	}
}

// TakeHeadroom by hand: a fixed window of 5 with 2 reserved.
func TestTakeReservingByHand(t *testing.T) {
	m := model.New(algo.FixedWindow, 5, 1000, 0)
	for i := range 3 {
		if d := m.TakeHeadroom("k", 0, 1, 2); !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("normal %d: %+v", i, d)
		}
	}
	if d := m.TakeHeadroom("k", 10, 1, 2); d.Allowed || d.RetryAfter != 990 || d.Remaining != 0 {
		t.Fatalf("normal past its share: %+v", d)
	}
	if d := m.Take("k", 10, 2); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("critical: %+v", d)
	}
}

// TakeEachHeadroom by hand: a global fixed window of 5 with 2 reserved,
// beside a tenant's window of 2 with none. The reserve refuses the global
// part once 3 are spent, and a refusal by the tenant's part spends
// nothing on the global one.
func TestTakeEachReservingByHand(t *testing.T) {
	global, tenant := model.New(algo.FixedWindow, 5, 1000, 0), model.New(algo.FixedWindow, 2, 1000, 0)
	models := []*model.Model{global, tenant}
	each := make([]algo.Decision, 2)
	take := func(user string, reserve int64) algo.Decision {
		return model.TakeEachHeadroom(models, []string{"g", user}, []int64{1, 1}, []int64{reserve, 0}, 0, each)
	}
	for i, user := range []string{"a", "a"} {
		if d := take(user, 2); !d.Allowed || each[0].Remaining != int64(2-i) {
			t.Fatalf("normal %d: %+v %+v", i, d, each)
		}
	}
	if d := take("a", 2); d.Allowed || !each[0].Allowed || each[0].Remaining != 1 || each[1].Allowed {
		t.Fatalf("tenant a past its 2: %+v %+v, want refused by the tenant, the global part a look", d, each)
	}
	if d := take("b", 2); !d.Allowed || each[0].Remaining != 0 {
		t.Fatalf("tenant b: %+v %+v", d, each)
	}
	if d := take("c", 2); d.Allowed || each[0].Allowed || each[0].RetryAfter != 1000 || !each[1].Allowed {
		t.Fatalf("normal past its share: %+v %+v, want refused by the global part's reserve", d, each)
	}
	if d := take("c", 0); !d.Allowed || each[0].Remaining != 1 {
		t.Fatalf("critical: %+v %+v", d, each)
	}
}
