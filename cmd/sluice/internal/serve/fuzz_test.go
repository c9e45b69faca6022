package serve

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/memstore"
)

// FuzzDecodeRequest feeds arbitrary bytes to the request decoders of every
// door (/json's protojson, the JSON of /v1/take, /v1/charge and
// /v1/settle, gRPC's protobuf) and decides what they accept against a real
// configuration (charge rules among its rules): an error or an answer,
// never a panic.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"domain": "test", "descriptors": [{"entries": [{"key": "key1", "value": "value1"}]}]}`,
		`{"domain": "test", "hits_addend": 3, "descriptors": [{"entries": [{"key": "nested", "value": "a"}, {"key": "sub", "value": "x"}], "hits_addend": "0"}]}`,
		`{"domain": "test", "descriptors": [{"entries": [{"key": "key1", "value": "v"}], "limit": {"requests_per_unit": 1, "unit": "SECOND"}}]}`,
		`{"domain": "test", "descriptors": [[{"key": "wild", "value": "foo1"}], [{"key": "free"}]], "hits_addend": 2}`,
		`{"key": "k", "limit": "10/1s gcra burst 50", "cost": 2}`,
		`{"key": "k", "limit": "1/1s", "cost": -1}`,
		`{"domain": "", "descriptors": []}`,
		`{"domain": "meta", "hits_addend": 2, "descriptors": [{"entries": [{"key": "tenant", "value": "a"}]}, {"entries": [{"key": "user", "value": "b"}], "hits_addend": "1"}, {"entries": [{"key": "free", "value": "x"}]}]}`,
		`{"domain": "gq", "descriptors": [{"entries": [{"key": "q", "value": "a"}]}, {"entries": [{"key": "sq", "value": "a"}]}, {"entries": [{"key": "user", "value": "a"}], "is_negative_hits": true, "hits_addend": "1"}]}`,
		`{"domain": "llm", "descriptors": [{"entries": [{"key": "api_key", "value": "k"}], "hits_addend": "4000"}, {"entries": [{"key": "requests", "value": "k"}]}]}`,
		`{"domain": "llm", "hits_addend": 7, "descriptors": [[{"key": "tenant", "value": "t"}], [{"key": "trial", "value": "x"}]]}`,
		`{"key": "k", "limit": "1000/1m debt 5000", "cost": 4000}`,
		`{"key": "k", "limit": "100/1m fixed-window debt 50", "estimate": 80, "actual": 130, "take": {"allowed": true, "window_us": 1764000060000000}}`,
		`{"key": "k", "limit": "1/1s sliding-log", "estimate": 1, "actual": 0, "take": {"allowed": false, "degraded": true}}`,
		`{`, `null`, `[]`, `{"domain": "test", "descriptors": [{}]}`,
	} {
		f.Add([]byte(s))
	}
	seed, _ := proto.Marshal(&pb.RateLimitRequest{Domain: "test", HitsAddend: 1, Descriptors: nil})
	f.Add(seed)
	cfg, err := rlsconfig.Parse(map[string][]byte{"test.yaml": []byte(testConfig)})
	if err != nil {
		f.Fatal(err)
	}
	clock := &fakeClock{t: t0}
	s := newService(Options{Store: memstore.New(memstore.WithClock(clock)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	s.state.Store(&state{cfg: cfg, counters: map[*rlsconfig.Rule]*ruleCounters{}})
	// And envoy's modes: global quota, dynamic metadata, renamed headers,
	// with the parts decided at once (as on Redis), and a per-second store.
	mcfg, err := rlsconfig.Parse(map[string][]byte{"test.yaml": []byte(testConfig), "meta.yaml": []byte(metaConfig), "gq.yaml": []byte(globalQuotaConfig), "llm.yaml": []byte(chargeConfig)})
	if err != nil {
		f.Fatal(err)
	}
	meta, err := ruleMetadata(mcfg.Rules())
	if err != nil {
		f.Fatal(err)
	}
	names, _ := EnvoyHeaderNames{Limit: "X-Limit"}.withDefaults()
	m := newService(Options{GlobalQuota: true, DynamicMetadata: true, HeaderNames: names,
		Store: s.opts.Store, PerSecondStore: memstore.New(memstore.WithClock(clock)), // per-second limits apart (--store-per-second)
		Logger: s.log})
	m.togetherMain, m.togetherSec = true, true // enforced and shadow parts in one TakeEach, as over Redis
	m.state.Store(&state{cfg: mcfg, counters: map[*rlsconfig.Rule]*ruleCounters{}, metadata: meta})
	enc := newCodec()
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := context.Background()
		if req, err := decodeJSONRequest(b); err == nil {
			s.shouldRateLimit(ctx, req, &pb.RateLimitResponse{}, HeadersDraft11)
			resp := &pb.RateLimitResponse{}
			if _, err := m.shouldRateLimit(ctx, req, resp, HeadersEnvoy); err == nil {
				if _, err := enc.Marshal(resp); err != nil {
					t.Fatalf("encoding %v: %v", resp, err)
				}
			}
			// As /v1/charge decides it: every limited descriptor charged.
			m.decideCall(ctx, req, &pb.RateLimitResponse{}, HeadersDraft11, callOptions{chargeAll: true, debts: make([]int64, len(req.Descriptors))})
		}
		if tr, err := decodeTakeRequest(b); err == nil && tr.Key != "" {
			if lim, err := sluice.ParseLimit(tr.Limit); err == nil && tr.Cost != nil {
				s.lim.Take(ctx, tr.Key, lim, *tr.Cost)
				s.lim.Charge(ctx, tr.Key, lim, *tr.Cost)
			}
		}
		if sr, err := decodeSettleRequest(b); err == nil {
			if lim, err := sluice.ParseLimit(sr.Limit); err == nil {
				take := sluice.Result{Allowed: sr.Take.Allowed, Degraded: sr.Take.Degraded, Window: sr.Take.WindowUS}
				s.lim.Settle(ctx, sr.Key, lim, *sr.Estimate, *sr.Actual, take)
			}
		}
		var req pb.RateLimitRequest
		if proto.Unmarshal(b, &req) == nil {
			s.shouldRateLimit(ctx, &req, &pb.RateLimitResponse{}, HeadersEnvoy)
		}
	})
}

// FuzzDecodeProto: decodeRequest (the gRPC door's decoder) accepts what
// proto.Unmarshal accepts and decodes it to the same message, unknown fields
// aside, and refuses what it refuses.
func FuzzDecodeProto(f *testing.F) {
	for _, r := range []*pb.RateLimitRequest{
		{Domain: "test", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{desc("a=b", "c"), withHits(desc("k=v"), 0)}},
		{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k"}}, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: 2}, IsNegativeHits: true}}},
		{},
		{Domain: "ü", Descriptors: []*rlv3.RateLimitDescriptor{{}, desc("x=y")}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x02, 0xff, 0xfe})             // domain not UTF-8
	f.Add([]byte{0x12, 0x04, 0x0a, 0x02, 0x0a, 0x05}) // truncated entry
	f.Add([]byte{0x08, 0x01, 0x1a, 0x00, 0x62, 0x00}) // wrong wire types, unknown field
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got pb.RateLimitRequest
		werr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, &want)
		gerr := decodeRequest(b, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("proto.Unmarshal: %v, decodeRequest: %v", werr, gerr)
		}
		if werr == nil && !proto.Equal(&want, &got) {
			t.Fatalf("decoded\n%v\nwant\n%v", &got, &want)
		}
	})
}

// FuzzKeyNamespaces: no descriptor's store key, with or without
// DomainSlot, begins as /v1/take's keys do, whatever the domain and entries
// (TestTakeKeyOwnNamespace shows what that keeps apart).
func FuzzKeyNamespaces(f *testing.F) {
	for _, s := range [][3]string{
		{"test", "key1", "alice"}, {"/", "/", "/"}, {"{", "}", "="}, {"%2F", "a", ""}, {"/edge", "k", "v"}, {"a/b", "c", "d/e"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, domain, key, value string) {
		if domain == "" || key == "" {
			return // refused before a key is built (validate)
		}
		r, err := rlsconfig.Override(domain, []rlsconfig.Entry{{Key: key, Value: value}}, 1, "second")
		if err != nil {
			t.Fatal(err)
		}
		k := r.Key([]rlsconfig.Entry{{Key: key, Value: value}})
		for _, k := range []string{k, domainSlot(k)} {
			if strings.HasPrefix(k, takeKeyPrefix) {
				t.Errorf("domain %q, entry %q=%q: store key %q begins as a /v1/take key", domain, key, value, k)
			}
		}
	})
}
