package serve

import (
	"fmt"
	"maps"
	"runtime"

	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/store"
)

// simRules is one budget per value of "name", 6000 a minute (100 a
// second) each.
const simRules = `domain: sim
descriptors:
  - key: name
    rate_limit: {unit: minute, requests_per_unit: 6000}
`

// A few clients on one budget, by hand: they share it, within the bound.
func TestRLQSSimSmall(t *testing.T) {
	s := newSim(t, simRules, RLQSOptions{}, testenv.SeedOr(t, 1))
	s.threeClients()
	s.run(60 * simSec)
	var before [3]int64
	for i, c := range s.clients {
		before[i] = c.admitted
	}
	s.run(120 * simSec)
	for i, c := range s.clients {
		t.Logf("client %s: %.1f a second", c.name, float64(c.admitted-before[i])/60)
	}
	bt := s.trace["b0"]
	admitted := 0
	for _, at := range bt.admitted {
		if at >= 60*simSec {
			admitted++
		}
	}
	t.Logf("last 60s: %d admitted of %d a second's budget (%.1f%%), %d demanded in all", admitted, 100*60, 100*float64(admitted)/6000, bt.demanded)
	s.checkBound(map[string]int64{"b0": 6000}, 60*simSec)
	_ = time.Second
}

// The proof on one replica: 100 clients (Envoy's profile, but a
// tenth of them A77's) × 50 budgets of 100 a second, skewed demand that
// changes every 40s (each budget's total drawn among 0.6, 1.5 and 2.5
// times its rate, shared among the clients by a Zipf law of a fresh
// order), clients configured DENY_ALL when they have no assignment: no
// window over the bound, and the budgets used up while demand exceeds
// them. The race detector makes it a tenth of the budgets for one phase
// (CI runs it whole without).
func TestRLQSHundredClients(t *testing.T) {
	budgets, phases := 50, 2
	switch {
	case raceEnabled:
		budgets, phases = 5, 1
	case testenv.Long():
		phases = 6
	}
	hundredClients(t, hundred{budgets: budgets, phases: phases, replicas: 1})
}

// hundred is a run of hundredClients: budgets × phases of 30s, over
// replicas over store (nil: one memstore each); moves: every phase a
// tenth of the clients move to the next replica; kill: the last replica
// is killed 5s into the second phase and restarted 10s later.
type hundred struct {
	budgets, phases, replicas int
	store                     func() store.Store
	moves, kill               bool
}

// hundredClients runs h, checks the bound and returns the utilisation
// while demand exceeds the rate (and fails below 90%).
func hundredClients(t *testing.T, h hundred) float64 {
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 9))
	const clients, rate = 100, 1000.0
	budgets, phases := h.budgets, h.phases
	const phase = 30 * simSec
	s := newSimReplicas(t, strings.ReplaceAll(simRules, "6000", "60000"), RLQSOptions{}, seed, h.replicas, h.store)
	// demand[p][j][i]: client i's rate for budget j in phase p
	demand := make([][][]float64, phases)
	totals := make([][]float64, phases)
	for p := range demand {
		demand[p], totals[p] = make([][]float64, budgets), make([]float64, budgets)
		for j := range budgets {
			total := rate * []float64{0.6, 1.5, 2.5, 1.5}[rng.IntN(4)]
			order := rng.Perm(clients)
			z := make([]float64, clients)
			sum := 0.0
			for i, rank := range order {
				z[i] = 1 / math.Pow(float64(rank+1), 1.1)
				sum += z[i]
			}
			demand[p][j] = make([]float64, clients)
			for i := range clients {
				demand[p][j][i] = total * z[i] / sum
			}
			totals[p][j] = total
		}
	}
	for i := range clients {
		o := simOptions{noAssignment: simDenyAll}
		if i%10 == 9 {
			o.profile, o.reportEvery = a77Profile, 2*simSec
		}
		c := s.addClient(fmt.Sprintf("c%02d", i), "sim", o)
		c.rep = i % h.replicas
		for j := range budgets {
			c.demand(map[string]string{"name": fmt.Sprintf("b%02d", j)}, func(at int64) float64 {
				return demand[min(int(at/phase), phases-1)][j][i]
			})
		}
		if h.moves && i%10 == 3 {
			for p := 1; p < phases; p++ {
				s.at(int64(p)*phase+int64(i)*simSec/10, func() { c.move((c.rep + 1) % h.replicas) })
			}
		}
	}
	if h.kill && phases > 1 {
		s.at(phase+5*simSec, func() { s.restartReplica(h.replicas-1, 10*simSec) })
	}
	if h.store != nil {
		s.checkSlices(60000)
	}
	end := int64(phases) * phase
	s.run(end)
	rates := map[string]int64{}
	for j := range budgets {
		rates[fmt.Sprintf("b%02d", j)] = 60000
	}
	s.checkBound(rates, 60*simSec)
	// Utilisation: in each phase where a budget's demand is over its rate,
	// from 15s after the phase began (the first from the end of the
	// server's warm-up and the clients' first reports).
	var used, offered, worst float64 = 0, 0, 2
	windows := 0
	for p := range phases {
		from, to := int64(p)*phase+15*simSec, int64(p+1)*phase
		for j := range budgets {
			if totals[p][j] < 1.4*rate {
				continue
			}
			n := 0
			for _, at := range s.trace[fmt.Sprintf("b%02d", j)].admitted {
				if at >= from && at < to {
					n++
				}
			}
			u := float64(n) / (rate * float64(to-from) / float64(simSec))
			if u < 0.85 {
				t.Logf("phase %d budget %d: demand %.0f/s, %.1f%%", p, j, totals[p][j], 100*u)
			}
			used += float64(n)
			offered += rate * float64(to-from) / float64(simSec)
			worst = min(worst, u)
			windows++
		}
	}
	t.Logf("%d replicas: utilisation while demand exceeds the rate: %.1f%% over %d budget-phases, the lowest %.1f%%", h.replicas, 100*used/offered, windows, 100*worst)
	if windows > 0 && used/offered < 0.9 {
		t.Errorf("utilisation %.1f%%, want at least 90%%", 100*used/offered)
	}
	return used / offered
}

// usageOf is a report of one bucket id with counts.
func usageOf(id map[string]string, allowed, denied uint64) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqspb.BucketId{Bucket: id}, TimeElapsed: durationpb.New(0),
		NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

// strategyOf says what an action assigns: "allow", "deny", "abandon", or
// "tokens/fill burst".
func strategyOf(a *rlqspb.RateLimitQuotaResponse_BucketAction) string {
	if a.GetAbandonAction() != nil {
		return "abandon"
	}
	st := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
	if tb := st.GetTokenBucket(); tb != nil {
		return fmt.Sprintf("%d/%v %d", tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().AsDuration(), tb.GetMaxTokens())
	}
	return strings.ToLower(strings.TrimSuffix(st.GetBlanketRule().String(), "_ALL"))
}

// warm is a simulation past the server's warm-up, with one stream open.
func warm(t testing.TB, rules string) (*sim, *rlqsStream) {
	t.Helper()
	s := newSim(t, rules, RLQSOptions{}, 1)
	s.run(10 * simSec)
	st, err := s.q.open(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

// What real clients send is taken as it is: time_elapsed 0 (Envoy's first
// report, and any under a second), a message with no usages, no domain
// after the first message (A77). The first message must name the domain,
// and a later one may not change it.
func TestRLQSAcceptsRealClients(t *testing.T) {
	s, st := warm(t, simRules)
	if _, err := s.q.report(s.now, st, &rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"name": "x"}, 1, 0)}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a first message without a domain: %v, want InvalidArgument", err)
	}
	resp, err := s.q.report(s.now, st, &rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"name": "x"}, 1, 0)}})
	if err != nil || len(resp.GetBucketAction()) != 1 || strategyOf(resp.BucketAction[0]) != "60/1m0s 1" {
		t.Fatalf("a first report with time_elapsed 0: %v, %v; want a newcomer's grant, half the reserve: 60 a minute", resp, err)
	}
	if resp, err := s.q.report(s.now, st, &rlqspb.RateLimitQuotaUsageReports{}); err != nil || resp != nil {
		t.Errorf("a message with nothing: %v, %v; want no answer, no error", resp, err)
	}
	resp, err = s.q.report(s.now+simSec, st, &rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"name": "x"}, 3, 0)}})
	if err != nil || len(resp.GetBucketAction()) != 1 {
		t.Errorf("no domain after the first message: %v, %v", resp, err)
	}
	if _, err := s.q.report(s.now, st, &rlqspb.RateLimitQuotaUsageReports{Domain: "other"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("another domain: %v, want InvalidArgument", err)
	}
	// A usage without a bucket id is skipped: clients drop such actions.
	resp, err = s.q.report(s.now, st, &rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{}, {BucketId: &rlqspb.BucketId{}}}})
	if err != nil || resp != nil {
		t.Errorf("usages without bucket ids: %v, %v", resp, err)
	}
}

// metricValue is the value of the series name{label=value} (label ""
// for a series without labels) in s's registry, -1 when there is none.
func metricValue(t *testing.T, s *service, name, label, value string) float64 {
	t.Helper()
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := label == ""
			for _, l := range m.GetLabel() {
				ok = ok || l.GetName() == label && l.GetValue() == value
			}
			if !ok {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

const mappingRules = `domain: sim
descriptors:
  - key: name
    rate_limit: {unit: minute, requests_per_unit: 6000}
  - key: free
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: watched
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: "/api/*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: odd
    rate_limit: {period: 1500ms, requests_per_unit: 10}
`

// A bucket id is the descriptor of its entries sorted by key, in the
// stream's domain: a limited rule shares its rate (per its unit) among
// the clients, an unlimited or shadow rule or none is ALLOW_ALL,
// requests_per_unit 0 DENY_ALL, a period RLQS cannot express (not whole
// seconds) DENY_ALL; ids a shared wildcard matches share one budget.
func TestRLQSMapping(t *testing.T) {
	s, st := warm(t, mappingRules)
	for _, c := range []struct {
		id   map[string]string
		want string
	}{
		{map[string]string{"name": "x"}, "60/1m0s 1"},
		{map[string]string{"free": "y"}, "allow"},
		{map[string]string{"watched": "y"}, "allow"},
		{map[string]string{"nope": "1"}, "allow"},
		{map[string]string{"blocked": "z"}, "deny"},
		{map[string]string{"b": "2", "a": "1"}, "1/1s 1"},
		{map[string]string{"a": "1"}, "allow"},
		{map[string]string{"odd": "1"}, "deny"},
		{map[string]string{"path": "/api/x"}, "1/1s 1"},
	} {
		resp, err := s.q.report(s.now, st, &rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(c.id, 1, 0)}})
		if err != nil || len(resp.GetBucketAction()) != 1 {
			t.Fatalf("%v: %v, %v", c.id, resp, err)
		}
		a := resp.BucketAction[0]
		if got := strategyOf(a); got != c.want {
			t.Errorf("%v: %s, want %s", c.id, got, c.want)
		}
		// a newcomer's share has the TTL (its budget is not known to be
		// steady yet), a blanket answer, which reports renew, the steady
		// TTL (8s)
		ttl := 3 * time.Second
		if c.want == "allow" || c.want == "deny" {
			ttl = 8 * time.Second
		}
		if !maps.Equal(a.GetBucketId().GetBucket(), c.id) || a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration() != ttl {
			t.Errorf("%v: the action names %v with a TTL of %v, want the id as sent and %v", c.id, a.GetBucketId().GetBucket(), a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(), ttl)
		}
	}
	other, _ := s.q.open(nil)
	s.q.report(s.now, other, &rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"path": "/api/y"}, 1, 0)}})
	holders := map[string]int{}
	s.q.alloc.Each(s.now, func(b rlqs.BudgetStats) { holders[b.Key] = b.Holders })
	if holders["sim/path=%2Fapi%2F*"] != 2 || len(holders) != 3 {
		t.Errorf("budgets and their holders: %v; want /api/x and /api/y in one, and name=x and a/b", holders)
	}
}

// A bucket that counts nothing for three report intervals is told to
// abandon, shared or not; reported again, it is a new bucket.
func TestRLQSAbandonIdle(t *testing.T) {
	s, st := warm(t, mappingRules)
	for _, id := range []map[string]string{{"name": "x"}, {"free": "y"}} {
		for i := range 4 {
			n := uint64(0)
			if i == 0 {
				n = 1
			}
			resp, err := s.q.report(s.now+int64(i)*5*simSec, st, &rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(id, n, 0)}})
			if err != nil || len(resp.GetBucketAction()) != 1 {
				t.Fatalf("%v report %d: %v, %v", id, i, resp, err)
			}
			if got := strategyOf(resp.BucketAction[0]); (got == "abandon") != (i == 3) {
				t.Errorf("%v report %d: %s", id, i, got)
			}
		}
		s.now += 20 * simSec
	}
	if len(st.buckets) != 0 {
		t.Errorf("%d buckets kept after their abandon", len(st.buckets))
	}
}

// Before the warm-up ends a limited bucket gets no answer (the client
// keeps what it has); a blanket one does.
func TestRLQSWarmupWaits(t *testing.T) {
	s := newSim(t, mappingRules, RLQSOptions{}, 1)
	st, _ := s.q.open(nil)
	resp, err := s.q.report(s.now, st, &rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usageOf(map[string]string{"name": "x"}, 1, 0), usageOf(map[string]string{"free": "x"}, 1, 0)}})
	if err != nil || len(resp.GetBucketAction()) != 1 || strategyOf(resp.BucketAction[0]) != "allow" {
		t.Errorf("while warming up: %v, %v; want only the unlimited bucket answered", resp, err)
	}
}

// A client's weight comes from its stream's metadata: a whole number
// from 1 to the rlqs-weight cap; the cap + 1 is refused naming the row.
func TestRLQSWeightCap(t *testing.T) {
	s := newSim(t, simRules, RLQSOptions{}, 1)
	for _, bad := range []string{"0", "-1", "x", "1.5"} {
		if _, err := s.q.open(metadata.Pairs(WeightHeader, bad)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), WeightHeader) {
			t.Errorf("weight %q: %v, want InvalidArgument naming %s", bad, err, WeightHeader)
		}
	}
	c := limits.RLQSWeight.Default
	_, err := s.q.open(metadata.Pairs(WeightHeader, fmt.Sprint(c+1)))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), capRefusal(limits.RLQSWeight)) || !strings.Contains(err.Error(), limits.RLQSWeight.Flag()) {
		t.Errorf("weight %d: %v, want InvalidArgument naming the cap", c+1, err)
	}
	st, err := s.q.open(metadata.Pairs(WeightHeader, fmt.Sprintf(" %d ", c)))
	if err != nil || st.weight != c {
		t.Errorf("weight %d: %v, %v", c, st, err)
	}
}

// The caps of a stream's buckets and reports, and of the streams: the
// cap passes, the cap + 1 is refused, naming the row and its flag.
func TestRLQSBucketsCap(t *testing.T) {
	s, st := warm(t, simRules)
	n := int(limits.RLQSBuckets.Default)
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: "sim"}
	for i := range n + 1 {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, usageOf(map[string]string{"name": fmt.Sprint(i)}, 1, 0))
	}
	resp, err := s.q.report(s.now, st, m)
	if err != nil || len(resp.GetBucketAction()) != n+1 {
		t.Fatalf("%d buckets: %v", n+1, err)
	}
	for i, a := range resp.BucketAction {
		if got := strategyOf(a); (got == "deny") != (i == n) {
			t.Errorf("bucket %d: %s", i, got)
		}
	}
	if got := metricValue(t, s.svc, "sluice_rlqs_refused_total", "limit", limits.RLQSBuckets.Name); got != 1 || len(st.buckets) != n {
		t.Errorf("refused %v, %d buckets kept; want 1 and %d", got, len(st.buckets), n)
	}
}

func TestRLQSReportsCap(t *testing.T) {
	s, st := warm(t, simRules)
	burst := int(limits.RLQSReports.Default) * rlqsReportBurst
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: "sim"}
	for range burst / 10 {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, usageOf(map[string]string{"name": "x"}, 1, 0))
	}
	for i := range 10 {
		if _, err := s.q.report(s.now, st, m); err != nil {
			t.Fatalf("message %d of a burst of %d: %v", i, burst, err)
		}
	}
	m.BucketQuotaUsages = m.BucketQuotaUsages[:1]
	_, err := s.q.report(s.now, st, m)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), capRefusal(limits.RLQSReports)) || !strings.Contains(err.Error(), limits.RLQSReports.Flag()) {
		t.Errorf("one report more: %v, want ResourceExhausted naming the cap", err)
	}
	if _, err := s.q.report(s.now+simSec/100, st, m); err != nil {
		t.Errorf("a 100th of a second later (10 reports of room): %v", err)
	}
}

func TestRLQSClientsCap(t *testing.T) {
	s := newSim(t, simRules, RLQSOptions{}, 1)
	n := int(limits.RLQSClients.Default)
	for i := range n {
		if _, err := s.q.open(nil); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	_, err := s.q.open(nil)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), capRefusal(limits.RLQSClients)) || !strings.Contains(err.Error(), limits.RLQSClients.Flag()) {
		t.Errorf("stream %d: %v, want ResourceExhausted naming the cap", n+1, err)
	}
}

// A bucket id is capped as a descriptor is: its entries, each key and
// value, all of them together. Over a cap it is answered DENY_ALL and
// counted, and the stream goes on.
func TestRLQSBucketIDCaps(t *testing.T) {
	s, st := warm(t, simRules)
	lt := limits.Defaults()
	many := func(n int) map[string]string {
		m := map[string]string{"name": "x"}
		for i := range n - 1 {
			m[fmt.Sprintf("k%02d", i)] = "v"
		}
		return m
	}
	long := func(n int) map[string]string { return map[string]string{"name": strings.Repeat("v", n)} }
	spread := func(n int) map[string]string { // n bytes over three entries, each within entry-bytes
		return map[string]string{"name": strings.Repeat("v", n-1404), "k1": strings.Repeat("v", 698), "k2": strings.Repeat("v", 698)}
	}
	for _, c := range []struct {
		row *limits.Row
		id  func(int) map[string]string
		at  int
	}{
		{limits.Entries, many, int(lt.Entries)},
		{limits.EntryBytes, long, int(lt.EntryBytes)},
		{limits.KeyBytes, spread, int(lt.KeyBytes)},
	} {
		for _, n := range []int{c.at, c.at + 1} {
			before := metricValue(t, s.svc, "sluice_rlqs_refused_total", "limit", c.row.Name)
			resp, err := s.q.report(s.now, st, &rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(c.id(n), 1, 0)}})
			if err != nil || len(resp.GetBucketAction()) != 1 {
				t.Fatalf("%s at %d: %v, %v", c.row.Name, n, resp, err)
			}
			refused := metricValue(t, s.svc, "sluice_rlqs_refused_total", "limit", c.row.Name) - max(before, 0)
			if (refused == 1) != (n > c.at) || (strategyOf(resp.BucketAction[0]) == "deny") != (n > c.at) {
				t.Errorf("%s at %d: %s, refused %v", c.row.Name, n, strategyOf(resp.BucketAction[0]), refused)
			}
		}
	}
}

// What a client and a bucket cost the server, as docs/rlqs.md states:
// a stream with no bucket, and a bucket of its own budget (its id of one
// short entry, its serve and allocator state).
func TestRLQSMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory is counted in the heap")
	}
	s, _ := warm(t, simRules)
	heap := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	const n = 2000
	h0 := heap()
	streams := make([]*rlqsStream, n)
	for i := range streams {
		streams[i], _ = s.q.open(nil)
	}
	perClient := (heap() - h0) / n
	st := streams[0]
	h1 := heap()
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: "sim"}
	for i := range n / 2 {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, usageOf(map[string]string{"name": fmt.Sprintf("bucket-%04d", i)}, 1, 0))
	}
	if _, err := s.q.report(s.now, st, m); err != nil {
		t.Fatal(err)
	}
	m = nil
	perBucket := (heap() - h1) / (n / 2)
	t.Logf("a client (stream, no bucket): %d bytes; a bucket (its own budget): %d bytes (%d buckets, %d holders)", perClient, perBucket, len(st.buckets), len(s.q.holders.slots)-len(s.q.holders.free))
	if perClient > 1024 || perBucket > 2048 {
		t.Errorf("a client %d bytes, a bucket %d: want within 1 KiB and 2 KiB (docs/rlqs.md)", perClient, perBucket)
	}
	runtime.KeepAlive(streams)
	runtime.KeepAlive(s)
}

// Whatever bytes arrive, a report is answered or refused, never a panic,
// and every action names a bucket id the stream has sent (this report's,
// or an earlier one's whose budget the report shared again at once).
func FuzzRLQSReport(f *testing.F) {
	for _, m := range []*rlqspb.RateLimitQuotaUsageReports{
		{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"name": "x"}, 3, 1)}},
		{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{}, usageOf(map[string]string{"": ""}, 0, 0)}},
		{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"a": "1", "b": "2"}, math.MaxUint64, math.MaxUint64)}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b, int64(0))
	}
	s, st := warm(f, mappingRules)
	sent := map[string]bool{}
	f.Fuzz(func(t *testing.T, wire []byte, dt int64) {
		var m rlqspb.RateLimitQuotaUsageReports
		if proto.Unmarshal(wire, &m) != nil {
			return
		}
		for _, u := range m.GetBucketQuotaUsages() {
			sent[bucketKeyOf(u.GetBucketId().GetBucket())] = true
		}
		s.now += dt & (1<<30 - 1)
		resp, err := s.q.report(s.now, st, &m)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.ResourceExhausted {
				t.Fatalf("%v: %v", &m, err)
			}
			return
		}
		for _, a := range resp.GetBucketAction() {
			if !sent[bucketKeyOf(a.GetBucketId().GetBucket())] {
				t.Fatalf("an action for %v, which the stream never named", a.GetBucketId())
			}
		}
	})
}

// A holder's number names one bucket, never two: a slot freed and taken
// again gets a new generation, and the old number finds nothing.
func TestHolderSlots(t *testing.T) {
	var hs holderSlots
	a, b := &rlqsBucket{}, &rlqsBucket{}
	ha := hs.add(a)
	hs.remove(ha)
	hb := hs.add(b)
	if ha == 0 || hb == 0 || ha == hb || hs.get(ha) != nil || hs.get(hb) != b || len(hs.slots) != 1 {
		t.Errorf("holders %x and %x of one slot: get %p and %p, %d slots", ha, hb, hs.get(ha), hs.get(hb), len(hs.slots))
	}
	hs.remove(ha) // late: b's stays
	if hs.get(hb) != b || hs.get(rlqs.Holder(1<<32|7)) != nil {
		t.Error("a stale or unknown number removed or found a bucket")
	}
}

// A named client's new stream takes its old stream's buckets over only
// when its first message names the same domain; else they are let go.
// Replaced again before that message, the newest stream inherits them.
func TestRLQSClientInherits(t *testing.T) {
	s, _ := warm(t, simRules)
	md := metadata.Pairs(ClientHeader, "edge-1")
	report := func(st *rlqsStream, domain string) {
		t.Helper()
		if _, err := s.q.report(s.now, st, &rlqspb.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"name": "x"}, 1, 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		domain string
		kept   bool
	}{{"sim", true}, {"elsewhere", false}} {
		first, _ := s.q.open(md)
		report(first, "sim")
		b := first.buckets[bucketKey([]rlsconfig.Entry{{Key: "name", Value: "x"}})]
		h := b.holder
		second, _ := s.q.open(md) // replaced before its first message
		third, _ := s.q.open(md)
		if !first.closed || !second.closed || third.heir == nil || b.st != third {
			t.Fatalf("%s: the replaced streams closed %v %v, the heir %v", c.domain, first.closed, second.closed, third.heir)
		}
		report(third, c.domain)
		if kept := s.q.holders.get(h) == b && third.buckets[bucketKey([]rlsconfig.Entry{{Key: "name", Value: "x"}})] == b; kept != c.kept {
			t.Errorf("first message in %q: the old bucket kept %v, want %v", c.domain, kept, c.kept)
		}
		s.q.close(third)
	}
}
