package serve

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/sameorigin"
	"github.com/sluice-go/sluice/internal/policycore"
)

// httpHandler routes the HTTP listener, behind sameorigin's rules: no
// page of another origin can make a browser post here (take, sign in, the
// console), and no page on a rebinding domain can reach it at all
// (hostsHandler).
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", s.serveJSON)
	mux.HandleFunc("POST /v1/take", s.serveTake)
	mux.HandleFunc("POST /v1/charge", s.serveCharge)
	mux.HandleFunc("POST /v1/settle", s.serveSettle)
	mux.HandleFunc("POST /v1/acquire", s.serveLease("acquire"))
	mux.HandleFunc("POST /v1/release", s.serveLease("release"))
	mux.HandleFunc("POST /v1/extend", s.serveLease("extend"))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	// envoyproxy/ratelimit's probe path, for deployments that switch.
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "OK") })
	mux.HandleFunc("GET /readyz", s.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/config", s.serveConfig)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if h := s.root.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	})
	if s.opts.HTTPToken == "" {
		return s.hostsHandler(sameorigin.Handler(mux))
	}
	return s.hostsHandler(sameorigin.Handler(requireToken(s.opts.HTTPToken, s.opts.Login, mux)))
}

// hostsHandler puts next behind sameorigin.Hosts: a request whose Host is
// a name the listener does not serve (not an IP literal, localhost, the
// name the listener was given, or one of Options.AllowedHosts) is answered
// 421, whatever its path but the probes'. A listener on TLS is not
// checked: a browser sent to it by a rebinding name refuses its
// certificate, which is not the name's; nor is a Unix socket, which no
// browser reaches (a proxy in front answers for its names).
func (s *Server) hostsHandler(next http.Handler) http.Handler {
	own, allowed := s.opts.HTTPAddr, s.opts.AllowedHosts
	if s.opts.HTTPTLS != nil || s.httpLn.Addr().Network() == "unix" {
		allowed = []string{sameorigin.AnyHost}
	}
	if strings.HasPrefix(own, "unix:") {
		own = ""
	}
	hosts, err := sameorigin.NewHosts(own, allowed)
	if err != nil { // checked by Options.setDefaults
		panic(err)
	}
	return hosts.Handler(next, isProbe)
}

// isProbe reports whether r asks for one of the probes (/healthz, /readyz,
// /healthcheck), which need no token and may name any Host.
func isProbe(r *http.Request) bool {
	return r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Path == "/healthcheck"
}

// requireToken lets through to next the requests that carry the bearer
// token, the probes, and those login (when not nil) admits; it refuses the
// others.
func requireToken(token string, login Login, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case isProbe(r):
		case subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) == 1:
		case login != nil && login.Admits(r):
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			if login == nil || !login.Refuse(w, r) {
				http.Error(w, "a bearer token is required (Authorization: Bearer TOKEN)", http.StatusUnauthorized)
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

// readBody reads a request's body up to the size limit.
func (s *service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.Limits.RequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, s.opts.Limits.Over(limits.RequestBytes, "request body").Error(), http.StatusRequestEntityTooLarge)
		} else {
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		}
		return nil, false
	}
	return b, true
}

// readCall begins a call on door (the calls metric's): it reads the
// body, within request-bytes, and returns it with done, which observes the
// call's latency; ok is false when the body could not be read, which it
// answered and counted.
func (s *service) readCall(w http.ResponseWriter, r *http.Request, door string) (b []byte, done func(), ok bool) {
	start := time.Now()
	done = func() { s.metrics.latency.WithLabelValues(door).Observe(time.Since(start).Seconds()) }
	if b, ok = s.readBody(w, r); !ok {
		s.count(door, "invalid")
	}
	return b, done, ok
}

// decodeJSONRequest decodes /json's body: a RateLimitRequest in protojson.
func decodeJSONRequest(b []byte) (*pb.RateLimitRequest, error) {
	req := &pb.RateLimitRequest{}
	if err := protojson.Unmarshal(b, req); err != nil {
		return nil, fmt.Errorf("bad RateLimitRequest JSON: %w", err)
	}
	return req, nil
}

// httpStatus answers a failed decision.
func httpError(w http.ResponseWriter, err error) {
	var re *requestError
	switch {
	case errors.As(err, &re):
		http.Error(w, re.msg, http.StatusBadRequest)
	case errors.Is(err, sluice.ErrStoreUnavailable):
		w.Header().Set("Retry-After", "1")
		http.Error(w, "rate limit store unavailable", http.StatusServiceUnavailable)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errNoConfig):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}

// serveJSON is envoyproxy/ratelimit's POST /json: 200 with the response when
// the call is OK, 429 when it is over the limit.
func (s *service) serveJSON(w http.ResponseWriter, r *http.Request) {
	b, done, ok := s.readCall(w, r, "json")
	defer done()
	if !ok {
		return
	}
	req, err := decodeJSONRequest(b)
	if err != nil {
		s.count("json", "invalid")
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp := &pb.RateLimitResponse{}
	res, err := s.shouldRateLimit(r.Context(), req, resp, s.opts.Headers)
	if err != nil {
		s.count("json", codeLabel(grpcError(err)))
		httpError(w, err)
		return
	}
	s.countCode("json", resp.OverallCode)
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		setRetryAfter(w.Header(), res.RetryAfter)
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// setRetryAfter sets a refusal's Retry-After: the call's wait, rounded up
// to whole seconds once, at least 1 (a refusal with no wait of its own, as
// requests_per_unit 0 gives, still asks the client to wait).
func setRetryAfter(h http.Header, wait time.Duration) {
	h.Set("Retry-After", strconv.FormatInt(max(policycore.Seconds(wait), 1), 10))
}

// TakeRequest is the body of POST /v1/take and of POST /v1/charge: either
// a domain and its descriptors, decided by the configuration as a gRPC call
// would be, or a key and a limit of the caller's.
type TakeRequest struct {
	// Domain and Descriptors (each a list of entries) name configured
	// limits; HitsAddend is the call's cost (default 1; 0 looks).
	Domain      string        `json:"domain,omitempty"`
	Descriptors [][]TakeEntry `json:"descriptors,omitempty"`
	HitsAddend  *uint32       `json:"hits_addend,omitempty"`
	// Key and Limit ("10/1s gcra burst 50", as sluice.ParseLimit reads it)
	// name a budget directly; Cost is its cost (default 1; 0 looks).
	Key   string `json:"key,omitempty"`
	Limit string `json:"limit,omitempty"`
	Cost  *int64 `json:"cost,omitempty"`
}

// TakeEntry is one descriptor entry of a TakeRequest.
type TakeEntry struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

// TakeResponse is the answer of POST /v1/take, /v1/charge and /v1/settle:
// every field of the decision (sluice.Result, durations in microseconds;
// Remaining negative for a key in debt) and, for a domain's descriptors,
// each descriptor's status.
type TakeResponse struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	RetryAfterUS int64 `json:"retry_after_us"`
	ResetAfterUS int64 `json:"reset_after_us"`
	DelayUS      int64 `json:"delay_us"`
	Degraded     bool  `json:"degraded"`
	// WindowUS names the window a key's decision counted in, under
	// fixed-window and aligned-window (sluice.Result.Window): a settle
	// gives units back only to it.
	WindowUS int64        `json:"window_us,omitempty"`
	Statuses []TakeStatus `json:"statuses,omitempty"`
}

// TakeStatus is one descriptor's status in a TakeResponse.
type TakeStatus struct {
	Code            string `json:"code"`
	Rule            string `json:"rule,omitempty"`
	RequestsPerUnit uint32 `json:"requests_per_unit,omitempty"`
	Unit            string `json:"unit,omitempty"`
	Remaining       int64  `json:"remaining"`
	ResetAfterUS    int64  `json:"reset_after_us"`
}

// decodeJSON decodes b, one JSON value, into v, refusing unknown fields.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad request JSON: %w", err)
	}
	if dec.More() {
		return errors.New("bad request JSON: more than one value")
	}
	return nil
}

// decodeTakeRequest decodes and checks the body of /v1/take and
// /v1/charge.
func decodeTakeRequest(b []byte) (*TakeRequest, error) {
	var t TakeRequest
	if err := decodeJSON(b, &t); err != nil {
		return nil, err
	}
	byKey := t.Key != "" || t.Limit != "" || t.Cost != nil
	byDomain := t.Domain != "" || t.Descriptors != nil || t.HitsAddend != nil
	switch {
	case byKey && byDomain:
		return nil, errors.New(`give either "domain" and "descriptors", or "key" and "limit", not both`)
	case byKey:
		if t.Key == "" || t.Limit == "" {
			return nil, errors.New(`"key" and "limit" are both required`)
		}
		if t.Cost != nil && *t.Cost < 0 {
			return nil, fmt.Errorf(`"cost" %d is negative`, *t.Cost)
		}
	case byDomain:
		if t.Domain == "" || len(t.Descriptors) == 0 {
			return nil, errors.New(`"domain" and at least one descriptor are required`)
		}
	default:
		return nil, errors.New(`give "domain" and "descriptors", or "key" and "limit"`)
	}
	return &t, nil
}

// cost is a key form call's units: its cost, default 1.
func (t *TakeRequest) cost() int64 {
	if t.Cost != nil {
		return *t.Cost
	}
	return 1
}

// apiCall is what one of the JSON API's decisions (/v1/take, /v1/charge,
// /v1/settle) does with a request that decodes: its answer and each
// descriptor's status (descriptor form), or the error.
type apiCall func(ctx context.Context, w http.ResponseWriter) (sluice.Result, []TakeStatus, error)

// serveAPI answers one call of the JSON API on door (the calls metric's):
// read reads the call from the body and returns what deciding it does;
// refuses: an answer not Allowed is a 429 (a take's), else a 200 (a
// charge, a settle: never refused).
func (s *service) serveAPI(door string, refuses bool, read func(b []byte) (apiCall, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, done, ok := s.readCall(w, r, door)
		defer done()
		if !ok {
			return
		}
		call, err := read(b)
		if err != nil {
			s.count(door, "invalid")
			status := http.StatusBadRequest
			if errors.Is(err, errNoKeyForm) {
				status = http.StatusForbidden
			}
			http.Error(w, err.Error(), status)
			return
		}
		res, sts, err := call(r.Context(), w)
		if err != nil {
			s.count(door, codeLabel(grpcError(err)))
			httpError(w, err)
			return
		}
		out := TakeResponse{Allowed: res.Allowed, Remaining: res.Remaining, Degraded: res.Degraded, WindowUS: res.Window, Statuses: sts,
			RetryAfterUS: res.RetryAfter.Microseconds(), ResetAfterUS: res.ResetAfter.Microseconds(), DelayUS: res.Delay.Microseconds()}
		w.Header().Set("Content-Type", "application/json")
		if res.Allowed {
			s.count(door, "ok")
		} else {
			s.count(door, "over_limit")
		}
		if refuses && !res.Allowed {
			setRetryAfter(w.Header(), res.RetryAfter)
			w.WriteHeader(http.StatusTooManyRequests)
		}
		json.NewEncoder(w).Encode(&out)
	}
}

// serveTake is sluice's own JSON API: /v1/take.
func (s *service) serveTake(w http.ResponseWriter, r *http.Request) {
	s.serveAPI("take", true, func(b []byte) (apiCall, error) {
		return s.takeCall(b, false, func(ctx context.Context, lim *sluice.Limiter, key string, l sluice.Limit, units int64) (sluice.Result, error) {
			return lim.Take(ctx, key, l, units)
		}, func(key string, _ int64, res sluice.Result, err error, latency time.Duration) {
			s.recordTake(key, res, err, latency)
		})
	})(w, r)
}

// keyOp is what a call by key does on the limiter that keeps its limit's
// budgets: key is its store key, units its cost.
type keyOp func(ctx context.Context, lim *sluice.Limiter, key string, l sluice.Limit, units int64) (sluice.Result, error)

// takeCall reads the body of /v1/take or /v1/charge (a TakeRequest) into
// what deciding it does: by descriptors, a gRPC call's decision (every
// limited descriptor charged when chargeAll is set); by key (refused when
// Options.KeyForm is off), op on the caller's limit, reported by record.
func (s *service) takeCall(b []byte, chargeAll bool, op keyOp, record func(key string, units int64, res sluice.Result, err error, latency time.Duration)) (apiCall, error) {
	t, err := decodeTakeRequest(b)
	switch {
	case err != nil:
		return nil, err
	case t.Key == "":
		return func(ctx context.Context, w http.ResponseWriter) (sluice.Result, []TakeStatus, error) {
			return s.decideDomain(ctx, w, t, chargeAll)
		}, nil
	case !s.opts.KeyForm:
		return nil, errNoKeyForm
	}
	units := t.cost()
	if chargeAll {
		if err := s.checkChargeUnits(`"cost"`, units); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context, w http.ResponseWriter) (sluice.Result, []TakeStatus, error) {
		called := time.Now()
		res, err := s.decideKey(ctx, w, t.Key, t.Limit, func(lim *sluice.Limiter, key string, l sluice.Limit) (sluice.Result, error) {
			return op(ctx, lim, key, l, units)
		})
		record(t.Key, units, res, err, time.Since(called))
		return res, nil, err
	}, nil
}

// takeKeyPrefix begins the store key of every key /v1/take is given. A
// descriptor's store key never begins with it (rlsconfig.Rule.Key begins
// with the domain, not empty and its '/' escaped; domainSlot with '{'), so
// a key a caller names never reaches a descriptor's budget, nor a
// descriptor a key's; and a prefix keeps distinct keys distinct.
const takeKeyPrefix = "/"

// errNoKeyForm answers a call by key when Options.KeyForm is off.
var errNoKeyForm = errors.New(`calls by "key" name a budget of the caller's, and this service does not take them: name a configured limit by "domain" and "descriptors", or start sluice serve with --key-form (docs/serve.md, "HTTP API")`)

// checkKeyForm checks a call by key against the limits table: its key's
// bytes, its limit's units, and the time its state lives (what, under
// row): a take's refill under window, a lease's lifetime under lifetime.
func (s *service) checkKeyForm(key string, units int64, row *limits.Row, what string, life time.Duration) error {
	lt := &s.opts.Limits
	err := lt.Check(limits.KeyBytes, `"key"`, int64(len(key)))
	if err == nil {
		err = lt.Check(limits.Units, `"limit"`, units)
	}
	if err == nil {
		err = lt.Check(row, what, int64(life))
	}
	return capped(err)
}

// decideKey decides a call by key under the caller's limit (text, as
// sluice.ParseLimit reads it): op makes the decision on the limiter that
// keeps the limit's budgets, with the key's store key. A limit or units
// the store refuses is a bad request.
func (s *service) decideKey(ctx context.Context, w http.ResponseWriter, key, text string, op func(*sluice.Limiter, string, sluice.Limit) (sluice.Result, error)) (sluice.Result, error) {
	lim, err := sluice.ParseLimit(text)
	if err != nil {
		return sluice.Result{}, badRequest("limit: %v", err)
	}
	// The units the caller names: its capacity, and its debt allowance,
	// which a key may owe as long again.
	if err := s.checkKeyForm(key, max(lim.Capacity(), lim.Debt), limits.Window, `the limit's refill (its window; a bucket's burst at its rate)`, lim.Refill()); err != nil {
		return sluice.Result{}, err
	}
	res, err := op(s.limFor(lim), takeKeyPrefix+key, lim)
	if err != nil {
		if errors.Is(err, sluice.ErrStoreUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return res, err
		}
		return res, badRequest("%v", err)
	}
	if res.Degraded {
		s.metrics.degraded.Inc()
	}
	h := w.Header()
	q, wnd := draft11Quota(lim)
	h.Set("RateLimit-Policy", string(policycore.AppendPolicy(nil, "key", q, wnd)))
	h.Set("RateLimit", string(policycore.AppendLimit(nil, "key", res.Remaining, policycore.Seconds(max(res.ResetAfter, res.RetryAfter)), q)))
	return res, nil
}

// decideDomain decides a domain's descriptors as a gRPC call, charging
// every limited one when chargeAll is set (/v1/charge).
func (s *service) decideDomain(ctx context.Context, w http.ResponseWriter, t *TakeRequest, chargeAll bool) (sluice.Result, []TakeStatus, error) {
	req := &pb.RateLimitRequest{Domain: t.Domain, Descriptors: make([]*rlv3.RateLimitDescriptor, len(t.Descriptors))}
	for i, d := range t.Descriptors {
		rd := &rlv3.RateLimitDescriptor{Entries: make([]*rlv3.RateLimitDescriptor_Entry, len(d))}
		for j, e := range d {
			rd.Entries[j] = &rlv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
		}
		if t.HitsAddend != nil {
			rd.HitsAddend = wrapperspb.UInt64(uint64(*t.HitsAddend))
		}
		req.Descriptors[i] = rd
	}
	resp := &pb.RateLimitResponse{}
	debts := make([]int64, len(req.Descriptors))
	res, err := s.decideCall(ctx, req, resp, HeadersDraft11, callOptions{chargeAll: chargeAll, debts: debts})
	if err != nil {
		return res, nil, err
	}
	if s.opts.GlobalShadow && !chargeAll {
		res.Allowed = true
	}
	res.Window = 0 // a call's descriptors name no one window: window_us is the key form's
	sts := make([]TakeStatus, len(resp.Statuses))
	for i, st := range resp.Statuses {
		ts := &sts[i]
		ts.Code = st.Code.String()
		ts.Remaining = int64(st.LimitRemaining)
		if st.CurrentLimit != nil {
			ts.Rule = st.CurrentLimit.Name
			ts.RequestsPerUnit = st.CurrentLimit.RequestsPerUnit
			ts.Unit = strings.ToLower(st.CurrentLimit.Unit.String())
			ts.ResetAfterUS = st.DurationUntilReset.AsDuration().Microseconds()
		}
		if st.LimitRemaining == math.MaxUint32 && st.CurrentLimit == nil {
			ts.Remaining = -1 // unlimited
		}
		if debts[i] < 0 {
			ts.Remaining = debts[i] // in debt
		}
	}
	for _, hv := range resp.ResponseHeadersToAdd {
		w.Header().Set(hv.Key, hv.Value)
	}
	return res, sts, nil
}

// serveReady is 200 when a configuration is loaded and the store answers.
// A store that answers but may not keep the limiter's budgets (a Redis
// whose maxmemory-policy may evict keys) leaves it ready, since the
// service still decides and every instance on that Redis would be taken
// out at once, but each such problem is a "warning:" line of the body.
func (s *service) serveReady(w http.ResponseWriter, r *http.Request) {
	if s.state.Load() == nil {
		http.Error(w, "no configuration loaded", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if s.opts.Ping != nil {
		if err := s.opts.Ping(ctx); err != nil {
			http.Error(w, "store unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	problems, _ := s.checkStores(ctx)
	var b strings.Builder
	b.WriteString("ready\n")
	for _, p := range problems {
		b.WriteString("warning: " + p + "\n")
	}
	io.WriteString(w, b.String())
}

// configRule is one rule in /debug/config's JSON.
type configRule struct {
	Domain          string   `json:"domain"`
	Path            string   `json:"path"`
	Name            string   `json:"name,omitempty"`
	Limit           string   `json:"limit,omitempty"`
	Unit            string   `json:"unit,omitempty"`
	RequestsPerUnit int64    `json:"requests_per_unit,omitempty"`
	Unlimited       bool     `json:"unlimited,omitempty"`
	Shadow          bool     `json:"shadow_mode,omitempty"`
	QuotaMode       bool     `json:"quota_mode,omitempty"`
	Charge          bool     `json:"charge,omitempty"`
	DetailedMetric  bool     `json:"detailed_metric,omitempty"`
	ShareThreshold  bool     `json:"share_threshold,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
	// Metadata is the rule's metadata as Envoy gets it (protobuf's JSON of
	// google.protobuf.Struct).
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// configConcurrency is one concurrency limit in /debug/config's JSON.
type configConcurrency struct {
	Domain   string `json:"domain"`
	Path     string `json:"path"`
	Name     string `json:"name,omitempty"`
	Pool     string `json:"pool"`
	Max      int64  `json:"max"`
	Lifetime string `json:"lifetime"`
	Headroom int64  `json:"headroom,omitempty"`
	// RateLimit is the limit of the descriptor's rate_limit taken with
	// each lease, "" when none.
	RateLimit string `json:"rate_limit,omitempty"`
}

// configConcurrencies are v's concurrency limits as /debug/config shows
// them.
func configConcurrencies(v *ConfigView) []configConcurrency {
	out := make([]configConcurrency, 0, len(v.Concurrencies))
	for _, cc := range v.Concurrencies {
		life := cc.Limit.Lifetime
		if life == 0 {
			life = sluice.DefaultLifetime
		}
		c := configConcurrency{Domain: cc.Domain, Path: cc.Path, Name: cc.Name, Pool: cc.Pool, Max: cc.Limit.Limit, Lifetime: life.String(), Headroom: cc.Limit.Headroom}
		if r := cc.Rate; r != nil && !r.Unlimited {
			c.RateLimit = r.Limit.String()
		}
		out = append(out, c)
	}
	return out
}

// serveConfig shows the configuration in use: text, or JSON with
// ?format=json or Accept: application/json.
func (s *service) serveConfig(w http.ResponseWriter, r *http.Request) {
	v := s.config()
	st := s.state.Load()
	rules := make([]configRule, 0, len(v.Rules))
	for _, ru := range v.Rules {
		c := configRule{Domain: ru.Domain, Path: ru.Path, Name: ru.Name, Unit: ru.Unit, RequestsPerUnit: ru.RequestsPerUnit,
			Unlimited: ru.Unlimited, Shadow: ru.Shadow, QuotaMode: ru.QuotaMode, Charge: ru.Charge, DetailedMetric: ru.DetailedMetric, ShareThreshold: ru.ShareThreshold, Replaces: ru.Replaces}
		if !ru.Unlimited {
			c.Limit = ru.Limit.String()
		}
		if m := st.metadata[ru]; m != nil {
			c.Metadata = compactJSON(m)
		}
		rules = append(rules, c)
	}
	sort.SliceStable(rules, func(i, j int) bool {
		if rules[i].Domain != rules[j].Domain {
			return rules[i].Domain < rules[j].Domain
		}
		return rules[i].Path < rules[j].Path
	})
	concs := configConcurrencies(&v)
	lastErr := ""
	if v.LastError != nil {
		lastErr = v.LastError.Error()
	}
	if r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"path": v.Path, "origin": v.Origin, "sources": v.Sources, "domains": v.Domains, "loaded": v.Loaded,
			"last_error": lastErr, "rules": rules, "concurrency": concs,
		})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "path: %q\norigin: %s\nloaded: %s\nsources: %s\n", v.Path, v.Origin, v.Loaded.Format(time.RFC3339), strings.Join(v.Sources, ", "))
	if lastErr != "" {
		fmt.Fprintf(w, "last load failed at %s: %s\n", v.LastErrorAt.Format(time.RFC3339), lastErr)
	}
	for _, c := range rules {
		fmt.Fprintf(w, "%s: %s", c.Domain, c.Path)
		if c.Name != "" {
			fmt.Fprintf(w, " name=%q", c.Name)
		}
		switch {
		case c.Unlimited:
			fmt.Fprint(w, " unlimited")
		default:
			fmt.Fprintf(w, " %d/%s limit=%q", c.RequestsPerUnit, c.Unit, c.Limit)
		}
		if c.Shadow {
			fmt.Fprint(w, " shadow_mode")
		}
		if c.QuotaMode {
			fmt.Fprint(w, " quota_mode")
		}
		if c.Charge {
			fmt.Fprint(w, " charge")
		}
		if c.DetailedMetric {
			fmt.Fprint(w, " detailed_metric")
		}
		if len(c.Replaces) > 0 {
			fmt.Fprintf(w, " replaces=%s", strings.Join(c.Replaces, ","))
		}
		if c.Metadata != nil {
			fmt.Fprintf(w, " metadata=%s", c.Metadata)
		}
		fmt.Fprintln(w)
	}
	writeConcurrencies(w, concs)
}

// writeConcurrencies writes /debug/config's text lines of concs.
func writeConcurrencies(w io.Writer, concs []configConcurrency) {
	for _, c := range concs {
		fmt.Fprintf(w, "%s: %s concurrency", c.Domain, c.Path)
		if c.Name != "" {
			fmt.Fprintf(w, " name=%q", c.Name)
		}
		fmt.Fprintf(w, " max=%d lifetime=%s", c.Max, c.Lifetime)
		if c.Pool != c.Path {
			fmt.Fprintf(w, " pool=%s", c.Pool)
		}
		if c.Headroom > 0 {
			fmt.Fprintf(w, " headroom=%d", c.Headroom)
		}
		if c.RateLimit != "" {
			fmt.Fprintf(w, " with_rate_limit=%q", c.RateLimit)
		}
		fmt.Fprintln(w)
	}
}

// compactJSON is m in protobuf's JSON, without spaces.
func compactJSON(m proto.Message) json.RawMessage {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil
	}
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return nil
	}
	return out.Bytes()
}
