package serve

import (
	"context"
	"errors"
	"io"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rlqsServer is the gRPC RateLimitQuotaService over an rlqsService.
type rlqsServer struct{ q *rlqsService }

// errShuttingDown ends the streams when the server shuts down: a client
// reconnects, to this server once it is back or to another.
var errShuttingDown = status.Error(codes.Unavailable, "the server is shutting down")

// StreamRateLimitQuotas serves one client: each report is answered on
// the stream, and the rounds push what changes in between. One goroutine
// writes to the stream (a push it has no room for is dropped), another
// reads; the stream ends when the client ends it, when either fails,
// when the server shuts down, or when a stream of the same client
// (ClientHeader) replaces it.
func (h rlqsServer) StreamRateLimitQuotas(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	st, err := h.q.open(md)
	if err != nil {
		return err
	}
	defer h.q.close(st)
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	sent, received := make(chan error, 1), make(chan error, 1)
	go func() { sent <- h.send(ctx, stream, st) }()
	go func() { received <- h.recv(ctx, stream, st) }()
	senderDone := false
	select {
	case err = <-received:
	case err = <-sent:
		senderDone = true // the stream's context ended, or a Send failed
	case <-h.q.stopping:
		err = errShuttingDown
	case <-st.replaced:
		err = status.Errorf(codes.Aborted, "a newer stream of client %q has replaced this one", st.client)
	}
	cancel()
	// The sender is done with the stream before this returns; the
	// receiver may wait in Recv until the stream ends, and then finds
	// its stream closed.
	if !senderDone {
		if serr := <-sent; err == nil {
			err = serr
		}
	}
	return err
}

// send writes st's messages to the stream until ctx ends.
func (h rlqsServer) send(ctx context.Context, stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer, st *rlqsStream) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-st.out:
			if err := stream.Send(m); err != nil {
				return err
			}
		}
	}
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
