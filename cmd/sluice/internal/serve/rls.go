package serve

import (
	"context"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/fastclock"
)

// rls is the gRPC RateLimitService.
type rls struct{ s *service }

// ShouldRateLimit decides one call.
func (h rls) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	start := fastclock.Micros()
	resp := &pb.RateLimitResponse{}
	_, err := h.s.shouldRateLimit(ctx, req, resp, h.s.opts.Headers)
	h.s.metrics.grpcLatency.Observe(sinceMicros(start).Seconds())
	if err != nil {
		err = grpcError(err)
		h.s.count("grpc", codeLabel(err))
		return nil, err
	}
	h.s.answered.Add(1)
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		h.s.metrics.grpcOver.Inc()
	} else {
		h.s.metrics.grpcOK.Inc()
	}
	return resp, nil
}

// codeLabel is the calls metric's code for a failed call.
func codeLabel(err error) string {
	switch status.Code(err) {
	case codes.InvalidArgument:
		return "invalid"
	case codes.Unavailable:
		return "unavailable"
	}
	return "error"
}

func (s *service) countCode(door string, c pb.RateLimitResponse_Code) {
	if c == pb.RateLimitResponse_OVER_LIMIT {
		s.count(door, "over_limit")
	} else {
		s.count(door, "ok")
	}
}

func (s *service) count(door, code string) {
	s.answered.Add(1)
	s.metrics.calls.WithLabelValues(door, code).Inc()
}
