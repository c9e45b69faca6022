package main

import (
	"testing"
	"time"
)

func TestViolationsCountsOnlySpansOverTheBound(t *testing.T) {
	// 10/s, burst 2, no slices (L = 0): T = 100ms. Three decisions inside one ms
	// break burst 2 + floor(1ms/100ms) = 2.
	adm := []admission{{0, 10}, {20, 30}, {40, 50}}
	if spans, worst := violations(adm, 10, 2, 0); spans == 0 || worst != 1 {
		t.Fatalf("3 in 1ms under burst 2: %d spans, worst %d; want some, worst 1", spans, worst)
	}
	// A life of 100ms allows one unit more in every span.
	if spans, _ := violations(adm, 10, 2, 100*time.Millisecond); spans != 0 {
		t.Fatalf("with a 100ms life: %d spans over the bound", spans)
	}
	// A decision whose interval reaches past a span is not counted in it.
	if spans, _ := violations([]admission{{0, 10}, {20, 30}, {40, 200_000}}, 10, 2, 0); spans != 0 {
		t.Fatalf("an interval past every short span counted: %d", spans)
	}
}

func TestScriptCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=120,usec=5,usec_per_call=0.04\r\ncmdstat_eval:calls=3,usec=1\r\ncmdstat_get:calls=9,usec=1\r\n"
	if n := scriptCalls(info); n != 123 {
		t.Fatalf("scriptCalls = %d, want 123", n)
	}
}

func TestParseFlagsRejectsNonsense(t *testing.T) {
	for _, args := range [][]string{{"-procs", "0"}, {"-life", "0s"}, {"-limit", "5"}, {"-duration", "-1s"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	if c, err := parseFlags(nil); err != nil || c.procs != 4 || c.limit != 20_000 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if c, err := parseFlags([]string{"-smoke", "-procs", "3"}); err != nil || c.procs != 3 || c.callers != 8 || c.duration != 300*time.Millisecond {
		t.Fatalf("-smoke -procs 3: %+v %v", c, err)
	}
}
