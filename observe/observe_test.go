package observe_test

import (
	"testing"

	"github.com/sluice-go/sluice/observe"
)

func TestOutcomeStrings(t *testing.T) {
	seen := map[string]bool{}
	for _, o := range observe.Outcomes {
		s := o.String()
		if s == "unknown" || seen[s] {
			t.Fatalf("outcome %d: label %q", o, s)
		}
		seen[s] = true
	}
	if got := observe.Outcome(200).String(); got != "unknown" {
		t.Fatalf("Outcome(200) = %q", got)
	}
}

func TestMulti(t *testing.T) {
	if observe.Multi() != nil || observe.Multi(nil, nil) != nil {
		t.Fatal("Multi of nothing is not nil")
	}
	var a, b []observe.Event
	oa := observe.Func(func(e observe.Event) { a = append(a, e) })
	ob := observe.Func(func(e observe.Event) { b = append(b, e) })
	if _, ok := observe.Multi(nil, oa).(observe.Func); !ok {
		t.Fatal("Multi of one observer should return it")
	}
	m := observe.Multi(oa, nil, ob)
	e := observe.Event{Source: "http", Policy: "p", Outcome: observe.Denied}
	m.Observe(e)
	if len(a) != 1 || len(b) != 1 || a[0] != e || b[0] != e {
		t.Fatalf("a=%v b=%v", a, b)
	}
}
