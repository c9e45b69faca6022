package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/memstore"
)

// critical picks the requests that carry X-Critical.
func critical(r *http.Request) bool { return r.Header.Get("X-Critical") != "" }

// TestPriorityClasses: a policy keeping 3 of 10 a minute for critical
// requests refuses the others once 7 are spent, while critical ones use
// the rest; each request's headers are its class's (q less the reserve, r
// what its class may still spend). Alone (one policy: a take with a
// reserve) and beside another policy (a composite whose part keeps it).
func TestPriorityClasses(t *testing.T) {
	api := httplimit.Policy{Name: "api", Limit: sluice.PerMinute(10).WithAlgorithm(sluice.FixedWindow), Headroom: 3, Critical: critical, Key: httplimit.Static("all")}
	for _, tc := range []struct {
		name     string
		policies []httplimit.Policy
		// other is the second policy's RateLimit and RateLimit-Policy
		// items after n requests, or "" when it has none.
		other func(n int) (string, string)
	}{
		{"alone", []httplimit.Policy{api}, nil},
		{"composite", []httplimit.Policy{api, {Name: "user", Limit: sluice.PerMinute(100).WithAlgorithm(sluice.FixedWindow)}},
			func(n int) (string, string) {
				return `, "user";r=` + strconv.Itoa(100-n) + `;t=60`, `, "user";q=100;w=60`
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustNew(t, frozenLimiter(newClock()), tc.policies)
			srv := httptest.NewServer(m.Handler(echo))
			defer srv.Close()
			spent := 0
			check := func(crit bool, status int, r, q int64) {
				t.Helper()
				var hdr []string
				if crit {
					hdr = []string{"X-Critical", "1"}
				}
				resp, body := get(t, srv.Client(), srv.URL, hdr...)
				if resp.StatusCode == 200 {
					spent++
				}
				wantR := `"api";r=` + strconv.Itoa(int(r)) + `;t=60`
				wantP := `"api";q=` + strconv.Itoa(int(q)) + `;w=60`
				if tc.other != nil {
					or, op := tc.other(spent)
					wantR, wantP = wantR+or, wantP+op
				}
				if resp.StatusCode != status || resp.Header.Get("RateLimit") != wantR || resp.Header.Get("RateLimit-Policy") != wantP {
					t.Fatalf("critical %v after %d: %d %q %q, want %d %q %q (%s)", crit, spent, resp.StatusCode,
						resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"), status, wantR, wantP, body)
				}
				if status == 429 {
					if p := readProblem(t, resp, body); len(p.Violated) != 1 || p.Violated[0] != "api" {
						t.Fatalf("violated %v, want api", p.Violated)
					}
				}
			}
			for i := range 7 {
				check(false, 200, int64(6-i), 7)
			}
			check(false, 429, 0, 7) // past its share: 3 are kept
			for i := range 3 {
				check(true, 200, int64(2-i), 10)
			}
			check(true, 429, 0, 10)
		})
	}
}

// TestTransportClasses: outbound, a lower class waits until its cost and
// the reserve fit, a critical request only until its cost does.
func TestTransportClasses(t *testing.T) {
	c := newClock()
	sc := stepClock{c}
	lim := sluice.New(memstore.New(memstore.WithClock(sc)))
	up := &upstream{clock: c, start: c.Now()}
	srv := httptest.NewServer(up)
	defer srv.Close()
	client := newTransport(t, lim, []httplimit.Policy{
		{Name: "global", Limit: sluice.PerSecond(1).WithBurst(3), Key: httplimit.Static("all"), Headroom: 1, Critical: critical},
	}, httplimit.WithHoldClock(sc))
	for _, crit := range []bool{false, false, false, true, true, false} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		if crit {
			req.Header.Set("X-Critical", "1")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// Burst 3 keeping 1: two normal at once, the third when 2 are back
	// (1s); a critical one then takes the last unit, the next waits for
	// one (2s); a normal one then waits for 2 (4s).
	if got, want := fmt.Sprint(up.times()), "[0s 0s 1s 1s 2s 4s]"; got != want {
		t.Errorf("upstream saw requests at %s, want %s", got, want)
	}
}
