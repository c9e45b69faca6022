package serve

import (
	"fmt"
	"strings"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// deepRLC is a RateLimitConfig of one descriptor chain n deep.
func deepRLC(n int) *rlsconf.RateLimitConfig {
	var d *rlsconf.RateLimitDescriptor
	for range n {
		d = &rlsconf.RateLimitDescriptor{Key: "k", Value: "v", Descriptors: nonNil(d)}
	}
	return &rlsconf.RateLimitConfig{Name: "deep", Domain: "d", Descriptors: nonNil(d)}
}

func nonNil(d *rlsconf.RateLimitDescriptor) []*rlsconf.RateLimitDescriptor {
	if d == nil {
		return nil
	}
	return []*rlsconf.RateLimitDescriptor{d}
}

// wideRLC is a RateLimitConfig of n descriptors, each with its rule.
func wideRLC(n int) *rlsconf.RateLimitConfig {
	c := &rlsconf.RateLimitConfig{Name: "wide", Domain: "d"}
	for i := range n {
		c.Descriptors = append(c.Descriptors, &rlsconf.RateLimitDescriptor{Key: fmt.Sprintf("k%d", i),
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}})
	}
	return c
}

// responseWire is the wire form of a response of cfgs.
func responseWire(t testing.TB, cfgs ...*rlsconf.RateLimitConfig) []byte {
	t.Helper()
	resp := &discoverygrpc.DiscoveryResponse{TypeUrl: XDSTypeURL, VersionInfo: "1", Nonce: "1"}
	for _, c := range cfgs {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parseResponse reads a response from its wire form and loads it, as the
// service does with what its stream receives.
func parseResponse(wire []byte) error {
	var resp discoverygrpc.DiscoveryResponse
	if err := proto.Unmarshal(wire, &resp); err != nil {
		return err
	}
	_, err := rlsconfig.Options{}.ParseXDS(resp.GetResources())
	return err
}

// An xDS response over the depth or rules cap is refused while it is
// read, before anything is built from it: in little time, allocating at
// most a small multiple of its bytes, and holding nothing after. The
// figures are in docs/performance.md ("Refused configurations"):
// go test -run TestRefusedXDSCost -v ./cmd/sluice/internal/serve/
func TestRefusedXDSCost(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tc := range []struct {
		name string
		wire []byte
		want string
	}{
		{"a chain 4,900 deep", responseWire(t, deepRLC(4900)), "deep"},
		{"100,000 descriptors", responseWire(t, wideRLC(100_000)), "rules"},
	} {
		var err error
		c := testenv.Measure(func() { err = parseResponse(tc.wire) })
		t.Logf("%s, %d bytes: %v: %v", tc.name, len(tc.wire), c, err)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming %q", tc.name, err, tc.want)
		}
		if c.Alloc > 20*uint64(len(tc.wire)) {
			t.Errorf("%s: %d bytes allocated to refuse %d bytes: want at most 20 times", tc.name, c.Alloc, len(tc.wire))
		}
		if c.Took > time.Second {
			t.Errorf("%s: refused after %v", tc.name, c.Took)
		}
		if c.Kept > 1<<20 {
			t.Errorf("%s: the heap holds %d bytes more after the refusal", tc.name, c.Kept)
		}
	}
}
