package console

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeRLQS returns Options whose RLQS reports budgets budgets of shares
// shares each, whatever n asks (the console bounds them).
func fakeRLQS(budgets, shares int) Options {
	o := Options{Config: testView}
	o.RLQS = func(int) *RLQS {
		v := &RLQS{Budgets: budgets + 5, Clients: shares, Bytes: 4321, Bound: "the RLQS view's bytes with another budget: 4400, over the service's limit view-bytes of 4321", Top: []RLQSBudget{}}
		for i := range budgets {
			b := RLQSBudget{Domain: "envoy", Rule: "per_user", Key: fmt.Sprintf("envoy/user=<u%d>", i), Rate: 600, FillS: 60,
				Outstanding: 550, Room: 50, Clients: shares, Holders: shares + 1, Demand: 812.25, Granted: 540}
			for j := range shares {
				d := 100.5
				s := RLQSShare{Holder: uint64(10*i + j + 1), Weight: 1, State: "active", Granted: 90, Outstanding: 95, GrantEndsUS: 5_500_000, LeaseEndsUS: 6_500_000}
				if j > 0 {
					s.Demand = &d
				}
				b.Shares = append(b.Shares, s)
			}
			v.Top = append(v.Top, b)
		}
		return v
	}
	return o
}

// GET /console/api/rlqs answers the RLQS view: the budgets, their
// rate, leases, room and clients, and the shares; the page shows the
// same without the script.
func TestRLQSEndpoint(t *testing.T) {
	c, _ := newTestConsole(t, fakeRLQS(2, 3))
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	code, hdr, body := get(t, srv.URL+"/console/api/rlqs")
	var v RLQS
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("%d %v %s", code, err, body)
	}
	if v.Budgets != 7 || v.MaxBytes != c.lim.ViewBytes || v.Bound == "" || len(v.Top) != 2 || len(v.Top[0].Shares) != 3 {
		t.Fatalf("the view: %+v", v)
	}
	if b := v.Top[0]; b.Room != 50 || b.Outstanding != 550 || b.Rate != 600 || b.FillS != 60 || b.Rule != "per_user" || b.Shares[0].Demand != nil || *b.Shares[1].Demand != 100.5 {
		t.Errorf("the first budget: %+v", b)
	}
	for _, want := range []string{`"room":50`, `"lease_ends_us":6500000`, `"grant_ends_us":5500000`, `"holders":4`, `"state":"active"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the JSON lacks %s", want)
		}
	}
	_, _, page := get(t, srv.URL+"/")
	for _, want := range []string{`<a href="#rlqs">RLQS</a>`, `<section id="rlqs"`, `<code>envoy/user=&lt;u1&gt;</code>`, `data-k="room">50<`, `600 per 60s`, `data-k="demand" data-label="Demand">—<`, `data-label="Demand">100.5<`, `data-label="Lease ends in">6.5s<`, `Budgets were left out`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
}

// With no budget shared the page says so; without Options.RLQS (serve
// without --rlqs) there is no view: no section, and the endpoint 404.
func TestRLQSEmptyAndOff(t *testing.T) {
	c, _ := newTestConsole(t, fakeRLQS(0, 0))
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	if _, _, page := get(t, srv.URL+"/"); !strings.Contains(page, `id="rlqs-none"`) {
		t.Error("no budgets: the page does not say so")
	}
	off, _ := newTestConsole(t, Options{Config: testView})
	srv2 := httptest.NewServer(off.Handler())
	defer srv2.Close()
	if code, _, body := get(t, srv2.URL+"/console/api/rlqs"); code != 404 || !strings.Contains(body, "--rlqs") {
		t.Errorf("without RLQS: %d %s", code, body)
	}
	if _, _, page := get(t, srv2.URL+"/"); strings.Contains(page, `id="rlqs"`) || strings.Contains(page, `href="#rlqs"`) {
		t.Error("without RLQS the page shows an RLQS section")
	}
}

// The view lists at most TopK budgets and TopK shares of each, whatever
// Options.RLQS returns.
func TestRLQSTopKCap(t *testing.T) {
	o := fakeRLQS(8, 9)
	o.TopK = 7
	c, _ := newTestConsole(t, o)
	v := c.rlqsView()
	if len(v.Top) != 7 || len(v.Top[6].Shares) != 7 {
		t.Errorf("%d budgets, %d shares; want 7 of each", len(v.Top), len(v.Top[6].Shares))
	}
}
