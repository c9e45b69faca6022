package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/cmd/sluice/internal/gctune"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/procs"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"
	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

func init() {
	commands["serve"] = command{
		summary: "run the rate-limit service: Envoy's RLS v3 gRPC API and an HTTP API, envoyproxy/ratelimit's config files",
		run:     serveCmd,
	}
}

// serveFlags are sluice serve's flags.
type serveFlags struct {
	config, store, prefix, onError, grpcAddr, httpAddr, headers, logFormat, logLevel string
	cpuProfile, limitHeader, remainingHeader, resetHeader, procs                     string
	storeTimeout, shutdownTimeout, connAge, connAgeGrace                             time.Duration
	slices                                                                           time.Duration // --store-slices (or --store-leases)
	rlqsTTL, rlqsSteadyTTL                                                           time.Duration
	oldSlices                                                                        bool // --store-leases given: --store-slices's deprecated name
	shadow, quotaMode, dynMetadata, noWatch, noConsole, domainSlot, envoyEnv         bool
	mergeDomains, checkOnly, keyForm, rlqs                                           bool
	grpcCert, grpcKey, grpcCA, httpCert, httpKey, httpCA, token, tokenFile           string
	grpcSAN, httpSAN, perSecond, allowedHosts                                        string
	gogc, gcMinHeap, pipelines                                                       int
	limits                                                                           limits.Table // --limit and its aliases
	storeTLS                                                                         storeTLS
	xds                                                                              xdsFlags
	envoyStats                                                                       envoyStatsFlags
	fixedProcs                                                                       int // --gomaxprocs, 0 for auto (check)
}

func serveCmd(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	var f serveFlags
	fs := f.define()
	if err := parseFlags(fs, serveUsage(fs), args, stdout, stderr); err != nil {
		return err
	}
	if err := f.aliases(fs); err != nil {
		return err
	}
	if f.envoyEnv {
		if err := applyEnvoyEnv(fs, os.Getenv); err != nil {
			return err
		}
	}
	if err := f.check(); err != nil {
		return err
	}
	if f.checkOnly {
		return f.checkConfig(stdout)
	}
	o, closeStore, err := f.options(stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	untune, err := f.tune(o.Logger)
	if err != nil {
		return err
	}
	defer untune()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runServe(ctx, o, !f.noConsole)
}

// checkConfig is --check: it reads every flag as serve would (the
// stores' specs and options, the TLS files, the listeners' addresses)
// without connecting to a store or binding a listener, loads the
// configuration as serve would, and says what it holds and where serve
// would listen, or returns the first error serve would have stopped on.
func (f *serveFlags) checkConfig(stdout io.Writer) error {
	o, done, err := f.options(io.Discard) // go-redis clients connect at their first command: none is sent
	if err != nil {
		return err
	}
	done()
	if f.xds.server != "" {
		return errors.New("--check: the rules come from the xDS server (--xds-server), not from files: nothing to check")
	}
	cfg, err := serve.CheckConfig(o) // o holds the limits table (--limit) too
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "configuration OK: %d domains, %d rules, %d concurrency limits, from %d files\n",
		len(cfg.Domains()), len(cfg.Rules()), len(cfg.Concurrencies()), len(cfg.Sources()))
	for _, d := range cfg.Deprecations() {
		fmt.Fprintln(stdout, "deprecated:", d)
	}
	if f.oldSlices {
		fmt.Fprintln(stdout, "deprecated:", storeLeasesDeprecated)
	}
	fmt.Fprintf(stdout, "serve would listen on gRPC %s and HTTP %s, over %s\n", o.GRPCAddr, o.HTTPAddr, o.StoreName)
	return nil
}

// define defines serve's flags on a new flag set, into f.
func (f *serveFlags) define() *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&f.config, "config", os.Getenv(configEnv), "envoyproxy/ratelimit YAML: a file, or a directory of them (default $"+configEnv+", else an empty configuration: every descriptor OK); reloaded on change and on SIGHUP")
	fs.BoolVar(&f.mergeDomains, "merge-domain-config", false, "merge the --config files that configure one domain, as envoy's MERGE_DOMAIN_CONFIG does (a top-level descriptor in two of them is an error); without it two files with one domain are an error")
	fs.BoolVar(&f.checkOnly, "check", false, "read every flag as serving would and load --config, without connecting to a store or binding a listener; report what it holds and where serve would listen, or why it would not start, and exit (0: it would) without serving, as envoyproxy/ratelimit's config check")
	fs.BoolVar(&f.noWatch, "no-watch", false, "do not reload when the configuration's files change (SIGHUP still reloads)")
	fs.BoolVar(&f.noConsole, "no-console", false, "do not serve the web console at / of the HTTP listener")
	fs.StringVar(&f.allowedHosts, "allowed-hosts", "", "`NAMES`, comma-separated, that the HTTP listener answers to beside IP addresses, localhost and --http's own name (a page on a rebinding domain cannot reach it): sluice.internal, .example.com for it and every name under it, or * for any Host (behind a proxy that routes by name); other names are answered 421 (docs/serve.md, \"Listeners, security and lifecycle\")")
	fs.StringVar(&f.store, "store", "memory", "where budgets are kept: memory, redis://[USER:PASSWORD@]HOST:PORT/DB, rediss://…, unix://[USER:PASSWORD@]/PATH, redis-cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT, redis-sentinel://[USER:PASSWORD@]HOST:PORT,HOST:PORT/MASTER[?sentinel_password=P]; rediss-cluster://…, rediss-sentinel://… over TLS (see --store-tls-…)")
	f.storeTLS.flags(fs)
	f.xds.flags(fs, &f.limits)
	f.envoyStats.flags(fs)
	fs.StringVar(&f.perSecond, "store-per-second", "", "a second store, as --store takes it, for the limits counted per second (envoy's unit second; envoy's REDIS_PERSECOND): a call with descriptors in both is decided in each in turn, the per-second ones given back when the others refuse")
	fs.StringVar(&f.prefix, "prefix", "", `Redis key prefix (default "sluice:"); every instance sharing budgets must use the same`)
	fs.StringVar(&f.onError, "on-store-error", "fail-closed", "when Redis is unreachable: fail-closed (gRPC UNAVAILABLE, HTTP 503: Envoy's failure_mode_deny decides), fail-open (OK), local (decide in this process's memory until Redis is back)")
	fs.DurationVar(&f.storeTimeout, "store-timeout", time.Second, "how long a decision waits for Redis before the failure policy applies")
	fs.DurationVar(&f.slices, "store-slices", 0, "give this instance slices of hot keys' budgets, each kept at most this long (0: off): a hot descriptor is decided in memory, never over its limit by more than a slice's life of refill (docs/slices.md)")
	fs.DurationVar(&f.slices, "store-leases", 0, "deprecated: --store-slices's old name, read until the next minor release")
	fs.IntVar(&f.pipelines, "store-pipelines", 1, "pipelines to Redis in flight at once (0: every decision in its own round trip): one gathers every call that comes while it is on its way, the fewest round trips per decision")
	fs.StringVar(&f.grpcAddr, "grpc", envOr(grpcAddrEnv, serve.DefaultGRPCAddr), "gRPC listen address (Envoy RLS v3 and grpc.health.v1): HOST:PORT, or unix:PATH for a Unix domain socket (envoy's GRPC_UDS); the default is $"+grpcAddrEnv+" when set")
	fs.StringVar(&f.httpAddr, "http", envOr(httpAddrEnv, serve.DefaultHTTPAddr), "HTTP listen address (/json, /v1/take, /healthz, /readyz, /metrics, /debug/config): HOST:PORT or unix:PATH; the default is $"+httpAddrEnv+" when set")
	fs.StringVar(&f.headers, "response-headers", "none", "rate-limit headers a response asks Envoy to add: none, envoy (RateLimit-Limit, -Remaining, -Reset) or draft11 (RateLimit-Policy, RateLimit)")
	fs.DurationVar(&f.connAge, "grpc-max-connection-age", 24*time.Hour, "close a gRPC connection (GOAWAY) once it is this old, ±10%, so that clients spread over the instances behind a load balancer (envoy's GRPC_MAX_CONNECTION_AGE; 0: never)")
	fs.DurationVar(&f.connAgeGrace, "grpc-max-connection-age-grace", time.Hour, "how long the calls in flight on such a connection may still take before it is closed (envoy's GRPC_MAX_CONNECTION_AGE_GRACE; 0: as long as they need)")
	fs.StringVar(&f.limitHeader, "limit-header", "RateLimit-Limit", "--response-headers envoy: the limit's header name (envoy's LIMIT_LIMIT_HEADER)")
	fs.StringVar(&f.remainingHeader, "remaining-header", "RateLimit-Remaining", "--response-headers envoy: the remaining count's header name (envoy's LIMIT_REMAINING_HEADER)")
	fs.StringVar(&f.resetHeader, "reset-header", "RateLimit-Reset", "--response-headers envoy: the seconds-to-reset header name (envoy's LIMIT_RESET_HEADER)")
	fs.BoolVar(&f.shadow, "shadow", false, "global shadow mode: decide and count as usual, answer OK to every call")
	fs.BoolVar(&f.quotaMode, "quota-mode", false, "global quota mode (envoy's QUOTA_MODE): every descriptor counts as a quota_mode rule, and a call is over the limit only when every one is")
	fs.BoolVar(&f.dynMetadata, "response-dynamic-metadata", false, "set each response's dynamic_metadata as envoy's RESPONSE_DYNAMIC_METADATA does: domain, descriptors, hitsAddend and the passed rules' metadata")
	fs.BoolVar(&f.envoyEnv, "envoy-env", false, "read envoyproxy/ratelimit's environment (HOST, PORT, GRPC_HOST, GRPC_PORT, GRPC_UDS, RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY, CONFIG_TYPE (FILE, or GRPC_XDS_SOTW with CONFIG_GRPC_XDS_*, XDS_CLIENT_* and FORCE_START_WITHOUT_INITIAL_CONFIG), USE_PROMETHEUS, NEAR_LIMIT_RATIO, REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_URL, REDIS_AUTH, REDIS_TLS, CACHE_KEY_PREFIX, LOG_LEVEL, LOG_FORMAT, LIMIT_*, SHADOW_MODE, QUOTA_MODE, RESPONSE_DYNAMIC_METADATA, GRPC_MAX_CONNECTION_AGE*, GRPC_SERVER_*TLS*), its defaults included (0.0.0.0:8080 and :8081), as the flags it stands for; a flag given on the command line wins")
	fs.DurationVar(&f.rlqsTTL, "rlqs-ttl", 0, "--rlqs: the time to live of assignments where shares move, whole seconds (0: 3s, two rounds and the slack); a cut frees capacity this and a second after it is sent, and rounds resend grants before it runs out")
	fs.DurationVar(&f.rlqsSteadyTTL, "rlqs-steady-ttl", 0, "--rlqs: the time to live of assignments of steady budgets (every client gets what it asks, with room for any one to double it) and of blanket answers, whole seconds, at least --rlqs-ttl (0: 8s, the report interval, two rounds and the slack): reports renew them")
	fs.BoolVar(&f.rlqs, "rlqs", false, "also serve Envoy's Rate Limit Quota Service (envoy.service.rate_limit_quota.v3) on the gRPC listener: clients report their usage per bucket, and each bucket a rule limits shares the rule's rate among them, within a stated bound (docs/rlqs.md)")
	fs.BoolVar(&f.domainSlot, "domain-slot", false, "Redis Cluster: keep each domain's keys in one hash slot, so a call's descriptors are decided atomically there too (a domain's traffic then goes to one master)")
	fs.StringVar(&f.grpcCert, "grpc-tls-cert", "", "PEM certificate for the gRPC listener (with --grpc-tls-key: serve TLS)")
	fs.StringVar(&f.grpcKey, "grpc-tls-key", "", "PEM private key for the gRPC listener")
	fs.StringVar(&f.grpcCA, "grpc-tls-client-ca", "", "PEM CA bundle: require client certificates signed by it on the gRPC listener (mTLS)")
	fs.StringVar(&f.grpcSAN, "grpc-tls-client-san", "", "with --grpc-tls-client-ca: also require the client certificate to be valid for this DNS name (a SAN; wildcards as in TLS; envoy's GRPC_CLIENT_TLS_SAN)")
	fs.StringVar(&f.httpCert, "http-tls-cert", "", "PEM certificate for the HTTP listener (with --http-tls-key: serve TLS)")
	fs.StringVar(&f.httpKey, "http-tls-key", "", "PEM private key for the HTTP listener")
	fs.StringVar(&f.httpCA, "http-tls-client-ca", "", "PEM CA bundle: require client certificates signed by it on the HTTP listener (mTLS)")
	fs.StringVar(&f.httpSAN, "http-tls-client-san", "", "with --http-tls-client-ca: also require the client certificate to be valid for this DNS name")
	fs.StringVar(&f.token, "http-token", "", "bearer token every HTTP endpoint but /healthz and /readyz requires (visible in ps: prefer --http-token-file or SLUICE_HTTP_TOKEN)")
	fs.StringVar(&f.tokenFile, "http-token-file", "", "read the HTTP bearer token from this file")
	fs.BoolVar(&f.keyForm, "key-form", false, "let callers name budgets of their own: /v1/take, /v1/charge, /v1/settle, /v1/acquire, /v1/release and /v1/extend by \"key\" and \"limit\", within the limits table's units, window and lifetime (without it such calls are refused: callers spend only the configured limits)")
	f.limits = limits.Defaults()
	fs.Var(limitsFlag{&f.limits, map[*limits.Row]bool{}}, "limit", "raise or lower caps of the service's limits table: `NAME=VALUE`, comma-separated, the flag repeatable (docs/serve.md, \"Limits\": "+limitNames()+")")
	for _, name := range []string{"max-request-bytes", "max-descriptors", "max-entries", "max-entry-bytes"} {
		r := limits.Lookup(name)
		fs.Var(limitFlag{&f.limits, r}, name, "the same as --limit "+r.Name+"=`N`: "+r.Where)
	}
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM or SIGINT, how long calls in flight are waited for")
	fs.IntVar(&f.gogc, "gogc", 400, "the garbage collector's GOGC for the process, unless the GOGC environment variable is set: the service's garbage is short-lived, so a larger value trades a little memory for CPU")
	fs.IntVar(&f.gcMinHeap, "gc-min-heap", 32, "MiB the heap may grow to before a collection, whatever --gogc gives over a smaller live heap (0: --gogc alone); not applied when GOGC is set")
	fs.StringVar(&f.procs, "gomaxprocs", "auto", "Ps the Go scheduler runs: auto (as few as the load keeps busy, up to the CPUs the process may use: a P it does not need costs CPU on every call) or a number, fixed; unless the GOMAXPROCS environment variable is set")
	fs.StringVar(&f.cpuProfile, "cpuprofile", os.Getenv("SLUICE_CPUPROFILE"), "write a CPU profile of the whole run to this file (for go tool pprof; default $SLUICE_CPUPROFILE, none when unset)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json (on stderr)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return fs
}

// The environment variables that give serve's listeners and configuration
// their defaults: the container image sets them (the Dockerfile's ENV), so
// that the flags given after the image name add to them rather than
// replace them, and --envoy-env's settings still win over them.
const (
	configEnv   = "SLUICE_CONFIG"
	grpcAddrEnv = "SLUICE_GRPC_ADDR"
	httpAddrEnv = "SLUICE_HTTP_ADDR"
)

// envOr is the environment variable name's value, def when it is unset or
// empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// serveUsage is serve's --help.
func serveUsage(fs *flag.FlagSet) func(io.Writer) {
	return func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprintf(w, `Usage: sluice serve [--config PATH] [--store memory|redis://HOST:PORT/DB|...] [--grpc HOST:PORT] [--http HOST:PORT] [flags]

Serves Envoy's rate-limit service (envoy.service.ratelimit.v3.RateLimitService)
on --grpc and an HTTP API on --http, deciding with sluice over --store and
envoyproxy/ratelimit's configuration files. With no flags at all: an empty
configuration, an in-memory store, gRPC on %s and HTTP on %s
($SLUICE_CONFIG, $SLUICE_GRPC_ADDR and $SLUICE_HTTP_ADDR change these
defaults: the container image sets them).
The descriptors of one call are decided atomically: all must pass, and a
refused call spends nothing. SIGHUP reloads the configuration; SIGTERM and
SIGINT stop accepting, finish the calls in flight and exit 0. The web
console is at / of the HTTP listener (--no-console turns it off).

`, serve.DefaultGRPCAddr, serve.DefaultHTTPAddr)
		printGroups(w, fs, serveFlagGroups)
	}
}

// applyEnvoyEnv sets the flags envoyproxy/ratelimit's environment stands
// for (--envoy-env: envoyEnv), but those given on the command line.
func applyEnvoyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	vals, err := envoyEnv(getenv)
	if err != nil {
		return err
	}
	defer explainDurations(fs)()
	for name, v := range vals {
		if r := limits.Lookup(name); r != nil && limitGiven(fs, r) {
			continue // --limit NAME=… wins too
		}
		if !flagGiven(fs, name) {
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("envoy environment: --%s %q: %v", name, v, err)
			}
		}
	}
	return nil
}

// storeLeasesDeprecated is what serve logs when --store-leases is given.
const storeLeasesDeprecated = "--store-leases is deprecated: it is --store-slices, and the old name goes in the next minor release"

// aliases reads which name of a flag that has two was given: serve logs
// the deprecated one's (--store-leases) once, when it starts.
func (f *serveFlags) aliases(fs *flag.FlagSet) error {
	f.oldSlices = flagGiven(fs, "store-leases")
	if f.oldSlices && flagGiven(fs, "store-slices") {
		return errors.New("--store-leases is --store-slices's deprecated name: give --store-slices alone")
	}
	return nil
}

// slicesName is the name --store-slices was given by.
func (f *serveFlags) slicesName() string {
	if f.oldSlices {
		return "--store-leases"
	}
	return "--store-slices"
}

// check checks the flags options does not read, and reads --gomaxprocs.
func (f *serveFlags) check() error {
	if f.pipelines < 0 || f.pipelines > 1024 {
		return fmt.Errorf("--store-pipelines %d: want 0 to 1024", f.pipelines)
	}
	if f.slices < 0 || f.slices > time.Hour {
		return fmt.Errorf("%s %s: want 0 (off) to 1h", f.slicesName(), f.slices)
	}
	if f.slices > 0 && f.store == "memory" && (f.perSecond == "" || f.perSecond == "memory") {
		return fmt.Errorf("%s %s: slices share a Redis store's budgets among instances; the memory store has none to slice (use --store redis://…)", f.slicesName(), f.slices)
	}
	if f.connAge < 0 || f.connAgeGrace < 0 {
		return fmt.Errorf("--grpc-max-connection-age %s, --grpc-max-connection-age-grace %s: want 0 (never, as long as needed) or more", f.connAge, f.connAgeGrace)
	}
	if f.rlqsTTL != 0 || f.rlqsSteadyTTL != 0 {
		if !f.rlqs {
			return fmt.Errorf("--rlqs-ttl %s, --rlqs-steady-ttl %s: they set --rlqs's assignments; give --rlqs", f.rlqsTTL, f.rlqsSteadyTTL)
		}
		if _, err := rlqs.New(f.rlqsConfig()); err != nil {
			return fmt.Errorf("--rlqs-ttl %s, --rlqs-steady-ttl %s: %w", f.rlqsTTL, f.rlqsSteadyTTL, err)
		}
	}
	if f.gcMinHeap < 0 || f.gcMinHeap > 1<<20 {
		return fmt.Errorf("--gc-min-heap %d: want 0 to %d MiB", f.gcMinHeap, 1<<20)
	}
	f.fixedProcs = 0 // auto
	if f.procs != "auto" {
		n, err := strconv.Atoi(f.procs)
		if err != nil || n < 1 || n > 1<<16 {
			return fmt.Errorf("--gomaxprocs %q: want auto or 1 to %d", f.procs, 1<<16)
		}
		f.fixedProcs = n
	}
	return nil
}

// tune sets the process up as the flags ask, unless the environment has
// its say (GOMAXPROCS, GOGC): the Ps the scheduler runs, fixed or as the
// load asks (package procs), the collector's pace (package gctune), and
// the CPU profile. undo puts it back, the last step first.
func (f *serveFlags) tune(log *slog.Logger) (undo func(), err error) {
	var undos []func()
	undo = func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
	if os.Getenv("GOMAXPROCS") == "" {
		if f.fixedProcs > 0 {
			before := runtime.GOMAXPROCS(f.fixedProcs)
			undos = append(undos, func() { runtime.GOMAXPROCS(before) })
		} else {
			undos = append(undos, procs.Start(func(from, to int, used float64) {
				log.Debug("GOMAXPROCS", "from", from, "to", to, "cpu", used)
			}).Stop)
		}
	}
	if os.Getenv("GOGC") == "" && f.gogc != 0 {
		floor := uint64(f.gcMinHeap) << 20
		if f.gogc < 0 {
			floor = 0 // collection off: no floor to keep
		}
		undos = append(undos, gctune.Start(f.gogc, floor).Stop)
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			undo()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			undo()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		undos = append(undos, func() { pprof.StopCPUProfile(); pf.Close() })
	}
	return undo, nil
}

// rlqsConfig is the RLQS allocator's parameters the flags set; the rest
// default.
func (f *serveFlags) rlqsConfig() rlqs.Config {
	return rlqs.Config{TTL: f.rlqsTTL, SteadyTTL: f.rlqsSteadyTTL}
}

// orNever is a duration flag as serve.Options takes it: a flag's 0
// ("never") is negative there, where 0 is the default.
func orNever(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// options turns the flags into serve.Options, opening the stores; done
// closes them.
func (f *serveFlags) options(stderr io.Writer) (o serve.Options, done func(), err error) {
	o = serve.Options{
		Config: f.config, NoWatch: f.noWatch, MergeDomains: f.mergeDomains, GRPCAddr: f.grpcAddr, HTTPAddr: f.httpAddr, GlobalShadow: f.shadow, DomainSlot: f.domainSlot,
		GlobalQuota: f.quotaMode, DynamicMetadata: f.dynMetadata,
		HeaderNames: serve.EnvoyHeaderNames{Limit: f.limitHeader, Remaining: f.remainingHeader, Reset: f.resetHeader},
		Limits:      f.limits, KeyForm: f.keyForm,
		AllowedHosts:         splitList(f.allowedHosts),
		ShutdownTimeout:      f.shutdownTimeout,
		GRPCMaxConnectionAge: orNever(f.connAge), GRPCMaxConnectionAgeGrace: orNever(f.connAgeGrace),
	}
	nothing := func() {}
	if o.Logger, err = f.logger(stderr); err != nil {
		return o, nothing, err
	}
	if f.oldSlices {
		o.Logger.Warn(storeLeasesDeprecated)
	}
	o.StoreName = redactStore(f.store)
	if f.perSecond != "" {
		o.StoreName += ", per second " + redactStore(f.perSecond)
	}
	if o.Headers, err = serve.ParseHeaders(f.headers); err != nil {
		return o, nothing, fmt.Errorf("--response-headers: %w", err)
	}
	if o.GRPCTLS, err = tlsConfig("grpc", f.grpcCert, f.grpcKey, f.grpcCA, f.grpcSAN); err != nil {
		return o, nothing, err
	}
	if o.HTTPTLS, err = tlsConfig("http", f.httpCert, f.httpKey, f.httpCA, f.httpSAN); err != nil {
		return o, nothing, err
	}
	if err = f.envoyStats.apply(&o); err != nil {
		return o, nothing, err
	}
	if o.XDS, err = f.xds.options(); err != nil {
		return o, nothing, err
	}
	if o.HTTPToken, err = f.httpToken(); err != nil {
		return o, nothing, err
	}
	if f.rlqs {
		o.RLQS = &serve.RLQSOptions{Config: f.rlqsConfig()}
	}
	restore := logRedisTo(o.Logger)
	closeStores, err := f.openStores(&o)
	if err != nil {
		restore()
		return o, nothing, err
	}
	return o, func() { closeStores(); restore() }, nil
}

// logger is the service's logger, on stderr, as --log-level and
// --log-format ask.
func (f *serveFlags) logger(stderr io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(stderr, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, hopts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
}

// httpToken is the HTTP bearer token: --http-token-file's, else
// --http-token's, else $SLUICE_HTTP_TOKEN; "" for none.
func (f *serveFlags) httpToken() (string, error) {
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--http-token-file: %w", err)
		}
		token := strings.TrimSpace(string(b))
		if token == "" {
			return "", fmt.Errorf("--http-token-file %s is empty", f.tokenFile)
		}
		return token, nil
	}
	if f.token != "" {
		return f.token, nil
	}
	return os.Getenv("SLUICE_HTTP_TOKEN"), nil
}

// openStores opens --store and --store-per-second into o (Store,
// PerSecondStore, and Ping when one is Redis); done closes them.
func (f *serveFlags) openStores(o *serve.Options) (done func(), err error) {
	var policy redisstore.FailurePolicy
	switch f.onError {
	case "fail-closed":
		policy = redisstore.FailClosed
	case "fail-open":
		policy = redisstore.FailOpen
	case "local":
		policy = redisstore.FailLocal
	default:
		return nil, fmt.Errorf("--on-store-error %q: want fail-closed, fail-open or local", f.onError)
	}
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	var pings []func(context.Context) error
	open := func(spec string) (store.Store, error) {
		if spec == "memory" {
			return memstore.New(), nil
		}
		c, err := redisClient(spec, f.storeTLS)
		if err != nil {
			return nil, err
		}
		ropts := []redisstore.Option{redisstore.WithFailurePolicy(policy), redisstore.WithTimeout(f.storeTimeout), redisstore.WithBatching(f.pipelines)}
		if o.Logger != nil {
			ropts = append(ropts, redisstore.WithLogger(o.Logger.With("component", "store")))
		}
		if f.prefix != "" {
			ropts = append(ropts, redisstore.WithPrefix(f.prefix))
		}
		if f.slices > 0 {
			ropts = append(ropts, redisstore.WithSlices(f.slices))
		}
		rs, err := redisstore.New(c, ropts...)
		if err != nil {
			c.Close()
			return nil, err
		}
		closers = append(closers, func() { rs.Close(); c.Close() })
		pings = append(pings, func(ctx context.Context) error { return c.Ping(ctx).Err() })
		return rs, nil
	}
	if o.Store, err = open(f.store); err != nil {
		return nil, err
	}
	if f.perSecond != "" {
		if o.PerSecondStore, err = open(f.perSecond); err != nil {
			closeAll()
			return nil, fmt.Errorf("--store-per-second: %w", err)
		}
	}
	if len(pings) > 0 {
		o.Ping = func(ctx context.Context) error {
			var errs []error
			for _, p := range pings {
				errs = append(errs, p(ctx))
			}
			return errors.Join(errs...)
		}
	}
	return closeAll, nil
}

var _ store.Store = (*redisstore.Store)(nil)

// redisLog is the logger go-redis's own lines go to (a failed dial, a
// Sentinel's news), so that they are the service's lines, JSON with
// --log-format json, rather than go-redis's plain text on stderr. A serve
// points it at its logger while its stores are open; outside that, the
// lines go to stderr as go-redis writes them.
var redisLog atomic.Pointer[slog.Logger]

// go-redis has one logger per process, in a plain variable its goroutines
// read whenever they log (a dial that failed, in a goroutine a command
// started): redis.SetLogger is safe only before any client exists, so it
// is called here, once, and a serve swaps the logger behind it (redisLog).
func init() { redis.SetLogger(redisLogger{}) }

// logRedisTo sends go-redis's lines to l, at warning level, until restore
// is called: a dial still failing after its serve has ended (go-redis
// retries in the background) does not write to that serve's log.
func logRedisTo(l *slog.Logger) (restore func()) {
	redisLog.Store(l)
	return func() { redisLog.CompareAndSwap(l, nil) }
}

// redisLogger is go-redis's logger (its internal.Logging) over redisLog.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.WarnContext(ctx, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), "component", "go-redis")
		return
	}
	log.Printf(format, v...)
}

// tlsConfig builds a listener's TLS configuration from its flags: nil when
// none is given. With san, a client's certificate, once its chain is
// verified against ca, must also be valid for the DNS name san.
func tlsConfig(name, cert, key, ca, san string) (*tls.Config, error) {
	if cert == "" && key == "" && ca == "" && san == "" {
		return nil, nil
	}
	if san != "" && ca == "" {
		return nil, fmt.Errorf("--%s-tls-client-san wants --%s-tls-client-ca", name, name)
	}
	if cert == "" || key == "" {
		return nil, fmt.Errorf("--%s-tls-cert and --%s-tls-key go together", name, name)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("--%s-tls-cert/--%s-tls-key: %w", name, name, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if ca != "" {
		b, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--%s-tls-client-ca: %w", name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, errors.New("--" + name + "-tls-client-ca: no PEM certificate in " + ca)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	if san != "" {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no client certificate")
			}
			if err := cs.PeerCertificates[0].VerifyHostname(san); err != nil {
				return fmt.Errorf("client certificate: %w", err)
			}
			return nil
		}
	}
	return cfg, nil
}

// splitList reads a comma-separated flag: its items, spaces trimmed and
// empty ones left out; nil for "".
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
