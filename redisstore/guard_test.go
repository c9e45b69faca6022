package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
)

// A step that raises "sluice: foreign data" (as load does for a string that
// is not a sluice state) fails its decision alone, with ErrForeignKey naming
// the key; the decisions around it in the same multi-decision script are
// made and written.
func TestGuardForeignData(t *testing.T) {
	srv := redistest.Standalone(t)
	// A token-bucket stand-in: raises on a key that holds a state (only
	// "bad" does, set below), else grants and stores a state.
	step := `
steps[1] = function(rate, period, burst, debt, cost, _, k)
  if k then
    error('sluice: foreign data: a state the stand-in will not read')
  end
  return decision(true, 7, 0, 0, 0), {1, 1, 1, 0, rate, period}, now + 1000000
end
`
	multi := redisrun.NewScript(redisrun.LuaHelpers + mustRead("prelude.lua") + mustRead("guard.lua") + step + mustRead("multi.lua"))
	single := redisrun.NewScript(redisrun.LuaHelpers + mustRead("prelude.lua") + mustRead("guard.lua") + step + mustRead("single.lua"))
	c := redisrun.GoRedis(srv.Client())
	ctx := context.Background()
	// A token-bucket state as the store packs it (see load in prelude.lua):
	// kind 1, then a, b, c, rate 1, period 1000, little-endian.
	state := make([]byte, 41)
	state[0] = 1
	binary.LittleEndian.PutUint64(state[25:], 1)
	binary.LittleEndian.PutUint64(state[33:], 1000)
	if err := srv.Client().Set(ctx, "bad", state, 0).Err(); err != nil {
		t.Fatal(err)
	}

	m := &redisrun.Call{Script: multi, Keys: []string{"a", "bad", "b"}, Args: []any{int64(1000), int64(1), int64(1), int64(0), int64(1), int64(1), int64(1000), int64(5), int64(0), int64(-1)}}
	c.Run(ctx, []*redisrun.Call{m})
	if m.Err != nil || len(m.Reply) != 3*width {
		t.Fatalf("multi: %v, %v", m.Reply, m.Err)
	}
	for i, key := range m.Keys {
		d, err := decisionOf(m.Reply[width*i:width*(i+1)], key)
		if key == "bad" {
			if !errors.Is(err, ErrForeignKey) {
				t.Errorf("bad: %v, want ErrForeignKey", err)
			} else {
				t.Log(err)
			}
			continue
		}
		if err != nil || !d.Allowed || d.Remaining != 7 {
			t.Errorf("%s: %+v, %v", key, d, err)
		}
		if n, _ := srv.Client().Exists(ctx, key).Result(); n != 1 {
			t.Errorf("%s was not written", key)
		}
	}
	s := &redisrun.Call{Script: single, Keys: []string{"bad"}, Args: []any{int64(1), int64(1), int64(1000), int64(5), int64(0), int64(1), int64(-1), int64(-1), int64(1000)}}
	c.Run(ctx, []*redisrun.Call{s})
	if s.Err != nil || len(s.Reply) != width {
		t.Fatalf("single: %v, %v", s.Reply, s.Err)
	}
	if _, err := decisionOf(s.Reply, "bad"); !errors.Is(err, ErrForeignKey) {
		t.Errorf("single: %v, want ErrForeignKey", err)
	}
}
