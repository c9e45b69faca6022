package serve

import (
	"fmt"
	"testing"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"
)

// rlqsFleet is a server past its warm-up with 1,000 streams of 100
// buckets each, over 10,000 budgets (10 clients each), every bucket
// reported once; and each stream's report, encoded.
func rlqsFleet(b *testing.B, o RLQSOptions) (*sim, []*rlqsStream, [][]byte) {
	b.Helper()
	s := newSim(b, simRules, o, 1)
	s.run(10 * simSec)
	const streams, buckets, budgets = 1000, 100, 10000
	sts := make([]*rlqsStream, streams)
	wires := make([][]byte, streams)
	for i := range sts {
		st, err := s.q.open(nil)
		if err != nil {
			b.Fatal(err)
		}
		m := &rlqspb.RateLimitQuotaUsageReports{Domain: "sim"}
		for j := range buckets {
			m.BucketQuotaUsages = append(m.BucketQuotaUsages, usageOf(map[string]string{"name": fmt.Sprintf("b%05d", (i*buckets+j)%budgets)}, 40, 10))
		}
		if _, err := s.q.report(s.now, st, m); err != nil {
			b.Fatal(err)
		}
		sts[i] = st
		if wires[i], err = proto.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
	// Two more reports of each stream, 5s apart, with the rounds between:
	// demands known and shares settled, as in a server that has run a
	// while (a client's first samples share its budgets at once).
	for range 2 {
		for i, st := range sts {
			s.now += 5 * simSec / streams
			var m rlqspb.RateLimitQuotaUsageReports
			if err := proto.Unmarshal(wires[i], &m); err != nil {
				b.Fatal(err)
			}
			if _, err := s.q.report(s.now, st, &m); err != nil {
				b.Fatal(err)
			}
			if (i+1)%(streams/5) == 0 {
				s.q.round(s.now)
			}
		}
	}
	return s, sts, wires
}

// One Envoy's report of its 100 buckets, decoded and answered: 1,000
// Envoys reporting every 5s send 200 of them a second.
func BenchmarkRLQSReport(b *testing.B) {
	s, sts, wires := rlqsFleet(b, RLQSOptions{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := i % len(sts)
		var m rlqspb.RateLimitQuotaUsageReports
		if err := proto.Unmarshal(wires[k], &m); err != nil {
			b.Fatal(err)
		}
		s.now += 5 * simSec / int64(len(sts)) // each stream every 5s
		if _, err := s.q.report(s.now, sts[k], &m); err != nil {
			b.Fatal(err)
		}
	}
}

// A round of 10,000 budgets of 10 clients each. The clients never fall
// silent (however long the benchmark runs between their reports), so
// every round shares every budget and refreshes what is due.
func BenchmarkRLQSRound(b *testing.B) {
	s, _, _ := rlqsFleet(b, RLQSOptions{Config: rlqs.Config{IdleReports: 1 << 20}})
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.now += simSec
		s.q.round(s.now)
	}
}
