package rlsconfig

import (
	"fmt"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// wideConfig is a RateLimitConfig of n rules.
func wideConfig(n int) *rlsconf.RateLimitConfig {
	c := &rlsconf.RateLimitConfig{Name: "wide", Domain: "d"}
	for i := range n {
		c.Descriptors = append(c.Descriptors, &rlsconf.RateLimitDescriptor{Key: fmt.Sprintf("k%d", i),
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}})
	}
	return c
}

// xdsResource is cs as a response's resources.
func xdsResource(t testing.TB, cs ...*rlsconf.RateLimitConfig) []*anypb.Any {
	t.Helper()
	var out []*anypb.Any
	for _, c := range cs {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// The pass over the wire form reads what decoding reads: a name or a
// rate_limit sent twice (the last name; a rate_limit merged), fields it
// does not know skipped, and bytes that are not a message refused.
func TestWireScan(t *testing.T) {
	var b []byte
	b = protowire.AppendTag(b, configName, protowire.BytesType)
	b = protowire.AppendString(b, "first")
	b = protowire.AppendTag(b, 2, protowire.BytesType) // domain
	b = protowire.AppendString(b, "d")
	b = protowire.AppendTag(b, 99, protowire.VarintType) // unknown
	b = protowire.AppendVarint(b, 7)
	var d []byte
	d = protowire.AppendTag(d, 1, protowire.BytesType) // key
	d = protowire.AppendString(d, "k")
	for range 2 {
		d = protowire.AppendTag(d, descRateLimit, protowire.BytesType)
		d = protowire.AppendBytes(d, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(rlsconf.RateLimitUnit_DAY)))
	}
	b = protowire.AppendTag(b, configDescriptors, protowire.BytesType)
	b = protowire.AppendBytes(b, d)
	b = protowire.AppendTag(b, configName, protowire.BytesType)
	b = protowire.AppendString(b, "last")
	c, err := Options{}.ParseXDS([]*anypb.Any{{TypeUrl: XDSTypeURL, Value: b}})
	if err != nil {
		t.Fatal(err)
	}
	if src := c.Sources(); len(src) != 1 || src[0] != "xds/last" || len(c.Rules()) != 1 || c.Rules()[0].Unit != "day" {
		t.Fatalf("sources %v, rules %v", src, c.Rules())
	}
	for _, bad := range [][]byte{b[:len(b)-1], append(b[:len(b):len(b)], 0xff)} {
		if _, err := (Options{}).ParseXDS([]*anypb.Any{{TypeUrl: XDSTypeURL, Value: bad}}); err == nil || !strings.Contains(err.Error(), "xDS resource") {
			t.Errorf("% x: %v, want an error", bad, err)
		}
	}
}
