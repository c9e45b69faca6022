package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/observe"
)

// StreamMode says when a policy spends on a stream.
type StreamMode uint8

const (
	// StreamDefault takes the interceptor's mode (WithStreamMode; PerCall
	// unless set).
	StreamDefault StreamMode = iota
	// PerCall spends once, when the stream starts (before the handler runs,
	// or on a Client before the stream is opened).
	PerCall
	// PerMessage spends for each message: on a Server each message received
	// from the client, decided once it has arrived (so that a CostFunc can
	// read it); on a Client each message sent, paced before it is sent.
	PerMessage
)

// HeaderStyle names a set of rate-limit response metadata fields.
type HeaderStyle uint8

// HeadersDraft11 sends ratelimit-policy and ratelimit as
// draft-ietf-httpapi-ratelimit-headers-11 defines the HTTP fields.
const HeadersDraft11 HeaderStyle = 1

// config is what the options set, for a Server and a Client alike.
type config struct {
	ip            policycore.ClientIP
	skip          func(ctx context.Context, method string) bool
	headers       bool
	shadowHeaders bool
	unavailable   time.Duration
	onError       func(ctx context.Context, method string, err error)
	prefix        string
	clock         sluice.Clock
	observer      observe.Observer
	mode          StreamMode
}

// Option configures a Server or a Client. Options about the peer's address,
// headers and refusals apply to a Server only; a Client ignores them.
type Option func(*config) error

// WithSkip lets the calls skip reports true pass unlimited and uncounted:
// health checks (SkipMethods), allow-listed networks.
func WithSkip(skip func(ctx context.Context, method string) bool) Option {
	return func(c *config) error {
		if skip == nil {
			return errors.New("WithSkip(nil)")
		}
		c.skip = skip
		return nil
	}
}

// SkipMethods is a skip predicate for WithSkip: true for the calls of the
// full method names given ("/grpc.health.v1.Health/Check") and of every
// method of a service given by its name with a trailing slash
// ("/grpc.health.v1.Health/").
func SkipMethods(methods ...string) func(ctx context.Context, method string) bool {
	exact := map[string]bool{}
	var services []string
	for _, m := range methods {
		if strings.HasSuffix(m, "/") {
			services = append(services, m)
		} else {
			exact[m] = true
		}
	}
	return func(_ context.Context, method string) bool {
		if exact[method] {
			return true
		}
		for _, s := range services {
			if strings.HasPrefix(method, s) {
				return true
			}
		}
		return false
	}
}

// WithTrustedProxies names the proxies whose forwarding metadata is believed
// (Server only): a call whose peer is in one of the prefixes is keyed on the
// client that the proxy header (WithProxyHeader) names. Without it the peer
// address is the client's, whatever the call's metadata says.
func WithTrustedProxies(prefixes ...netip.Prefix) Option {
	return func(c *config) error { return c.ip.Trust(prefixes) }
}

// WithProxyHeader names the metadata field trusted proxies set (Server
// only): "x-forwarded-for" (the default) or "forwarded" (RFC 7239), read
// from the right, or a single-value field such as "x-real-ip", read as it
// is. Only that field is read, so that a client cannot slip an address
// into one its proxy does not set.
func WithProxyHeader(name string) Option {
	return func(c *config) error {
		name = strings.ToLower(strings.TrimSpace(name))
		if strings.HasSuffix(name, "-bin") {
			return fmt.Errorf("WithProxyHeader(%q): a binary metadata field, not text", name)
		}
		return c.ip.SetField(name)
	}
}

// WithIPv6Prefix sets how IPv6 clients are grouped (Server only): every
// address of one /bits prefix shares a budget (default 64; 128 keys each
// address alone).
func WithIPv6Prefix(bits int) Option {
	return func(c *config) error { return c.ip.SetIPv6Prefix(bits) }
}

// WithHeaders chooses the rate-limit response metadata sent (Server only;
// default HeadersDraft11); with no style, none is.
func WithHeaders(styles ...HeaderStyle) Option {
	return func(c *config) error {
		c.headers = false
		for _, s := range styles {
			if s != HeadersDraft11 {
				return fmt.Errorf("WithHeaders: unknown style %d", s)
			}
			c.headers = true
		}
		return nil
	}
}

// WithShadowHeaders includes the shadow policies in the rate-limit metadata
// (Server only; default: only the enforced ones are sent).
func WithShadowHeaders() Option {
	return func(c *config) error { c.shadowHeaders = true; return nil }
}

// WithUnavailableRetryAfter sets the RetryInfo delay of the Unavailable
// answered when the store fails closed (Server only; default 1s).
func WithUnavailableRetryAfter(d time.Duration) Option {
	return func(c *config) error { return policycore.SetUnavailableRetryAfter(&c.unavailable, d) }
}

// WithErrorLog receives the errors kept out of the statuses a client sees:
// store failures, a CostFunc's error, a cost that exceeds capacity, a
// trailer a policy's Used cannot read, and a settle the store failed.
func WithErrorLog(f func(ctx context.Context, method string, err error)) Option {
	return func(c *config) error { c.onError = f; return nil }
}

// WithClock sets the clock a leaky-bucket call sleeps out its Delay on and
// reads its deadline by (Server only; default the Limiter's Clock). A Client
// waits on the Limiter's clock (sluice.WithClock).
func WithClock(clock sluice.Clock) Option {
	return func(c *config) error { return policycore.Set("WithClock", &c.clock, clock) }
}

// WithKeyPrefix sets the prefix of the store keys (default "grpclimit:" for
// a Server, "grpclimit-out:" for a Client): a policy's keys are prefix +
// name + ":" + key.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) error { c.prefix = prefix; return nil }
}

// WithObserver reports each policy's decisions to o (package observe; a
// Prometheus adapter turns them into metrics): Source "grpc" on a Server,
// "grpc-client" on a Client.
func WithObserver(o observe.Observer) Option {
	return func(c *config) error { c.observer = o; return nil }
}

// WithStreamMode sets how the policies whose Stream is StreamDefault limit
// streams: PerCall (the default) or PerMessage.
func WithStreamMode(m StreamMode) Option {
	return func(c *config) error {
		if m != PerCall && m != PerMessage {
			return fmt.Errorf("WithStreamMode(%d): want PerCall or PerMessage", m)
		}
		c.mode = m
		return nil
	}
}

func newConfig(prefix string, opts []Option) (config, error) {
	c := config{
		headers:     true,
		unavailable: time.Second,
		prefix:      prefix,
		mode:        PerCall,
	}
	_ = c.ip.SetField("x-forwarded-for") // a valid name: no error
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return c, fmt.Errorf("grpclimit: %w", err)
		}
	}
	return c, nil
}
