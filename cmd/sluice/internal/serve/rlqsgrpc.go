package serve

import (
	"context"
	"errors"
	"io"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/metadata"
)

// rlqsServer is the gRPC RateLimitQuotaService over an rlqsService.
type rlqsServer struct{ q *rlqsService }

// StreamRateLimitQuotas serves one client: each report is answered on
// the stream, and the rounds push what changes in between. One goroutine
// writes to the stream; a push it has no room for is dropped.
func (h rlqsServer) StreamRateLimitQuotas(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	st, err := h.q.open(md.Get(WeightHeader))
	if err != nil {
		return err
	}
	defer h.q.close(st)
	ctx, cancel := context.WithCancel(stream.Context())
	sent := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				sent <- nil
				return
			case m := <-st.out:
				if err := stream.Send(m); err != nil {
					cancel()
					sent <- err
					return
				}
			}
		}
	}()
	err = h.recv(ctx, stream, st)
	cancel()
	if serr := <-sent; err == nil {
		err = serr
	}
	return err
}

// recv answers st's reports until the client ends the stream (nil), the
// stream fails, or a report ends it.
func (h rlqsServer) recv(ctx context.Context, stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer, st *rlqsStream) error {
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := h.q.report(h.q.now(), st, msg)
		if err != nil {
			return err
		}
		if resp == nil {
			continue
		}
		select {
		case st.out <- resp:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
