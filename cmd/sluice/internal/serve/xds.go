package serve

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
)

// XDSTypeURL is the resource type a Server asks an xDS server for, the one
// envoyproxy/ratelimit asks for (CONFIG_TYPE=GRPC_XDS_SOTW) and Envoy
// Gateway serves.
const XDSTypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// XDSOptions take a Server's rules from an xDS management server
// (Options.XDS), as envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW:
// one state-of-the-world stream of the aggregated discovery service for
// RateLimitConfig resources. Each response is the whole configuration (each
// resource a file of it) and is applied as a file reload is: whole and
// atomically, or, when it does not load, NACKed with the load's error while
// the rules in use stay. When the stream breaks, the Server keeps its rules
// and connects again after a backoff.
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
	// MaxMessageBytes bounds a response's size (default gRPC's 4 MiB).
	MaxMessageBytes int
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
}

// newXDSClient is the client of s.opts.XDS; it dials lazily, so a server
// that is not up yet is not an error.
func newXDSClient(s *Server) (*xdsClient, error) {
	o := s.opts.XDS
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.MaxMessageBytes > 0 {
		dopts = append(dopts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxMessageBytes)))
	}
	conn, err := grpc.NewClient(o.Server, dopts...)
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
	for {
		resp, err := st.Recv()
		if err != nil {
			return got, err
		}
		got = true
		req := &discovery.DiscoveryRequest{TypeUrl: XDSTypeURL, ResponseNonce: resp.GetNonce()}
		if err := x.apply(resp); err != nil {
			req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		} else {
			x.version = resp.GetVersionInfo()
		}
		req.VersionInfo = x.version
		if err := st.Send(req); err != nil {
			return got, err
		}
	}
}

// apply loads resp's resources as one configuration and puts it in use, as
// a file reload does; its error is the NACK's detail.
func (x *xdsClient) apply(resp *discovery.DiscoveryResponse) error {
	s := x.srv
	version := resp.GetVersionInfo()
	var cfg *rlsconfig.Config
	files, err := xdsFiles(resp)
	if err == nil {
		cfg, err = rlsconfig.Options{MergeDomains: s.opts.MergeDomains}.Parse(files)
	}
	s.loads.mu.Lock()
	first := s.state.Load() == nil
	err = s.install(cfg, err, x.o.origin(version))
	s.loads.mu.Unlock()
	if err != nil {
		if first {
			s.log.Error("xDS configuration rejected; still waiting for one that loads", "version", version, "err", err)
		}
		return err
	}
	s.log.Info("configuration loaded", "origin", x.o.origin(version), "domains", len(cfg.Domains()), "rules", len(cfg.Rules()), "resources", len(files))
	if first {
		s.setServing(healthpb.HealthCheckResponse_SERVING)
	}
	return nil
}

// xdsFiles turns a response's RateLimitConfig resources into the YAML
// files they stand for, named "xds/NAME" (a resource without a name by
// its place), so that they load as files do. They are written as JSON,
// which YAML reads as it is: YAML's own emitter writes some strings (one
// that starts with a newline) in a form its parser does not read back.
func xdsFiles(resp *discovery.DiscoveryResponse) (map[string][]byte, error) {
	if t := resp.GetTypeUrl(); t != XDSTypeURL {
		return nil, fmt.Errorf("xDS response of type %q: want %s", t, XDSTypeURL)
	}
	files := make(map[string][]byte, len(resp.GetResources()))
	for i, res := range resp.GetResources() {
		if res.GetTypeUrl() != XDSTypeURL {
			return nil, fmt.Errorf("xDS resource %d is a %q: want %s", i, res.GetTypeUrl(), XDSTypeURL)
		}
		var c rlsconf.RateLimitConfig
		if err := anypb.UnmarshalTo(res, &c, proto.UnmarshalOptions{}); err != nil {
			return nil, fmt.Errorf("xDS resource %d: %w", i, err)
		}
		name := "xds/" + c.GetName()
		if c.GetName() == "" {
			name = "xds/#" + strconv.Itoa(i)
		}
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("xDS resources: two are named %q", c.GetName())
		}
		b, err := json.MarshalIndent(xdsYAML(&c), "", "  ")
		if err != nil {
			return nil, fmt.Errorf("xDS resource %s: %w", name, err)
		}
		files[name] = b
	}
	return files, nil
}

// The YAML a RateLimitConfig stands for: the fields of envoy's YAML that
// the resource has, under their YAML names.
type (
	yamlOutFile struct {
		Domain      string        `json:"domain"`
		Descriptors []yamlOutDesc `json:"descriptors,omitempty"`
	}
	yamlOutDesc struct {
		Key            string        `json:"key"`
		Value          string        `json:"value,omitempty"`
		RateLimit      *yamlOutLimit `json:"rate_limit,omitempty"`
		Descriptors    []yamlOutDesc `json:"descriptors,omitempty"`
		ShadowMode     bool          `json:"shadow_mode,omitempty"`
		DetailedMetric bool          `json:"detailed_metric,omitempty"`
	}
	yamlOutLimit struct {
		Unit            string           `json:"unit,omitempty"`
		RequestsPerUnit *uint32          `json:"requests_per_unit,omitempty"`
		Unlimited       bool             `json:"unlimited,omitempty"`
		Name            string           `json:"name,omitempty"`
		Replaces        []yamlOutReplace `json:"replaces,omitempty"`
	}
	yamlOutReplace struct {
		Name string `json:"name"`
	}
)

// xdsYAML is c as envoy's YAML. A unit envoy's enum leaves UNKNOWN is left
// out, as a YAML without one (a load error unless the limit is unlimited);
// one beyond the enum's names is written as its number, which does not
// load.
func xdsYAML(c *rlsconf.RateLimitConfig) yamlOutFile {
	return yamlOutFile{Domain: c.GetDomain(), Descriptors: xdsDescs(c.GetDescriptors())}
}

func xdsDescs(ds []*rlsconf.RateLimitDescriptor) []yamlOutDesc {
	if len(ds) == 0 {
		return nil
	}
	out := make([]yamlOutDesc, len(ds))
	for i, d := range ds {
		out[i] = yamlOutDesc{Key: d.GetKey(), Value: d.GetValue(), Descriptors: xdsDescs(d.GetDescriptors()),
			ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric()}
		if rl := d.GetRateLimit(); rl != nil {
			l := &yamlOutLimit{Unlimited: rl.GetUnlimited(), Name: rl.GetName()}
			if u := rl.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN {
				l.Unit = strings.ToLower(u.String())
			}
			if n := rl.GetRequestsPerUnit(); n != 0 || !rl.GetUnlimited() {
				l.RequestsPerUnit = &n
			}
			for _, r := range rl.GetReplaces() {
				l.Replaces = append(l.Replaces, yamlOutReplace{Name: r.GetName()})
			}
			out[i].RateLimit = l
		}
	}
	return out
}
