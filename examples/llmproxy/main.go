// Command llmproxy is a reverse proxy in front of an OpenAI-compatible API
// that limits each API key to requests and tokens per minute.
//
// A request's tokens are known only once the model has answered. So a
// request takes an estimate before it goes upstream (its max_tokens, and a
// token for every 4 bytes of its body for the prompt), and once the answer
// has gone by it is settled to the usage.total_tokens the answer reports (a
// streamed answer in its last event): the excess given back, the shortfall
// charged. A key charged past its budget owes up to -debt tokens and is
// refused until it has paid them. A streamed request that does not ask for
// its usage (stream_options.include_usage) is sent asking for it: its
// client sees one more event, with no choices and the usage.
//
// The API key is the bearer token of the Authorization header, passed
// upstream as it came; the limits count it under its SHA-256, so the store
// never holds a key. A request without one is answered 401. A refusal is
// 429 with Retry-After, the draft-11 RateLimit and RateLimit-Policy headers
// and an RFC 9457 problem naming the policy ("rpm" or "tpm").
//
// With -redis every proxy process over one Redis shares the budgets;
// without, they live in this process's memory.
//
//	go run ./examples/llmproxy -upstream https://api.openai.com -redis localhost:6379
//	curl localhost:8080/v1/chat/completions -H "Authorization: Bearer $OPENAI_API_KEY" \
//	  -d '{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"Hi"}]}'
package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

// Limits are the budgets of each API key.
type Limits struct {
	Requests int64         // requests per Period
	Tokens   int64         // tokens per Period
	Debt     int64         // tokens a key may owe past its budget
	Period   time.Duration // a minute
}

const (
	maxBody          = 4 << 20 // the largest request body read, and sent upstream
	defaultMaxTokens = 1024    // the answer's estimate when max_tokens is absent
)

// NewProxy returns the proxy to upstream, limited on lim.
func NewProxy(upstream *url.URL, lim *sluice.Limiter, l Limits) (http.Handler, error) {
	tpm := sluice.Per(l.Tokens, l.Period)
	tpm.Debt = l.Debt
	m, err := httplimit.New(lim, []httplimit.Policy{
		{Name: "rpm", Limit: sluice.Per(l.Requests, l.Period), Key: apiKey},
		{Name: "tpm", Limit: tpm, Key: apiKey, CostFunc: estimate,
			Used: &httplimit.Used{JSON: []string{"usage", "total_tokens"}}},
	},
		httplimit.WithMissingKey(http.HandlerFunc(unauthorized)),
		httplimit.WithErrorLog(func(_ *http.Request, err error) { log.Print(err) }))
	if err != nil {
		return nil, err
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(upstream)
		// The usage is read from the body as it goes by: without the
		// client's Accept-Encoding, the Transport asks for gzip itself and
		// hands on the body unzipped.
		pr.Out.Header.Del("Accept-Encoding")
	}}
	return readBody(m.Handler(proxy)), nil
}

// apiKey keys a request on its bearer token's SHA-256 (128 bits of it).
func apiKey(r *http.Request) (string, bool) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:16]), true
}

func unauthorized(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("WWW-Authenticate", "Bearer")
	http.Error(w, "an API key is required: Authorization: Bearer <key>", http.StatusUnauthorized)
}

type estimateKey struct{}

// readBody reads a request's body, at most maxBody bytes, and hands the
// request on with the body to send upstream (inspect's) and its estimate
// in its context, for the tpm policy's cost (estimate).
func readBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			status := http.StatusBadRequest
			if errors.As(err, new(*http.MaxBytesError)) {
				status = http.StatusRequestEntityTooLarge
			}
			http.Error(w, "reading the request body: "+err.Error(), status)
			return
		}
		body, tokens := inspect(body)
		r = r.WithContext(context.WithValue(r.Context(), estimateKey{}, tokens))
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// estimate is the tpm policy's cost: readBody's estimate of the request's
// tokens. An estimate past the tpm limit's burst is answered 413.
func estimate(r *http.Request) (int64, error) {
	tokens, _ := r.Context().Value(estimateKey{}).(int64)
	return tokens, nil
}

// inspect returns the body to send upstream and its estimate in tokens: a
// token for every 4 bytes (the prompt), and max_completion_tokens,
// max_tokens or defaultMaxTokens (the answer). The settle corrects it. A
// streamed request is made to ask for its usage. An empty body (a GET)
// costs nothing.
func inspect(body []byte) ([]byte, int64) {
	if len(body) == 0 {
		return body, 0
	}
	var req struct {
		MaxTokens           int64 `json:"max_tokens"`
		MaxCompletionTokens int64 `json:"max_completion_tokens"`
		Stream              bool  `json:"stream"`
		StreamOptions       struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(body, &req) // a field absent, or not of its type, reads as 0
	tokens := int64(len(body))/4 + max(0, cmp.Or(req.MaxCompletionTokens, req.MaxTokens, defaultMaxTokens))
	if req.Stream && !req.StreamOptions.IncludeUsage {
		body = askUsage(body)
	}
	return body, tokens
}

// askUsage sets stream_options.include_usage in a request's body, so that
// the stream's last event reports the usage. The other fields go as they
// came (in another order).
func askUsage(body []byte) []byte {
	var req, opts map[string]json.RawMessage
	if json.Unmarshal(body, &req) != nil {
		return body
	}
	if json.Unmarshal(req["stream_options"], &opts) != nil || opts == nil {
		opts = map[string]json.RawMessage{}
	}
	opts["include_usage"] = json.RawMessage("true")
	req["stream_options"], _ = json.Marshal(opts)
	out, err := json.Marshal(req)
	if err != nil {
		return body
	}
	return out
}

// newLimiter returns a Limiter over the Redis at addr (host:port), or in
// memory when addr is "".
func newLimiter(addr string) (*sluice.Limiter, error) {
	if addr == "" {
		return sluice.New(memstore.New()), nil
	}
	st, err := redisstore.New(redis.NewClient(&redis.Options{Addr: addr}))
	if err != nil {
		return nil, err
	}
	if err := st.CheckConfig(context.Background()); err != nil {
		log.Printf("llmproxy: %v", err) // an evicting Redis forgets what keys spent
	}
	return sluice.New(st), nil
}

func envOr(name, def string) string { return cmp.Or(os.Getenv(name), def) }

func main() {
	listen := flag.String("listen", envOr("LLMPROXY_LISTEN", "localhost:8080"), "address to listen on ($LLMPROXY_LISTEN)")
	upstream := flag.String("upstream", envOr("LLMPROXY_UPSTREAM", "https://api.openai.com"), "the API's base URL ($LLMPROXY_UPSTREAM)")
	redisAddr := flag.String("redis", os.Getenv("LLMPROXY_REDIS"), "the Redis every proxy process shares, host:port ($LLMPROXY_REDIS); none: limits in memory")
	l := Limits{Period: time.Minute}
	flag.Int64Var(&l.Requests, "rpm", 60, "requests per minute per API key")
	flag.Int64Var(&l.Tokens, "tpm", 100_000, "tokens per minute per API key")
	flag.Int64Var(&l.Debt, "debt", 20_000, "tokens a key may owe past its budget")
	flag.Parse()
	up, err := url.Parse(*upstream)
	if err != nil || up.Scheme == "" || up.Host == "" {
		log.Fatalf("llmproxy: -upstream %q: want a URL such as https://api.openai.com", *upstream)
	}
	lim, err := newLimiter(*redisAddr)
	if err != nil {
		log.Fatalf("llmproxy: %v", err)
	}
	h, err := NewProxy(up, lim, l)
	if err != nil {
		log.Fatalf("llmproxy: %v", err)
	}
	log.Printf("llmproxy: %s to %s, per API key %d requests and %d tokens a minute (debt %d)", *listen, up, l.Requests, l.Tokens, l.Debt)
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
