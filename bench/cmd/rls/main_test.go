package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-duration", "3s", "-rounds", "2", "-servers", "envoy,sluice-memory", "-envoy-env", "REDIS_POOL_SIZE=64"})
	if err != nil {
		t.Fatal(err)
	}
	if c.duration != 3*time.Second || c.rounds != 2 || strings.Join(c.servers, ",") != "envoy,sluice-memory" || len(c.envoyEnv) != 1 {
		t.Errorf("parsed %+v", c)
	}
	for _, bad := range [][]string{
		{"-servers", "nginx"},
		{"-duration", "0s"},
		{"-rounds", "0"},
		{"-conns", "0"},
		{"-envoy-env", "NOVALUE"},
		{"-sluice-env", "=x"},
		{"extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}
