package serve

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// hostDo makes one request to ts naming host in its Host header, as a
// browser on a page of that name sends it (Origin the page's, Sec-Fetch-
// Site same-origin), and returns the status and the body.
func hostDo(t *testing.T, ts *testServer, method, path, host, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Origin", "http://"+host)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The red team's DNS rebinding: a page on evil.example, its name pointed at
// the loopback listener, drove /v1/acquire and read /console/api/live as
// its own same-origin requests. Every path but the probes now refuses a
// Host that is not a name the listener serves (421, the flag that allows
// it named), before anything is decided; IP literals, localhost and the
// names of AllowedHosts pass.
func TestDNSRebindingRefused(t *testing.T) {
	reached := 0
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ })
	ts, _ := startTest(t, Options{Handler: console})
	port := ts.base[strings.LastIndexByte(ts.base, ':'):]
	calls := []struct{ method, path, body string }{
		{"POST", "/v1/acquire", `{"key": "victim", "limit": 1, "lifetime": "1m"}`},
		{"POST", "/v1/take", `{"key": "victim", "limit": "1/1m"}`},
		{"POST", "/v1/charge", `{"key": "victim", "limit": "1/1m debt 5", "cost": 6}`},
		{"POST", "/v1/settle", `{"key": "victim", "limit": "1/1m debt 5", "estimate": 0, "actual": 6, "take": {"allowed": true}}`},
		{"POST", "/json", `{"domain": "test", "descriptors": [{"entries": [{"key": "key1", "value": "value1"}]}]}`},
		{"GET", "/console/api/live", ""},
		{"GET", "/", ""},
		{"POST", "/console/steps", ""},
		{"GET", "/metrics", ""},
		{"GET", "/debug/config", ""},
	}
	for _, c := range calls {
		code, body := hostDo(t, ts, c.method, c.path, "evil.example"+port, c.body)
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, "--allowed-hosts evil.example") {
			t.Errorf("%s %s, Host evil.example%s: %d %.200s, want 421", c.method, c.path, port, code, body)
		}
	}
	if reached != 0 {
		t.Errorf("the console was reached %d times", reached)
	}
	// Nothing was decided: the key's one unit is still there.
	if code, body := hostDo(t, ts, "POST", "/v1/take", "127.0.0.1"+port, calls[1].body); code != 200 {
		t.Errorf("a take after the refused ones: %d %s", code, body)
	}
	for _, p := range []string{"/healthz", "/readyz", "/healthcheck"} {
		if code, _ := hostDo(t, ts, "GET", p, "evil.example"+port, ""); code != 200 {
			t.Errorf("the probe %s with any Host: %d", p, code)
		}
	}
	for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "[::1]" + port, "10.1.2.3:80", "127.0.0.1"} {
		if code, body := hostDo(t, ts, "POST", "/v1/acquire", host, calls[0].body); code == http.StatusMisdirectedRequest {
			t.Errorf("Host %s: %d %s", host, code, body)
		}
	}
	// A request with no Host (HTTP/1.0) passes: browsers always send one.
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /console/api/live HTTP/1.0\r\n\r\n")
	if status, _ := bufio.NewReader(conn).ReadString('\n'); !strings.Contains(status, " 200 ") {
		t.Errorf("HTTP/1.0 with no Host: %q", status)
	}

	// The names an operator allows pass; others do not.
	ts, _ = startTest(t, Options{Handler: console, AllowedHosts: []string{"sluice", ".example.com"}})
	for host, want := range map[string]bool{"sluice" + port: true, "api.example.com" + port: true, "example.com": true, "evil.example" + port: false} {
		if code, _ := hostDo(t, ts, "POST", "/v1/take", host, calls[1].body); (code != http.StatusMisdirectedRequest) != want {
			t.Errorf("allowed sluice and .example.com, Host %s: %d", host, code)
		}
	}
	ts, _ = startTest(t, Options{Handler: console, AllowedHosts: []string{"*"}})
	if code, _ := hostDo(t, ts, "POST", "/v1/take", "evil.example"+port, calls[1].body); code == http.StatusMisdirectedRequest {
		t.Errorf("allowed *: %d", code)
	}
	if _, err := New(Options{AllowedHosts: []string{"http://sluice:8080"}}); err == nil || !strings.Contains(err.Error(), "want a name") {
		t.Errorf("a bad allowed host: %v", err)
	}
}
