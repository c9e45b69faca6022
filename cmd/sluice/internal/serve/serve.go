// Package serve is `sluice serve`: a rate-limit service that speaks Envoy's
// RLS v3 gRPC protocol (envoy.service.ratelimit.v3.RateLimitService) and an
// HTTP API, configured by envoyproxy/ratelimit's YAML files (package
// rlsconfig) and deciding with a sluice.Limiter over any store.
//
// The descriptors of one call are decided together: every limited,
// non-shadow descriptor is a part of one sluice composite, so a call is
// admitted only if all of them grant and a refused call spends nothing
// (envoyproxy/ratelimit counts each descriptor on its own and counts
// refused hits).
//
// A call is answered in three steps: plan (plan.go) works out from the
// request and the configuration alone which descriptor is limited how and
// what to ask the stores; decide (decide.go, quota.go) asks them; respond
// (respond.go) writes the response from the plan and the stores' answers.
// plan and respond are pure, so tables test them without a store or a
// Server. A Server (server.go) is the lifecycle around the service that
// decides (service.go): the listeners, the gRPC and HTTP servers, health,
// and the reloads on SIGHUP and on the configuration's changes, or the
// stream of an xDS server that sends the rules (xds.go). envoystats.go
// counts envoyproxy/ratelimit's per-rule series (Options.EnvoyStats).
//
// Run starts it and serves until its context ends; New and Server.Serve do
// the same in two steps, for callers who need the bound addresses or the
// Server's accessors (Config, Registry) before serving.
package serve

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/sameorigin"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/observe"
	"github.com/sluice-go/sluice/store"
)

// Default listen addresses: loopback only.
const (
	DefaultGRPCAddr = "127.0.0.1:8081"
	DefaultHTTPAddr = "127.0.0.1:8080"
)

// Options configure a Server. The zero Options serve an empty configuration
// from an in-memory store on the default addresses.
type Options struct {
	// Config is a YAML file or a directory of them; "" serves an empty
	// configuration (every descriptor OK, no limit).
	Config string
	// XDS, when set, takes the rules from an xDS server instead of Config
	// (which must then be ""), as envoy's CONFIG_TYPE=GRPC_XDS_SOTW does.
	XDS *XDSOptions
	// NoWatch turns off reloading when Config's files change (SIGHUP and
	// Server.Reload still reload).
	NoWatch bool
	// MergeDomains merges Config's files that configure one domain, as
	// envoy's MERGE_DOMAIN_CONFIG does (rlsconfig.Options.MergeDomains);
	// without it they are a load error.
	MergeDomains bool
	// Store keeps the budgets; nil is a new memstore.
	Store store.Store
	// PerSecondStore, when not nil, keeps the budgets of the limits counted
	// per second (an epoch-aligned window of one second: envoy's unit
	// second), as envoy's REDIS_PERSECOND keeps them on a second Redis.
	// A call whose descriptors are in both stores is decided in each in
	// turn: the per-second parts first, then the others, the per-second
	// parts given back when the others refuse (not one atomic step: a
	// concurrent call may be refused while they are held).
	PerSecondStore store.Store
	// Ping reports whether the store is reachable, for /readyz; nil is
	// always reachable.
	Ping func(context.Context) error
	// StoreName names the store in the start line: the URL it was opened
	// with, credentials removed (the caller removes them). "" names a
	// memstore "memory", another store by its type.
	StoreName string

	// GRPCAddr and HTTPAddr are the listen addresses (default
	// DefaultGRPCAddr and DefaultHTTPAddr; port 0 picks a free one), HOST:PORT
	// or unix:PATH for a Unix domain socket (a sidecar's, as envoy's
	// GRPC_UDS; a socket file left by a process that is gone is replaced,
	// and the file is removed on shutdown). A listener given in GRPCListener
	// or HTTPListener is used instead.
	GRPCAddr, HTTPAddr         string
	GRPCListener, HTTPListener net.Listener
	// GRPCTLS and HTTPTLS, when set, serve TLS (with ClientAuth set,
	// mutual TLS).
	GRPCTLS, HTTPTLS *tls.Config
	// AllowedHosts are the names, beside IP literals, localhost and the
	// name HTTPAddr gives, that the HTTP listener answers to when a
	// request names them in its Host (sameorigin.Hosts: a page on a
	// rebinding domain cannot reach the listener): "sluice.internal",
	// ".example.com" for it and every name under it, or "*" for any (a
	// listener behind a proxy that routes by name). Other names are
	// answered 421 on every path but the probes'; on TLS or a Unix socket
	// nothing is checked.
	AllowedHosts []string
	// HTTPToken, when set, is the bearer token every HTTP endpoint but
	// /healthz, /readyz and /healthcheck requires, unless Login lets the
	// request in.
	HTTPToken string
	// Login, with HTTPToken, is a way in for a browser, which cannot send
	// the token when it opens a page: the web console's sign-in and
	// session (a console.Console).
	Login Login
	// Handler, when set, answers the HTTP paths the server does not (it is
	// mounted at "/"). See also Server.SetHandler.
	Handler http.Handler
	// ConsolePath is the path of the web console Handler serves, "" when
	// it serves none: the start line gives the console's URL.
	ConsolePath string

	// Headers chooses the rate-limit headers of a response (default none).
	Headers Headers
	// HeaderNames renames HeadersEnvoy's headers.
	HeaderNames EnvoyHeaderNames
	// GlobalShadow answers OK to every call, deciding and counting as usual.
	GlobalShadow bool
	// GlobalQuota decides every descriptor as a quota_mode rule, as envoy's
	// QUOTA_MODE does: each descriptor that is not unlimited counts as a
	// quota descriptor, those without a rule and those in shadow_mode among
	// them (they always pass), and a call is over the limit only when every
	// one is.
	GlobalQuota bool
	// DynamicMetadata sets each response's dynamic_metadata, as envoy's
	// RESPONSE_DYNAMIC_METADATA does: the domain, the descriptors, the
	// hits_addend and the metadata of the rules that passed.
	DynamicMetadata bool
	// DomainSlot puts every key of a domain in one Redis Cluster hash slot
	// ("{domain}/…"), so that the descriptors of a call are decided in one
	// script, atomically, on a cluster too; all of a domain's traffic then
	// goes to one master. Without it each descriptor's key hashes on its
	// own, and a call whose keys land in different slots is decided part by
	// part (see redisstore's Routing). On one Redis server it changes
	// nothing but the keys' names.
	DomainSlot bool

	// RLQS, when set, serves Envoy's Rate Limit Quota Service
	// (envoy.service.rate_limit_quota.v3) on the gRPC listener beside
	// RLS: each bucket a rule limits is a budget of the rule's rate,
	// shared among the clients that report it (docs/rlqs.md).
	RLQS *RLQSOptions

	// Limits are the caps on every quantity a caller chooses (package
	// limits, docs/serve.md's "Limits"): a field left 0 is its default.
	Limits limits.Table
	// KeyForm lets callers name budgets of their own: /v1/take,
	// /v1/charge, /v1/settle and the lease calls by "key" and "limit" (within Limits' limit, window and
	// lifetime). Without it those calls are refused (403): a caller can
	// only spend the budgets the configuration names.
	KeyForm bool

	// GRPCMaxConnectionAge closes a gRPC connection (GOAWAY, then the calls
	// in flight get GRPCMaxConnectionAgeGrace to finish) once it is that old,
	// give or take 10%, so that clients reconnect and spread over the
	// instances behind a load balancer, as envoy's GRPC_MAX_CONNECTION_AGE
	// does. Zero is envoy's default, 24h (grace 1h); negative, never.
	GRPCMaxConnectionAge, GRPCMaxConnectionAgeGrace time.Duration

	// ShutdownTimeout bounds how long in-flight calls are waited for once the
	// context ends (default 10s).
	ShutdownTimeout time.Duration
	// EnvoyStats exports on /metrics, beside sluice's own series,
	// envoyproxy/ratelimit's per-rule counters under the names and labels
	// of its Prometheus output (ratelimit_service_rate_limit_total_hits,
	// _over_limit, _near_limit, _within_limit, _shadow_mode, by domain,
	// key1 and key2), counted as it counts them; NearLimitRatio is its
	// NEAR_LIMIT_RATIO (default DefaultNearLimitRatio).
	EnvoyStats     bool
	NearLimitRatio float64

	// Logger receives the service's log (default slog.Default()).
	Logger *slog.Logger
	// Observer, when set, sees every limited descriptor's outcome (Source
	// "serve", Policy the rule's name or path), and every acquire of
	// /v1/acquire's (Policy AcquirePolicy).
	Observer observe.Observer
	// Refused, when set, is called with each refused descriptor's policy
	// (the Observer's Event.Policy) and its entries, "key=value" joined by
	// ", " (the web console's most refused keys); a refused acquire's
	// policy is AcquirePolicy, its key the call's.
	Refused func(policy, key string)
	// Charged, when set, is called with the units each charge spent
	// whatever the answer, by policy (the Observer's Event.Policy; a
	// charge by key's is ChargePolicy): the web console's units charged.
	Charged func(policy string, units int64)
}

// Run starts a Server with o and serves until ctx ends, then shuts down
// gracefully: it stops accepting, finishes the calls in flight (up to
// o.ShutdownTimeout) and returns nil. A configuration that fails its first
// load, or an address that cannot be bound, is an error.
func Run(ctx context.Context, o Options) error {
	s, err := New(o)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

// A Login lets a browser in without the bearer token (Options.Login): it
// signs the browser in by a way of its own and then admits its requests.
type Login interface {
	// Admits reports whether r, which does not carry the bearer token,
	// may pass: a sign-in, or a request of a signed-in browser.
	Admits(r *http.Request) bool
	// Refuse answers r, which neither the bearer token nor Admits lets
	// in, when it is the login's to answer (a browser that asks for a page
	// is shown how to sign in), and reports whether it did; the others get
	// a 401 that asks for the bearer token.
	Refuse(w http.ResponseWriter, r *http.Request) bool
}

// setDefaults fills o's zero fields with their defaults, and checks the
// header names.
func (o *Options) setDefaults() error {
	if o.GRPCAddr == "" {
		o.GRPCAddr = DefaultGRPCAddr
	}
	if o.HTTPAddr == "" {
		o.HTTPAddr = DefaultHTTPAddr
	}
	o.Limits.FillDefaults()
	if _, err := sameorigin.NewHosts("", o.AllowedHosts); err != nil {
		return err
	}
	var err error
	if o.XDS != nil {
		if o.Config != "" {
			return fmt.Errorf("a configuration file (%s) and an xDS server (%s): want one", o.Config, o.XDS.Server)
		}
		x, err := o.XDS.withDefaults()
		if err != nil {
			return err
		}
		o.XDS = &x
	}
	if o.HeaderNames, err = o.HeaderNames.withDefaults(); err != nil {
		return err
	}
	if o.GRPCMaxConnectionAge == 0 {
		o.GRPCMaxConnectionAge = 24 * time.Hour
	}
	if o.GRPCMaxConnectionAgeGrace == 0 {
		o.GRPCMaxConnectionAgeGrace = time.Hour
	}
	if o.NearLimitRatio == 0 {
		o.NearLimitRatio = DefaultNearLimitRatio
	}
	if !(o.NearLimitRatio > 0 && o.NearLimitRatio <= 1) {
		return fmt.Errorf("near-limit ratio %v: want more than 0, at most 1", o.NearLimitRatio)
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	if o.Store == nil {
		o.Store = memstore.New()
	}
	return nil
}
