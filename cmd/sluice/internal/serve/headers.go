package serve

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/internal/policycore"
)

// Headers chooses the rate-limit headers a response asks Envoy to add.
type Headers uint8

const (
	// HeadersNone adds none.
	HeadersNone Headers = iota
	// HeadersEnvoy adds envoyproxy/ratelimit's RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset, from the descriptor nearest its
	// limit (an over-limit one first).
	HeadersEnvoy
	// HeadersDraft11 adds RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers-11), one item per limited
	// descriptor.
	HeadersDraft11
)

// EnvoyHeaderNames names the headers of HeadersEnvoy, as envoy's
// LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER do; an
// empty name is the default (RateLimit-Limit, RateLimit-Remaining,
// RateLimit-Reset).
type EnvoyHeaderNames struct {
	Limit, Remaining, Reset string
}

// withDefaults fills the empty names, and checks the others are header
// field names (RFC 9110 tokens).
func (n EnvoyHeaderNames) withDefaults() (EnvoyHeaderNames, error) {
	for _, f := range []struct {
		name *string
		def  string
	}{{&n.Limit, "RateLimit-Limit"}, {&n.Remaining, "RateLimit-Remaining"}, {&n.Reset, "RateLimit-Reset"}} {
		if *f.name == "" {
			*f.name = f.def
			continue
		}
		if !isToken(*f.name) {
			return n, fmt.Errorf("response header name %q is not a valid HTTP header name", *f.name)
		}
	}
	return n, nil
}

// isToken reports whether s is an RFC 9110 token, a valid header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// ParseHeaders reads a --response-headers value: none, envoy or draft11.
func ParseHeaders(s string) (Headers, error) {
	switch s {
	case "none", "":
		return HeadersNone, nil
	case "envoy":
		return HeadersEnvoy, nil
	case "draft11":
		return HeadersDraft11, nil
	}
	return HeadersNone, fmt.Errorf("response headers %q: want none, envoy or draft11", s)
}

// headers builds the response headers mode asks for.
func headers(mode Headers, names *EnvoyHeaderNames, desc []descState, sts []*pb.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	switch mode {
	case HeadersEnvoy:
		best := -1
		for i := range desc {
			if !headed(&desc[i]) {
				continue
			}
			if best < 0 || (refuses(&desc[i]) && !refuses(&desc[best])) ||
				(refuses(&desc[i]) == refuses(&desc[best]) && sts[i].LimitRemaining < sts[best].LimitRemaining) {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		st := sts[best]
		reset := st.DurationUntilReset.AsDuration()
		return []*corev3.HeaderValue{
			{Key: names.Limit, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
			{Key: names.Remaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
			{Key: names.Reset, Value: strconv.FormatInt(policycore.Seconds(reset), 10)},
		}
	case HeadersDraft11:
		var pol, cur []byte
		for i := range desc {
			d := &desc[i]
			if !headed(d) {
				continue
			}
			name := policyName(d.rule)
			if len(pol) > 0 {
				pol = append(pol, ", "...)
				cur = append(cur, ", "...)
			}
			q, w := draft11Quota(d.rule.Limit)
			pol = policycore.AppendPolicy(pol, name, q, w)
			cur = policycore.AppendLimit(cur, name, d.res.Remaining, policycore.Seconds(sts[i].DurationUntilReset.AsDuration()), q)
		}
		if len(pol) == 0 {
			return nil
		}
		return []*corev3.HeaderValue{{Key: "RateLimit-Policy", Value: string(pol)}, {Key: "RateLimit", Value: string(cur)}}
	}
	return nil
}

// draft11Quota is a limit's q and w in the draft-11 fields, as httplimit
// and grpclimit send them: q the capacity r is counted against (a bucket's
// burst, not its rate). A requests_per_unit of 0 admits nothing: q is 0.
func draft11Quota(l sluice.Limit) (q, w int64) {
	if l.Validate() != nil {
		return 0, max(policycore.Seconds(l.Period), 1)
	}
	return policycore.Quota(l)
}

// policyName is a rule's name in headers and metrics: its name, else its
// descriptor path ("key1=value1/key2").
func policyName(r *rlsconfig.Rule) string {
	if r.Name != "" {
		return r.Name
	}
	return r.Path
}
