package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sluice-go/sluice/internal/policycore"
)

// The headers' canonical keys, so that setting them does not canonicalize
// (which allocates for "RateLimit", not canonical as written).
var (
	hdrRateLimitPolicy = http.CanonicalHeaderKey("RateLimit-Policy")
	hdrRateLimit       = http.CanonicalHeaderKey("RateLimit")
	hdrXLimit          = http.CanonicalHeaderKey("X-RateLimit-Limit")
	hdrXRemaining      = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hdrXReset          = http.CanonicalHeaderKey("X-RateLimit-Reset")
)

// writeHeaders sets the rate-limit headers of results in each style, as
// Header.Set would. Each style's values are written in one stack buffer and
// made one string, cut into the values: one allocation a style, however
// many policies. The draft-11 headers' one-element slices are cut from vals
// (the request's state's, or with no state an array of their own); the
// legacy ones' share one array of their own.
func (m *Middleware) writeHeaders(h http.Header, results []PolicyResult, vals *[2]string) {
	if len(results) == 0 {
		return
	}
	var buf [256]byte
	for _, s := range m.headers {
		switch s {
		case HeadersDraft11:
			b := buf[:0]
			static := m.enforcedOnly(results)
			if !static {
				for i, pr := range results {
					if i > 0 {
						b = append(b, ", "...)
					}
					b = policycore.AppendPolicy(b, pr.Name, pr.Quota, pr.Window)
				}
			}
			n := len(b)
			for i, pr := range results {
				if i > 0 {
					b = append(b, ", "...)
				}
				b = policycore.AppendLimit(b, pr.Name, pr.Remaining, pr.Reset, pr.Quota)
			}
			v := string(b)
			vals[0], vals[1] = v[:n], v[n:]
			if static {
				vals[0] = m.policyHeader
			}
			h[hdrRateLimitPolicy] = vals[0:1:1] // full slices: an Add reallocates
			h[hdrRateLimit] = vals[1:2:2]
		case HeadersXRateLimit:
			tight := results[0]
			for _, pr := range results[1:] {
				if pr.Remaining < tight.Remaining {
					tight = pr
				}
			}
			b := strconv.AppendInt(buf[:0], tight.Quota, 10)
			n1 := len(b)
			b = strconv.AppendInt(b, max(0, tight.Remaining), 10) // a debt is nothing left
			n2 := len(b)
			b = strconv.AppendInt(b, tight.Reset, 10)
			v := string(b)
			xs := []string{v[:n1], v[n1:n2], v[n2:]}
			h[hdrXLimit] = xs[0:1:1]
			h[hdrXRemaining] = xs[1:2:2]
			h[hdrXReset] = xs[2:3:3]
		}
	}
}

// enforcedOnly reports whether results are the enforced policies', all and
// in order, whose RateLimit-Policy value New made once.
func (m *Middleware) enforcedOnly(results []PolicyResult) bool {
	if len(results) != len(m.enforced) {
		return false
	}
	for i, pr := range results {
		if p := m.enforced[i]; pr.Name != p.Name || pr.Shadow || pr.Quota != p.Q || pr.Window != p.W {
			return false
		}
	}
	return true
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Violated []string `json:"violated-policies,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, typ, title, detail string, violated []string) {
	body, _ := json.Marshal(problem{Type: typ, Title: title, Status: status, Detail: detail, Violated: violated})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// statusWriter answers with status unless the handler writes another.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(w.status)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
