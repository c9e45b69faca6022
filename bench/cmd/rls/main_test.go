package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/bench/rls"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-duration", "3s", "-rounds", "2", "-servers", "envoy,sluice-memory", "-envoy-env", "REDIS_POOL_SIZE=64"})
	if err != nil {
		t.Fatal(err)
	}
	if c.duration != 3*time.Second || c.rounds != 2 || strings.Join(c.servers, ",") != "envoy,sluice-memory" || len(c.envoyEnv) != 1 {
		t.Errorf("parsed %+v", c)
	}
	if len(c.clients) != 1 || c.clients[0] != rls.H2 {
		t.Errorf("default -client: %v, want h2", c.clients)
	}
	if c, err := parseFlags([]string{"-client", "grpc,h2,grpc"}); err != nil || len(c.clients) != 2 || c.clients[0] != rls.GRPC {
		t.Errorf("-client grpc,h2,grpc: %v, %v", c, err)
	}
	if c, err := parseFlags([]string{"-hot"}); err != nil || !c.hot || strings.Join(c.servers, ",") != "envoy,sluice-memory,sluice-slices" || c.sliceLife != time.Second {
		t.Errorf("-hot: %+v, %v", c, err)
	}
	if c, err := parseFlags([]string{"-hot", "-servers", "sluice-slices,sluice-memory", "-slice-life", "100ms"}); err != nil ||
		strings.Join(c.servers, ",") != "sluice-slices,sluice-memory" || c.sliceLife != 100*time.Millisecond {
		t.Errorf("-hot -servers sluice-slices,sluice-memory -slice-life 100ms: %+v, %v", c, err)
	}
	if c, err := parseFlags(nil); err != nil || c.hot || strings.Join(c.servers, ",") != "envoy,sluice-redis,sluice-memory" {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	if c, err := parseFlags([]string{"-smoke", "-hot"}); err != nil || !c.smoke || c.calls != 2000 || c.rounds != 1 || c.warmup != 200*time.Millisecond || !c.hot {
		t.Errorf("-smoke -hot: %+v, %v", c, err)
	}
	if c, err := parseFlags([]string{"-smoke", "-calls", "50"}); err != nil || c.calls != 50 {
		t.Errorf("-smoke -calls 50: %+v, %v", c, err)
	}
	for _, bad := range [][]string{
		{"-slice-life", "0s"},
		{"-servers", "nginx"},
		{"-duration", "0s"},
		{"-rounds", "0"},
		{"-conns", "0"},
		{"-client", "ghz"},
		{"-envoy-env", "NOVALUE"},
		{"-sluice-env", "=x"},
		{"extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}
