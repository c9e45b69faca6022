package serve

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// The caps of a configuration (config-bytes, rules, depth) hold for rules
// files and xDS alike: each test below sends its cap, which loads, and its
// cap + 1, which is refused with a message that names the cap and the
// flag that raises it; raised, the same loads.

// loadFiles loads files (name → content) as `sluice serve --config DIR
// --limit …` does, with lt's caps.
func loadFiles(t *testing.T, lt limits.Table, files map[string]string) error {
	t.Helper()
	_, err := CheckConfig(Options{Config: writeConfig(t, files), Limits: lt})
	return err
}

// wantRefused checks that err is a refusal at row's cap, a
// *limits.Exceeded.
func wantRefused(t *testing.T, what string, err error, row *limits.Row) {
	t.Helper()
	var e *limits.Exceeded
	if !errors.As(err, &e) || e.Row != row {
		t.Errorf("%s: %v is not a *limits.Exceeded of %s", what, err, row.Name)
	}
	wantNACK(t, what, fmt.Sprint(err), row)
}

// wantNACK checks that detail, a NACK's, is a refusal at row's cap, named
// with the flag that raises it.
func wantNACK(t *testing.T, what, detail string, row *limits.Row) {
	t.Helper()
	if !strings.Contains(detail, "the service's limit "+row.Name+" of ") || !strings.Contains(detail, "("+row.Flag()+" raises it)") {
		t.Errorf("%s: %q, want a refusal that names the limit %s and %s", what, detail, row.Name, row.Flag())
	}
}

// xdsLoad serves cfgs as version v to a service with lt's caps and
// returns the NACK's detail, "" when the version is ACKed.
func xdsLoad(t *testing.T, lt limits.Table, v string, cfgs ...*rlsconf.RateLimitConfig) string {
	t.Helper()
	x := newXDSServer(t, "127.0.0.1:0", nil)
	x.set(t, v, cfgs...)
	xo := XDSOptions{Server: x.addr, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
	ts := start(t, Options{XDS: &xo, Limits: lt}, nil)
	r := x.waitRequest(t, "ACKed or NACKed", func(r *discoverygrpc.DiscoveryRequest) bool {
		return r.ResponseNonce != "" && (r.ErrorDetail != nil || r.VersionInfo == v)
	})
	if r.ErrorDetail == nil {
		return ""
	}
	if got := ts.Config().LastError; got == nil || got.Error() != r.ErrorDetail.Message {
		t.Errorf("the NACK's detail %q is not the last error %v", r.ErrorDetail.Message, got)
	}
	return r.ErrorDetail.Message
}

// rulesRLC is a RateLimitConfig of n rules.
func rulesRLC(n int) *rlsconf.RateLimitConfig {
	c := wideRLC(n)
	c.Name = "rules"
	return c
}

// rulesYAML is a file of n rules.
func rulesYAML(n int) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {key: k%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	return b.String()
}

func TestConfigBytesCap(t *testing.T) {
	const capBytes = 1000
	lt := limits.Defaults()
	lt.ConfigBytes = capBytes
	file := rulesYAML(3)
	file += "#" + strings.Repeat("x", capBytes-len(file)-2) + "\n" // exactly the cap
	if err := loadFiles(t, lt, map[string]string{"a.yaml": file}); err != nil {
		t.Fatalf("a file of %d bytes, the cap: %v", len(file), err)
	}
	wantRefused(t, "a file of the cap + 1", loadFiles(t, lt, map[string]string{"a.yaml": file + "\n"}), limits.ConfigBytes)
	wantRefused(t, "two files of the cap + 1 together", loadFiles(t, lt, map[string]string{"a.yaml": file[:500] + "\n", "b.yaml": file[500:]}), limits.ConfigBytes)
	big := lt
	big.ConfigBytes = capBytes + 1
	if err := loadFiles(t, big, map[string]string{"a.yaml": file + "\n"}); err != nil {
		t.Errorf("the cap raised: %v", err)
	}

	// xDS: the response's resources together.
	c := rulesRLC(3)
	b, err := proto.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	lt.ConfigBytes = int64(len(b))
	if detail := xdsLoad(t, lt, "1", c); detail != "" {
		t.Fatalf("a resource of %d bytes, the cap: NACKed %s", len(b), detail)
	}
	lt.ConfigBytes = int64(len(b)) - 1
	wantNACK(t, "an xDS resource of the cap + 1", xdsLoad(t, lt, "1", c), limits.ConfigBytes)

	// A response over twice the cap and 1 MiB is refused by gRPC unread: no NACK
	// (its nonce is unread), a failed load that names the cap, and the
	// stream again after the backoff.
	x := newXDSServer(t, "127.0.0.1:0", nil)
	x.set(t, "big", wideRLC(100_000))
	lt.ConfigBytes = 100_000
	xo := XDSOptions{Server: x.addr, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
	ts := start(t, Options{XDS: &xo, Limits: lt}, nil)
	eventually(t, "refusing the response", func() bool { return ts.Config().LastError != nil })
	wantRefused(t, "an xDS response over twice the cap", ts.Config().LastError, limits.ConfigBytes)
}

func TestRulesCap(t *testing.T) {
	lt := limits.Defaults()
	lt.Rules = 3
	if err := loadFiles(t, lt, map[string]string{"a.yaml": rulesYAML(3)}); err != nil {
		t.Fatalf("a file of 3 rules, the cap: %v", err)
	}
	wantRefused(t, "a file of the cap + 1 rules", loadFiles(t, lt, map[string]string{"a.yaml": rulesYAML(4)}), limits.Rules)
	second := strings.ReplaceAll(rulesYAML(1), "domain: d", "domain: e")
	wantRefused(t, "two files of the cap + 1 rules together", loadFiles(t, lt, map[string]string{"a.yaml": rulesYAML(3), "b.yaml": second}), limits.Rules)
	// Counted as the reader reads the tree too: an alias's at each use.
	alias := "domain: d\ndescriptors:\n  - key: a\n    descriptors: &r [{key: k, rate_limit: {unit: day}}, {key: l, rate_limit: {unit: day}}]\n  - {key: b, descriptors: *r}\n"
	wantRefused(t, "an alias used twice, 4 rules", loadFiles(t, lt, map[string]string{"a.yaml": alias}), limits.Rules)
	if detail := xdsLoad(t, lt, "1", rulesRLC(3)); detail != "" {
		t.Fatalf("xDS, 3 rules: NACKed %s", detail)
	}
	wantNACK(t, "xDS, the cap + 1 rules", xdsLoad(t, lt, "1", rulesRLC(4)), limits.Rules)
	lt.Rules = 4
	if err := loadFiles(t, lt, map[string]string{"a.yaml": rulesYAML(4)}); err != nil {
		t.Errorf("the cap raised, a file: %v", err)
	}
	if detail := xdsLoad(t, lt, "1", rulesRLC(4)); detail != "" {
		t.Errorf("the cap raised, xDS: NACKed %s", detail)
	}
}

// deepYAML is a file of descriptors nested n deep, in block style, or in
// flow style.
func deepYAML(n int, flow bool) string {
	if flow {
		return "domain: d\ndescriptors: " + strings.Repeat("[{key: k, descriptors: ", n-1) + "[{key: k, rate_limit: {unit: day}}]" + strings.Repeat("}]", n-1) + "\n"
	}
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range n {
		ind := strings.Repeat("    ", i)
		fmt.Fprintf(&b, "%s  - key: k\n", ind)
		if i < n-1 {
			fmt.Fprintf(&b, "%s    descriptors:\n", ind)
		}
	}
	return b.String()
}

// metaYAML is a file whose metadata nests n deep.
func metaYAML(n int) string {
	return "domain: d\ndescriptors:\n  - key: k\n    metadata: " + strings.Repeat("{a: ", n) + "1" + strings.Repeat("}", n) + "\n"
}

func TestDepthCap(t *testing.T) {
	lt := limits.Defaults()
	lt.Depth = 4
	for _, flow := range []bool{false, true} {
		if err := loadFiles(t, lt, map[string]string{"a.yaml": deepYAML(4, flow)}); err != nil {
			t.Fatalf("descriptors 4 deep, the cap (flow %v): %v", flow, err)
		}
		wantRefused(t, fmt.Sprintf("descriptors the cap + 1 deep (flow %v)", flow), loadFiles(t, lt, map[string]string{"a.yaml": deepYAML(5, flow)}), limits.Depth)
	}
	// The metadata's own map, then the cap's 4 more.
	if err := loadFiles(t, lt, map[string]string{"a.yaml": metaYAML(5)}); err != nil {
		t.Fatalf("metadata 4 deep, the cap: %v", err)
	}
	wantRefused(t, "metadata the cap + 1 deep", loadFiles(t, lt, map[string]string{"a.yaml": metaYAML(6)}), limits.Depth)
	// Flow collections deeper than any descriptors and metadata within
	// the cap are refused before the YAML is parsed.
	wantRefused(t, "lists nested deep", loadFiles(t, lt, map[string]string{"a.yaml": "domain: " + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + "\n"}), limits.Depth)

	deep := func(n int) *rlsconf.RateLimitConfig {
		c := deepRLC(n)
		d := c.Descriptors[0]
		for len(d.Descriptors) > 0 {
			d = d.Descriptors[0]
		}
		d.RateLimit = &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 1}
		return c
	}
	if detail := xdsLoad(t, lt, "1", deep(4)); detail != "" {
		t.Fatalf("xDS, descriptors 4 deep: NACKed %s", detail)
	}
	wantNACK(t, "xDS, descriptors the cap + 1 deep", xdsLoad(t, lt, "1", deep(5)), limits.Depth)
	lt.Depth = 5
	if err := loadFiles(t, lt, map[string]string{"a.yaml": deepYAML(5, true)}); err != nil {
		t.Errorf("the cap raised, a file: %v", err)
	}
	if detail := xdsLoad(t, lt, "1", deep(5)); detail != "" {
		t.Errorf("the cap raised, xDS: NACKed %s", detail)
	}
}

// A response that did not load, sent again (go-control-plane's cache
// answers a NACK at once with the same snapshot; the server restarted
// does too), is NACKed with the same detail without being parsed again,
// after a wait that grows as the reconnections' backoff.
func TestXDSRejectedRemembered(t *testing.T) {
	x := newXDSServer(t, "127.0.0.1:0", nil)
	x.set(t, "deep", deepRLC(4900))
	ts := startXDS(t, x, XDSOptions{}, nil)
	// nacks returns the details of the NACKs from the from-th request on.
	nacks := func(from int) (details []string, next int) {
		x.mu.Lock()
		defer x.mu.Unlock()
		for _, r := range x.reqs[from:] {
			if r.ErrorDetail != nil {
				details = append(details, r.ErrorDetail.Message)
			}
		}
		return details, len(x.reqs)
	}
	eventually(t, "NACKed 3 times", func() bool { d, _ := nacks(0); return len(d) >= 3 })
	// Each NACK is answered at once with the same snapshot: the NACKs are
	// paced as reconnections are (10 ms doubling to 50 ms here).
	_, from := nacks(0)
	time.Sleep(500 * time.Millisecond)
	if d, _ := nacks(from); len(d) > 20 {
		t.Errorf("%d NACKs in 500 ms: want them paced", len(d))
	}
	x.stop()
	_, restart := nacks(0)
	x.start(t, x.addr)
	eventually(t, "NACKed after the restart", func() bool { d, _ := nacks(restart); return len(d) >= 1 })
	details, _ := nacks(0)
	if !strings.Contains(details[0], "descriptors nested more than 64 deep") {
		t.Fatalf("NACK: %s", details[0])
	}
	for _, d := range details {
		if d != details[0] {
			t.Fatalf("NACKed with %q, first %q", d, details[0])
		}
	}
	if n := ts.xds.parses.Load(); n != 1 {
		t.Errorf("%d NACKs, %d parses: want one", len(details), n)
	}
	// A new version is parsed.
	x.set(t, "good", rlc("edge", "d", rlsconf.RateLimitUnit_MINUTE, 1, "k"))
	ts.waitOrigin(t, "good")
	if n := ts.xds.parses.Load(); n != 2 {
		t.Errorf("parsed %d times, want twice", n)
	}
}
