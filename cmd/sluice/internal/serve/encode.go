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

// The response's fields all have numbers under 16: one-byte tags.

// varintSize is the size of a varint field holding v: none for 0 (proto3
// leaves zero scalars out).
func varintSize(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

// bytesSize is the size of a bytes field of n bytes: none for 0, as above.
func bytesSize(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(n)
}

// varintField appends field num holding v, unless v is 0.
func varintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// stringField appends field num holding v, unless v is empty.
func stringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// messageField appends the tag and length of field num, a message of size
// bytes, which the caller appends next.
func messageField(b []byte, num protowire.Number, size int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(size))
}

// responseSize is the size of r's encoding by appendResponse.
func responseSize(r *pb.RateLimitResponse) int {
	n := varintSize(uint64(r.OverallCode))
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
	b = varintField(b, 1, uint64(r.OverallCode))
	for _, s := range r.Statuses {
		b = appendStatus(messageField(b, 2, statusSize(s)), s)
	}
	for _, h := range r.ResponseHeadersToAdd {
		b = appendHeader(messageField(b, 3, headerSize(h)), h)
	}
	return b
}

func statusSize(s *pb.RateLimitResponse_DescriptorStatus) int {
	if s == nil {
		return 0
	}
	n := varintSize(uint64(s.Code)) + varintSize(uint64(s.LimitRemaining))
	if s.CurrentLimit != nil {
		n += 1 + protowire.SizeBytes(limitSize(s.CurrentLimit))
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
	b = varintField(b, 1, uint64(s.Code))
	if l := s.CurrentLimit; l != nil {
		b = messageField(b, 2, limitSize(l))
		b = varintField(b, 1, uint64(l.RequestsPerUnit))
		b = varintField(b, 2, uint64(l.Unit))
		b = stringField(b, 3, l.Name)
	}
	b = varintField(b, 3, uint64(s.LimitRemaining))
	if d := s.DurationUntilReset; d != nil {
		b = messageField(b, 4, durationSize(d))
		b = varintField(b, 1, uint64(d.Seconds))
		b = varintField(b, 2, uint64(int64(d.Nanos))) // a negative int32 is ten bytes, as int64
	}
	return b
}

func limitSize(l *pb.RateLimitResponse_RateLimit) int {
	return varintSize(uint64(l.RequestsPerUnit)) + varintSize(uint64(l.Unit)) + bytesSize(len(l.Name))
}

func durationSize(d *durationpb.Duration) int {
	return varintSize(uint64(d.Seconds)) + varintSize(uint64(int64(d.Nanos)))
}

func headerSize(h *corev3.HeaderValue) int {
	if h == nil {
		return 0
	}
	return bytesSize(len(h.Key)) + bytesSize(len(h.Value)) + bytesSize(len(h.RawValue))
}

func appendHeader(b []byte, h *corev3.HeaderValue) []byte {
	if h == nil {
		return b
	}
	b = stringField(b, 1, h.Key)
	b = stringField(b, 2, h.Value)
	if len(h.RawValue) != 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), h.RawValue)
	}
	return b
}
