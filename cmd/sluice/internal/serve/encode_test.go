package serve

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// checkEncoding: the codec's encoding of r is proto.Marshal's (deterministic),
// byte for byte, whether it goes through appendResponse or not.
func checkEncoding(t *testing.T, r *pb.RateLimitResponse) {
	t.Helper()
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if encodable(r) {
		if n := responseSize(r); n != len(want) {
			t.Fatalf("responseSize = %d, want %d for %v", n, len(want), r)
		}
	}
	out, err := newCodec().Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got := out.Materialize()
	out.Free()
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded %x\nwant    %x\nfor %v", got, want, r)
	}
}

// TestEncodeResponse: random responses, with every field the service sets
// (zero or not, extremes included), encode as proto.Marshal does.
func TestEncodeResponse(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 0))
	u32 := func() uint32 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return math.MaxUint32
		}
		return rng.Uint32() >> rng.IntN(32)
	}
	str := func() string {
		return []string{"", "a", "per_user", "ü-名", string(make([]byte, 200))}[rng.IntN(5)]
	}
	for range 2000 {
		r := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_Code(rng.IntN(4))}
		for range rng.IntN(4) {
			s := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_Code(rng.IntN(3)), LimitRemaining: u32()}
			if rng.IntN(4) > 0 {
				s.CurrentLimit = &pb.RateLimitResponse_RateLimit{RequestsPerUnit: u32(),
					Unit: pb.RateLimitResponse_RateLimit_Unit(rng.IntN(7)), Name: str()}
			}
			if rng.IntN(4) > 0 {
				s.DurationUntilReset = &durationpb.Duration{Seconds: []int64{0, 1, 59, math.MaxInt64, -1}[rng.IntN(5)],
					Nanos: []int32{0, 1, 999_999_999, -5}[rng.IntN(4)]}
			}
			if rng.IntN(8) == 0 {
				s = &pb.RateLimitResponse_DescriptorStatus{}
			}
			r.Statuses = append(r.Statuses, s)
		}
		for range rng.IntN(4) {
			h := &corev3.HeaderValue{Key: str(), Value: str()}
			if rng.IntN(4) == 0 {
				h.RawValue = []byte(str())
			}
			r.ResponseHeadersToAdd = append(r.ResponseHeadersToAdd, h)
		}
		if !encodable(r) {
			t.Fatalf("not encodable: %v", r)
		}
		checkEncoding(t, r)
	}
}

// TestEncodeResponseFallback: a response with a field the service does not
// set, or unknown fields, goes to protobuf's marshaller, and encodes the same.
func TestEncodeResponseFallback(t *testing.T) {
	st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: 3}
	unknown := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	unknown.ProtoReflect().SetUnknown([]byte{0x50, 0x01}) // field 10, varint 1
	for _, r := range []*pb.RateLimitResponse{
		{OverallCode: pb.RateLimitResponse_OK, RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "k", Value: "v"}}},
		{OverallCode: pb.RateLimitResponse_OVER_LIMIT, RawBody: []byte("no")},
		{OverallCode: pb.RateLimitResponse_OK, DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewNumberValue(1)}}},
		{OverallCode: pb.RateLimitResponse_OK, Quota: &pb.RateLimitResponse_Quota{Requests: 5}},
		{Statuses: []*pb.RateLimitResponse_DescriptorStatus{st, {Quota: &pb.RateLimitResponse_Quota{Requests: 1}}}},
		unknown,
	} {
		if encodable(r) {
			t.Errorf("encodable(%v) = true, want false", r)
		}
		checkEncoding(t, r)
	}
}

// FuzzEncodeResponse: any response protobuf decodes, the codec encodes as
// proto.Marshal does.
func FuzzEncodeResponse(f *testing.F) {
	for _, r := range []*pb.RateLimitResponse{
		{OverallCode: pb.RateLimitResponse_OVER_LIMIT, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: 2,
			CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Unit: 1, Name: "n"}, LimitRemaining: 0,
			DurationUntilReset: &durationpb.Duration{Seconds: 1}}}, ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit", Value: `"n";r=0;t=1`}}},
		{},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r pb.RateLimitResponse
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		checkEncoding(t, &r)
	})
}
