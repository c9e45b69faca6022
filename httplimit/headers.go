package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// writeHeaders sets the rate-limit headers of results in each style.
func (m *Middleware) writeHeaders(h http.Header, results []PolicyResult) {
	if len(results) == 0 {
		return
	}
	for _, s := range m.headers {
		switch s {
		case HeadersDraft11:
			var pol, cur strings.Builder
			for i, pr := range results {
				if i > 0 {
					pol.WriteString(", ")
					cur.WriteString(", ")
				}
				name := sfString(pr.Name)
				pol.WriteString(name)
				pol.WriteString(";q=")
				pol.WriteString(strconv.FormatInt(pr.Quota, 10))
				pol.WriteString(";w=")
				pol.WriteString(strconv.FormatInt(pr.Window, 10))
				cur.WriteString(name)
				cur.WriteString(";r=")
				cur.WriteString(strconv.FormatInt(pr.Remaining, 10))
				cur.WriteString(";t=")
				cur.WriteString(strconv.FormatInt(pr.Reset, 10))
			}
			h.Set("RateLimit-Policy", pol.String())
			h.Set("RateLimit", cur.String())
		case HeadersXRateLimit:
			tight := results[0]
			for _, pr := range results[1:] {
				if pr.Remaining < tight.Remaining {
					tight = pr
				}
			}
			h.Set("X-RateLimit-Limit", strconv.FormatInt(tight.Quota, 10))
			h.Set("X-RateLimit-Remaining", strconv.FormatInt(tight.Remaining, 10))
			h.Set("X-RateLimit-Reset", strconv.FormatInt(tight.Reset, 10))
		}
	}
}

// sfString is s as an RFC 9651 String (names are printable ASCII, checked
// by New).
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
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
