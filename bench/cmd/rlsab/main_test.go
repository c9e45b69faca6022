package main

import (
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-a", "HEAD~1", "-rounds", "2", "-b-env", "GOGC=800", "-store", "memory"})
	if err != nil {
		t.Fatal(err)
	}
	if c.a != "HEAD~1" || c.b != "." || c.rounds != 2 || c.store != "memory" || len(c.envB) != 1 || c.duration != 8*time.Second {
		t.Errorf("parsed %+v", c)
	}
	if c, err := parseFlags([]string{"-smoke"}); err != nil || c.a != "." || c.b != "." || c.duration != time.Second || c.rounds != 1 || c.warmup != 200*time.Millisecond {
		t.Errorf("-smoke: %+v, %v", c, err)
	}
	for _, bad := range [][]string{
		{},                    // no -a
		{"-a", "x", "-b", ""}, // empty -b
		{"-a", "x", "-store", "etcd"},
		{"-a", "x", "-rounds", "0"},
		{"-a", "x", "-duration", "0s"},
		{"-a", "x", "-a-env", "NOVALUE"},
		{"-a", "x", "extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}
