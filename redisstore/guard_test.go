package redisstore

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-go/sluice/internal/redistest"
)

// A step that raises "sluice: foreign data" (as load does for a string that
// is not a sluice state) fails its decision alone, with ErrForeignKey naming
// the key; the decisions around it in the same multi-decision script are
// made and written.
func TestGuardForeignData(t *testing.T) {
	srv := redistest.Standalone(t)
	// A token-bucket stand-in: raises on the key "bad", else grants and
	// stores a state.
	step := `
steps[1] = function(key, rate, period, burst, cost)
  if key == 'bad' then
    error('sluice: foreign data: ' .. key .. ' is not a sluice state')
  end
  return decision(true, 7, 0, 0, 0), {1, 1, 1, 0, rate, period}, now + 1000000
end
`
	multi := NewScript(mustRead("prelude.lua") + mustRead("guard.lua") + step + mustRead("multi.lua"))
	single := NewScript(mustRead("prelude.lua") + mustRead("guard.lua") + step + mustRead("single.lua"))
	c := GoRedis(srv.Client())
	ctx := context.Background()

	m := &Call{Script: multi, Keys: []string{"a", "bad", "b"}, Args: []any{int64(1000), int64(1), int64(1), int64(0), int64(1), int64(1), int64(1000), int64(5), int64(-1)}}
	c.Run(ctx, []*Call{m})
	if m.Err != nil || len(m.Reply) != 15 {
		t.Fatalf("multi: %v, %v", m.Reply, m.Err)
	}
	for i, key := range m.Keys {
		d, err := decisionOf(m.Reply[5*i:5*i+5], key)
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
	s := &Call{Script: single, Keys: []string{"bad"}, Args: []any{int64(1), int64(1), int64(1000), int64(5), int64(1), int64(-1), int64(-1), int64(1000)}}
	c.Run(ctx, []*Call{s})
	if s.Err != nil || len(s.Reply) != 5 {
		t.Fatalf("single: %v, %v", s.Reply, s.Err)
	}
	if _, err := decisionOf(s.Reply, "bad"); !errors.Is(err, ErrForeignKey) {
		t.Errorf("single: %v, want ErrForeignKey", err)
	}
}
