package serve

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the fallback codec
	"google.golang.org/grpc/mem"
)

// vtMessage is a message with the marshalling vtprotobuf generates: no
// reflection on the way out. go-control-plane's types have it only when
// built with the vtprotobuf tag; the service's responses are encoded by
// appendResponse either way.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict([]byte) (int, error)
}

// codec is grpc's "proto" codec for the server: it encodes the service's
// RateLimitResponse with appendResponse, other messages with the generated
// code where they have it, and decodes RateLimitRequest with decodeRequest;
// every other message goes to grpc's own codec.
type codec struct{ fallback encoding.CodecV2 }

func newCodec() codec { return codec{fallback: encoding.GetCodecV2("proto")} }

// Name is the codec's content subtype, "proto".
func (codec) Name() string { return "proto" }

// Marshal encodes v.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*pb.RateLimitResponse); ok && encodable(r) {
		return marshalSized(responseSize(r), func(b []byte) (int, error) { return len(appendResponse(b[:0], r)), nil })
	}
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	return marshalSized(m.SizeVT(), m.MarshalToSizedBufferVTStrict)
}

// marshalSized returns the size bytes marshal writes into the buffer it is
// given, in a buffer of grpc's pool when the message is large enough to be
// worth one.
func marshalSized(size int, marshal func([]byte) (int, error)) (mem.BufferSlice, error) {
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := marshal(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := marshal((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes data into v.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*pb.RateLimitRequest)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return decodeRequest(data[0].ReadOnlyData(), req)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decodeRequest(buf.ReadOnlyData(), req)
}
