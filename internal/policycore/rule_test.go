package policycore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/observe"
)

func TestChecker(t *testing.T) {
	check := policycore.Checker{Prefix: "door:", Noun: "call"}
	ok := policycore.Rule{Name: "per-ip", Limit: sluice.PerSecond(10).WithBurst(50)}
	if err := check.Check(&ok, false); err != nil {
		t.Fatal(err)
	}
	if ok.Cost != 1 || ok.KeyPrefix != "door:per-ip:" || ok.Q != 50 || ok.W != 5 {
		t.Errorf("checked rule: cost %d, prefix %q, q %d, w %d; want 1, door:per-ip:, 50, 5", ok.Cost, ok.KeyPrefix, ok.Q, ok.W)
	}
	classes := policycore.Rule{Name: "classes", Limit: sluice.PerMinute(100), Headroom: 20}
	if err := (&policycore.Checker{Noun: "call"}).Check(&classes, false); err != nil {
		t.Fatal(err)
	}
	normal := policycore.Part{Rule: &classes, Headroom: classes.HeadroomFor(false)}
	critical := policycore.Part{Rule: &classes, Headroom: classes.HeadroomFor(true)}
	if normal.Quota() != 80 || critical.Quota() != 100 || normal.Sluice().Headroom != 20 || critical.Sluice().Headroom != 0 {
		t.Errorf("classes: q %d and %d, headrooms %d and %d; want 80 and 100, 20 and 0", normal.Quota(), critical.Quota(), normal.Sluice().Headroom, critical.Sluice().Headroom)
	}
	bigCost := policycore.Rule{Name: "bytes", Limit: sluice.PerMinute(100), Cost: 1000}
	if err := check.Check(&bigCost, true); err != nil {
		t.Errorf("a cost function's default cost is not held to the capacity: %v", err)
	}
	for _, tc := range []struct {
		r    *policycore.Rule
		want string
	}{
		{&policycore.Rule{Name: "", Limit: sluice.PerSecond(1)}, "policy 2: name"},
		{&policycore.Rule{Name: "a:b", Limit: sluice.PerSecond(1)}, "policy 3: name"},
		{&policycore.Rule{Name: "per-ip", Limit: sluice.PerSecond(1)}, `two policies named "per-ip"`},
		{&policycore.Rule{Name: "zero"}, `policy "zero": sluice: invalid limit`},
		{&policycore.Rule{Name: "neg", Limit: sluice.PerSecond(1), Cost: -1}, `policy "neg": negative cost -1`},
		{&policycore.Rule{Name: "big", Limit: sluice.PerSecond(2), Cost: 3}, `policy "big": cost 3 exceeds the limit's capacity 2: no call could pass`},
		{&policycore.Rule{Name: "rneg", Limit: sluice.PerSecond(2), Headroom: -1}, `policy "rneg": negative headroom -1`},
		{&policycore.Rule{Name: "rbig", Limit: sluice.PerSecond(5), Cost: 2, Headroom: 4}, `policy "rbig": a headroom of 4 leaves less than one call's cost`},
	} {
		err := check.Check(tc.r, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %s", tc.r.Name, err, tc.want)
		}
	}
	if _, err := policycore.CheckCost(-2, nil); err == nil {
		t.Error("CheckCost(-2) accepted it")
	}
	want := errors.New("unreadable")
	if _, err := policycore.CheckCost(5, want); err != want {
		t.Errorf("CheckCost kept %v, want %v", err, want)
	}
}

// events is an Observer that keeps what it is told.
type events []observe.Event

func (e *events) Observe(ev observe.Event) { *e = append(*e, ev) }

func (e events) String() string {
	var b strings.Builder
	for _, ev := range e {
		fmt.Fprintf(&b, "%s %s %s #%d %v; ", ev.Source, ev.Policy, ev.Outcome, ev.Index, ev.Wait)
	}
	return b.String()
}

// TestRecordAndStats: each outcome lands in its count, and the Events of
// one store call are numbered among those reported.
func TestRecordAndStats(t *testing.T) {
	a := &policycore.Rule{Name: "a"}
	b := &policycore.Rule{Name: "b", Optional: true}
	c := &policycore.Rule{Name: "c", Shadow: true}
	ps := []policycore.Part{{Rule: a}, {Rule: b}, {Rule: c}}
	var got events
	policycore.Record(&got, "src", ps, observe.Allowed, time.Millisecond, 2*time.Second)
	policycore.Record(nil, "src", ps[:1], observe.Error, 0, 0)
	policycore.Record(&got, "src", ps[1:2], observe.Degraded, 0, 0)
	each := []sluice.Result{{Allowed: true}, {}, {}}
	policycore.RecordRefused(&got, "src", ps, each, observe.Denied, 0)
	if want := "src a allowed #0 2s; src b allowed #1 2s; src c allowed #2 2s; src b degraded #0 0s; src b denied #0 0s; src c denied #1 0s; "; got.String() != want {
		t.Errorf("events %s\nwant   %s", got, want)
	}
	if a.MissingKey() || !b.MissingKey() || !c.MissingKey() {
		t.Error("MissingKey: only an Optional or shadow policy lets the request go on")
	}
	for r, want := range map[*policycore.Rule]policycore.Stats{
		a: {Policy: "a", Allowed: 1, Errors: 1, Missing: 1},
		b: {Policy: "b", Allowed: 1, Refused: 1, Degraded: 1, Missing: 1},
		c: {Policy: "c", Shadow: true, Allowed: 1, Refused: 1, Missing: 1},
	} {
		if got := r.Stats(); got != want {
			t.Errorf("%s: %+v, want %+v", r.Name, got, want)
		}
	}
	if names := policycore.RefusedNames(ps, each); fmt.Sprint(names) != "[b c]" {
		t.Errorf("RefusedNames %v", names)
	}
	if rules := policycore.Refused(ps, each); len(rules) != 2 || rules[0] != b || rules[1] != c {
		t.Errorf("Refused %v", rules)
	}
	p := policycore.Part{Rule: &policycore.Rule{KeyPrefix: "door:a:"}, Key: "door:a:k:1"}
	if k := p.RequestKey(); k != "k:1" {
		t.Errorf("RequestKey %q", k)
	}
}

func TestSet(t *testing.T) {
	var o observe.Observer
	if err := policycore.Set("WithObserver", &o, nil); err == nil || err.Error() != "WithObserver(nil)" {
		t.Errorf("Set(nil): %v", err)
	}
	var got events
	if err := policycore.Set[observe.Observer]("WithObserver", &o, &got); err != nil || o != &got {
		t.Errorf("Set: %v, %v", o, err)
	}
}

func TestSetUnavailableRetryAfter(t *testing.T) {
	d := time.Second
	for _, bad := range []time.Duration{0, -time.Second} {
		if err := policycore.SetUnavailableRetryAfter(&d, bad); err == nil || d != time.Second {
			t.Errorf("%v: %v, left %v", bad, err, d)
		}
	}
	if err := policycore.SetUnavailableRetryAfter(&d, 3*time.Second); err != nil || d != 3*time.Second {
		t.Errorf("3s: %v, set %v", err, d)
	}
}
