package serve

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
)

// encodable reports whether appendResponse encodes r whole: the fields the
// service sets (the overall code, the statuses with their code, limit,
// remaining count and reset, the response headers) and no other, nor
// unknown fields. The codec marshals any other response with protobuf's own
// marshaller.
func encodable(r *pb.RateLimitResponse) bool {
	if len(r.RequestHeadersToAdd) != 0 || len(r.RawBody) != 0 || r.DynamicMetadata != nil || r.Quota != nil ||
		len(r.ProtoReflect().GetUnknown()) != 0 {
		return false
	}
	for _, s := range r.Statuses {
		if s == nil {
			continue
		}
		if s.Quota != nil || len(s.ProtoReflect().GetUnknown()) != 0 ||
			s.CurrentLimit != nil && len(s.CurrentLimit.ProtoReflect().GetUnknown()) != 0 ||
			s.DurationUntilReset != nil && len(s.DurationUntilReset.ProtoReflect().GetUnknown()) != 0 {
			return false
		}
	}
	for _, h := range r.ResponseHeadersToAdd {
		if h != nil && len(h.ProtoReflect().GetUnknown()) != 0 {
			return false
		}
	}
	return true
}

// responseSize is the size of r's encoding by appendResponse.
func responseSize(r *pb.RateLimitResponse) int {
	n := 0
	if r.OverallCode != 0 {
		n += 1 + protowire.SizeVarint(uint64(r.OverallCode))
	}
	for _, s := range r.Statuses {
		n += 1 + protowire.SizeBytes(statusSize(s))
	}
	for _, h := range r.ResponseHeadersToAdd {
		n += 1 + protowire.SizeBytes(headerSize(h))
	}
	return n
}

// appendResponse appends r's protobuf encoding to b, as proto.Marshal
// encodes it (fields in number order, zero scalars left out); r must be
// encodable.
func appendResponse(b []byte, r *pb.RateLimitResponse) []byte {
	if r.OverallCode != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.OverallCode))
	}
	for _, s := range r.Statuses {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(statusSize(s)))
		b = appendStatus(b, s)
	}
	for _, h := range r.ResponseHeadersToAdd {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(headerSize(h)))
		b = appendHeader(b, h)
	}
	return b
}

func statusSize(s *pb.RateLimitResponse_DescriptorStatus) int {
	if s == nil {
		return 0
	}
	n := 0
	if s.Code != 0 {
		n += 1 + protowire.SizeVarint(uint64(s.Code))
	}
	if s.CurrentLimit != nil {
		n += 1 + protowire.SizeBytes(limitSize(s.CurrentLimit))
	}
	if s.LimitRemaining != 0 {
		n += 1 + protowire.SizeVarint(uint64(s.LimitRemaining))
	}
	if s.DurationUntilReset != nil {
		n += 1 + protowire.SizeBytes(durationSize(s.DurationUntilReset))
	}
	return n
}

func appendStatus(b []byte, s *pb.RateLimitResponse_DescriptorStatus) []byte {
	if s == nil {
		return b
	}
	if s.Code != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s.Code))
	}
	if l := s.CurrentLimit; l != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(limitSize(l)))
		if l.RequestsPerUnit != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(l.RequestsPerUnit))
		}
		if l.Unit != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(l.Unit))
		}
		if l.Name != "" {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendString(b, l.Name)
		}
	}
	if s.LimitRemaining != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s.LimitRemaining))
	}
	if d := s.DurationUntilReset; d != nil {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(durationSize(d)))
		if d.Seconds != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(d.Seconds))
		}
		if d.Nanos != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(int64(d.Nanos)))
		}
	}
	return b
}

func limitSize(l *pb.RateLimitResponse_RateLimit) int {
	n := 0
	if l.RequestsPerUnit != 0 {
		n += 1 + protowire.SizeVarint(uint64(l.RequestsPerUnit))
	}
	if l.Unit != 0 {
		n += 1 + protowire.SizeVarint(uint64(l.Unit))
	}
	if l.Name != "" {
		n += 1 + protowire.SizeBytes(len(l.Name))
	}
	return n
}

func durationSize(d *durationpb.Duration) int {
	n := 0
	if d.Seconds != 0 {
		n += 1 + protowire.SizeVarint(uint64(d.Seconds))
	}
	if d.Nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(d.Nanos)))
	}
	return n
}

func headerSize(h *corev3.HeaderValue) int {
	if h == nil {
		return 0
	}
	n := 0
	if h.Key != "" {
		n += 1 + protowire.SizeBytes(len(h.Key))
	}
	if h.Value != "" {
		n += 1 + protowire.SizeBytes(len(h.Value))
	}
	if len(h.RawValue) != 0 {
		n += 1 + protowire.SizeBytes(len(h.RawValue))
	}
	return n
}

func appendHeader(b []byte, h *corev3.HeaderValue) []byte {
	if h == nil {
		return b
	}
	if h.Key != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, h.Key)
	}
	if h.Value != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, h.Value)
	}
	if len(h.RawValue) != 0 {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, h.RawValue)
	}
	return b
}
