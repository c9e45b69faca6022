package serve

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
)

// XDSTypeURL is the resource type a Server asks an xDS server for, the one
// envoyproxy/ratelimit asks for (CONFIG_TYPE=GRPC_XDS_SOTW) and Envoy
// Gateway serves.
const XDSTypeURL = rlsconfig.XDSTypeURL

// XDSOptions take a Server's rules from an xDS management server
// (Options.XDS), as envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW:
// one state-of-the-world stream of the aggregated discovery service for
// RateLimitConfig resources. Each response is the whole configuration (each
// resource a file of it) and is applied as a file reload is: whole and
// atomically, or, when it does not load, NACKed with the load's error while
// the rules in use stay; a response that was NACKed, sent again (as a
// server does on a new stream), is NACKed with the same error unread.
// When the stream breaks, the Server keeps its rules and connects again
// after a backoff. Options.Limits caps a response: its resources' bytes
// (ConfigBytes), rules and depth (rlsconfig.Options.ParseXDS).
type XDSOptions struct {
	// Server is the xDS server's gRPC target: HOST:PORT (envoy's
	// CONFIG_GRPC_XDS_SERVER_URL).
	Server string
	// NodeID is the node the server keys its snapshots by (default
	// "default", envoy's CONFIG_GRPC_XDS_NODE_ID); NodeMetadata its
	// metadata (envoy's CONFIG_GRPC_XDS_NODE_METADATA).
	NodeID       string
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on the stream (envoy's
	// CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers map[string]string
	// TLS, when set, connects with TLS (with Certificates, mutual TLS);
	// nil connects in plain text.
	TLS *tls.Config
	// BackoffMin and BackoffMax bound the wait before connecting again
	// after the stream breaks: BackoffMin first, doubling up to BackoffMax,
	// each wait drawn between half and the whole of it; a stream that got
	// a response starts over from BackoffMin (default 500ms and 30s).
	BackoffMin, BackoffMax time.Duration
	// ForceStart serves an empty configuration (every descriptor OK)
	// until the server's first arrives, as envoy's
	// FORCE_START_WITHOUT_INITIAL_CONFIG does; without it calls are
	// answered UNAVAILABLE (HTTP 503) and the gRPC health NOT_SERVING until
	// then.
	ForceStart bool
}

// withDefaults is o with its zero fields defaulted, checked.
func (o XDSOptions) withDefaults() (XDSOptions, error) {
	if o.Server == "" {
		return o, errors.New("xDS: no server address")
	}
	if o.NodeID == "" {
		o.NodeID = "default"
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 500 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 30 * time.Second
	}
	if o.BackoffMax < o.BackoffMin {
		return o, fmt.Errorf("xDS: backoff maximum %s below its minimum %s", o.BackoffMax, o.BackoffMin)
	}
	return o, nil
}

// origin is ConfigView.Origin for the rules of version (none yet: "").
func (o *XDSOptions) origin(version string) string {
	s := "xDS " + o.Server + " (node " + o.NodeID
	if version != "" {
		s += ", version " + version
	}
	return s + ")"
}

// xdsClient is a Server's stream to its xDS server.
type xdsClient struct {
	srv     *Server
	o       *XDSOptions
	conn    *grpc.ClientConn
	node    *corev3.Node
	version string // the last version accepted, sent on each request
	// rejected is the last response that did not load: its fingerprint
	// and its error, the NACK of the same response sent again.
	rejected struct {
		sum [sha256.Size]byte
		err error
	}
	parses atomic.Int64 // responses parsed, for tests
}

// recvBytes is the largest message the stream reads: twice config-bytes
// and 1 MiB, room for the resources' type URLs and the response around
// them. gRPC refuses a larger one before reading it, and the stream
// breaks.
func recvBytes(lt *limits.Table) int {
	return int(min(2*lt.ConfigBytes+1<<20, math.MaxInt32))
}

// newXDSClient is the client of s.opts.XDS; it dials lazily, so a server
// that is not up yet is not an error.
func newXDSClient(s *Server) (*xdsClient, error) {
	o := s.opts.XDS
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	conn, err := grpc.NewClient(o.Server, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(recvBytes(&s.opts.Limits))))
	if err != nil {
		return nil, fmt.Errorf("xDS server %q: %w", o.Server, err)
	}
	node := &corev3.Node{Id: o.NodeID, UserAgentName: "sluice"}
	if len(o.NodeMetadata) > 0 {
		m := map[string]any{}
		for k, v := range o.NodeMetadata {
			m[k] = v
		}
		node.Metadata, _ = structpb.NewStruct(m) // strings only: cannot fail
	}
	return &xdsClient{srv: s, o: o, conn: conn, node: node}, nil
}

// run keeps a stream to the xDS server open until ctx ends, connecting
// again after a backoff whenever it breaks; the rules in use stay meanwhile.
func (x *xdsClient) run(ctx context.Context) {
	defer x.conn.Close()
	if len(x.o.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(x.o.Headers))
	}
	log := x.srv.log
	wait := x.o.BackoffMin
	for {
		got, err := x.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if got {
			wait = x.o.BackoffMin
		}
		d := wait/2 + rand.N(wait/2+1)
		log.Warn("xDS stream ended: the rules in use stay; connecting again", "server", x.o.Server, "err", err, "after", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, x.o.BackoffMax)
	}
}

// stream is one stream: it asks for the rules, applies each response and
// ACKs or NACKs it, until the stream breaks. got reports whether a
// response came.
func (x *xdsClient) stream(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(x.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	req := &discovery.DiscoveryRequest{Node: x.node, TypeUrl: XDSTypeURL, VersionInfo: x.version}
	if err := st.Send(req); err != nil {
		return false, err
	}
	var pace time.Duration // the wait before NACKing a response sent again
	for {
		resp, err := st.Recv()
		if status.Code(err) == codes.ResourceExhausted {
			x.tooLarge(err)
		}
		if err != nil {
			return got, err
		}
		got = true
		req := &discovery.DiscoveryRequest{TypeUrl: XDSTypeURL, ResponseNonce: resp.GetNonce()}
		again, err := x.apply(resp)
		if err != nil {
			req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		} else {
			x.version = resp.GetVersionInfo()
		}
		// go-control-plane's cache answers a NACK at once with the
		// snapshot NACKed: without a wait the two would spin.
		if !again {
			pace = 0
		} else {
			pace = min(max(2*pace, x.o.BackoffMin), x.o.BackoffMax)
			t := time.NewTimer(pace)
			select {
			case <-ctx.Done():
				t.Stop()
				return got, ctx.Err()
			case <-t.C:
			}
		}
		req.VersionInfo = x.version
		if err := st.Send(req); err != nil {
			return got, err
		}
	}
}

// tooLarge counts a response gRPC refused for its size (err) as a failed
// load: no NACK can be sent, its nonce unread.
func (x *xdsClient) tooLarge(err error) {
	s := x.srv
	var got, limit int64
	var lerr error
	if _, e := fmt.Sscanf(status.Convert(err).Message(), "grpc: received message larger than max (%d vs. %d)", &got, &limit); e == nil {
		lerr = s.opts.Limits.Check(limits.ConfigBytes, "an xDS response refused unread", got)
	}
	if lerr == nil {
		lerr = s.opts.Limits.Over(limits.ConfigBytes, fmt.Sprintf("an xDS response over %d bytes (twice the cap and 1 MiB), refused unread", recvBytes(&s.opts.Limits)))
	}
	s.loads.mu.Lock()
	s.install(nil, lerr, x.o.origin(""))
	s.loads.mu.Unlock()
}

// apply loads resp's resources as one configuration and puts it in use, as
// a file reload does; its error is the NACK's detail. A response that did
// not load, sent again (again), is not read again: its error is the last
// one's, neither counted nor logged again.
func (x *xdsClient) apply(resp *discovery.DiscoveryResponse) (again bool, err error) {
	s := x.srv
	version := resp.GetVersionInfo()
	sum := fingerprint(resp)
	if x.rejected.err != nil && x.rejected.sum == sum {
		s.log.Debug("xDS response rejected before, sent again: NACKed again unread", "version", version)
		return true, x.rejected.err
	}
	var cfg *rlsconfig.Config
	if resp.GetTypeUrl() != XDSTypeURL {
		err = fmt.Errorf("xDS response of type %q: want %s", resp.GetTypeUrl(), XDSTypeURL)
	} else {
		x.parses.Add(1)
		cfg, err = s.opts.rulesOptions().ParseXDS(resp.GetResources())
	}
	s.loads.mu.Lock()
	first := s.state.Load() == nil
	err = s.install(cfg, err, x.o.origin(version))
	s.loads.mu.Unlock()
	if err != nil {
		x.rejected.sum, x.rejected.err = sum, err
		if first {
			s.log.Error("xDS configuration rejected; still waiting for one that loads", "version", version, "err", err)
		}
		return false, err
	}
	x.rejected.err = nil
	s.log.Info("configuration loaded", "origin", x.o.origin(version), "domains", len(cfg.Domains()), "rules", len(cfg.Rules()), "resources", len(resp.GetResources()))
	if first {
		s.setServing(healthpb.HealthCheckResponse_SERVING)
	}
	return false, nil
}

// fingerprint is a digest of a response's content: its type, version and
// resources, not its nonce.
func fingerprint(resp *discovery.DiscoveryResponse) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	put := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	put([]byte(resp.GetTypeUrl()))
	put([]byte(resp.GetVersionInfo()))
	for _, r := range resp.GetResources() {
		put([]byte(r.GetTypeUrl()))
		put(r.GetValue())
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
