package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// examples/serve loads, and holds the rules the comments of rules.yaml and
// llm.yaml and the README describe: a new rule there needs a case here.
// (llm.yaml's calls are played by serve's TestLLMExample.)
func TestExampleServeRules(t *testing.T) {
	c, err := rlsconfig.Load(filepath.Join("..", "..", "..", "..", "examples", "serve"))
	if err != nil {
		t.Fatal(err)
	}
	e := func(kv ...string) []rlsconfig.Entry {
		var out []rlsconfig.Entry
		for i := 0; i < len(kv); i += 2 {
			out = append(out, rlsconfig.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	cases := []struct {
		domain            string
		desc              []rlsconfig.Entry
		path, name, limit string
		unlimited, shadow bool
		charge            bool
	}{
		{desc: e("remote_address", "10.0.0.1"), path: "remote_address", limit: "100/1s aligned-window burst 100"},
		{desc: e("api_key", "alice"), path: "api_key", limit: "5/1h0m0s token-bucket burst 5"},
		{desc: e("api_key", "internal"), path: "api_key=internal", unlimited: true},
		{desc: e("path", "/export/users", "api_key", "alice"), path: "path=/export/*/api_key", name: "exports", limit: "10/1h0m0s aligned-window burst 10"},
		{desc: e("plan", "free", "api_key", "alice"), path: "plan=free/api_key", name: "free-plan", limit: "100/1h0m0s aligned-window burst 100", shadow: true},
		{domain: "llm", desc: e("generic_key", "tokens", "api_key", "alice"), path: "generic_key=tokens/api_key", name: "tokens", limit: "10000/1m0s token-bucket burst 10000 debt 50000", charge: true},
		{domain: "llm", desc: e("generic_key", "requests", "api_key", "alice"), path: "generic_key=requests/api_key", name: "requests", limit: "60/1m0s aligned-window burst 60"},
	}
	if n := len(c.Rules()); n != len(cases) {
		t.Errorf("%d rules, want %d", n, len(cases))
	}
	for _, tc := range cases {
		domain := tc.domain
		if domain == "" {
			domain = "edge"
		}
		r := c.Resolve(domain, [][]rlsconfig.Entry{tc.desc})[0]
		if r == nil {
			t.Errorf("%v: no rule", tc.desc)
			continue
		}
		limit := ""
		if !r.Unlimited {
			limit = r.Limit.String()
		}
		if r.Path != tc.path || r.Name != tc.name || limit != tc.limit || r.Unlimited != tc.unlimited || r.Shadow != tc.shadow || r.Charge != tc.charge {
			t.Errorf("%v: rule %s name %q limit %q unlimited %v shadow %v charge %v; want %s %q %q %v %v %v",
				tc.desc, r.Path, r.Name, limit, r.Unlimited, r.Shadow, r.Charge, tc.path, tc.name, tc.limit, tc.unlimited, tc.shadow, tc.charge)
		}
	}
	// The one concurrency limit: the exports', with their rate limit.
	export := e("path", "/export/users", "api_key", "alice")
	cc := c.ResolveConcurrency("edge", export)
	if n := len(c.Concurrencies()); n != 1 || cc == nil || cc.Name != "running-exports" || cc.Limit != sluice.MaxConcurrent(2).WithLifetime(5*time.Minute) ||
		cc.Rate != c.Resolve("edge", [][]rlsconfig.Entry{export})[0] {
		t.Errorf("%d concurrency limits; the exports': %+v", n, cc)
	}
}

// The README's `sluice serve` example does what the README says: its
// command line starts the service, its curl's first answer is the one shown,
// and after four more calls the next is refused with the Retry-After it
// names, less the seconds since the first call (a README that said "720"
// flat was read as a promise, and a slower hand got 719).
func TestReadmeServeExample(t *testing.T) {
	t.Chdir(filepath.Join("..", "..", "..", "..")) // the README's commands run at the repository's root
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	cmd := regexp.MustCompile("(?m)^go run ./cmd/sluice serve( [^#\n]*)?$").FindStringSubmatch(text)
	call := regexp.MustCompile("(?m)^curl -s localhost:8080(/\\S+) -d '([^']*)'\n```\n\n```json\n(.*)\n```").FindStringSubmatch(text)
	retry := regexp.MustCompile("`Retry-After` of\\s+([0-9]+) seconds less those since the first call").FindStringSubmatch(text)
	if cmd == nil || call == nil || retry == nil {
		t.Fatalf("the README has no serve example as this test reads it (command %q, curl and its answer %q, Retry-After %q)", cmd, call, retry)
	}
	path, body, answer := call[1], call[2], call[3]
	wantRetry, _ := strconv.Atoi(retry[1])

	// The README's flags, then listeners of the test's own and runtime
	// settings that leave the test process as it was.
	args := append(strings.Fields(cmd[1]), "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json",
		"--gomaxprocs", fmt.Sprint(runtime.GOMAXPROCS(0)), "--gogc", "0")
	var stderr testenv.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serveCmd(ctx, args, nil, &stderr, &stderr) }()
	var httpAddr string
	for deadline := time.Now().Add(20 * time.Second); httpAddr == ""; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("sluice serve%s: %v\n%s", cmd[1], err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no serving line:\n%s", stderr.String())
		}
		for _, m := range jsonLines(t, stderr.String()) {
			if m["msg"] == "serving" {
				httpAddr, _ = m["http"].(string)
			}
		}
	}

	take := func() (int, string, string) {
		t.Helper()
		// As curl -d sends it.
		resp, err := http.Post("http://"+httpAddr+path, "application/x-www-form-urlencoded", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, strings.TrimSuffix(string(b), "\n"), resp.Header.Get("Retry-After")
	}
	start := time.Now()
	if code, got, _ := take(); code != http.StatusOK || got != answer {
		t.Errorf("the README's call: %d\n%s\nwant 200 and the README's answer\n%s", code, got, answer)
	}
	for i := 2; i <= 5; i++ {
		if code, got, _ := take(); code != http.StatusOK {
			t.Errorf("call %d: %d %s, want 200", i, code, got)
		}
	}
	code, got, after := take()
	// The bucket refills as the calls go by: a run slower than a second
	// may round down by the seconds it took.
	slack := int(time.Since(start) / time.Second)
	if n, err := strconv.Atoi(after); code != http.StatusTooManyRequests || err != nil || n > wantRetry || n < wantRetry-slack {
		t.Errorf("call 6: %d, Retry-After %q, %s; want 429 and Retry-After %d", code, after, got, wantRetry)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// The README's other `go run ./cmd/sluice …` commands run as written (from
// the repository's root), and the figure it shows is what its caption's
// command writes: docs/sim.svg, byte for byte.
func TestReadmeCommands(t *testing.T) {
	t.Chdir(filepath.Join("..", "..", "..", "..")) // the README's commands run at the repository's root
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds := regexp.MustCompile("(?m)go run \\./cmd/sluice ((?:sim|replay|version)[^#`\n]*)").FindAllStringSubmatch(string(readme), -1)
	if len(cmds) < 3 {
		t.Fatalf("%d `go run ./cmd/sluice` commands besides serve in the README; want the two sim runs and the figure's", len(cmds))
	}
	for _, m := range cmds {
		args := strings.Fields(m[1])
		var svg string
		for i, a := range args {
			if a == "--svg" && i+1 < len(args) {
				svg, args[i+1] = args[i+1], filepath.Join(t.TempDir(), "sim.svg")
			}
		}
		var out, errs strings.Builder
		if code := Main(context.Background(), args, strings.NewReader(""), &out, &errs); code != 0 || out.Len() == 0 {
			t.Errorf("go run ./cmd/sluice %s: exit %d, stdout %d bytes, stderr:\n%s", m[1], code, out.Len(), errs.String())
			continue
		}
		if svg != "" {
			want, err := os.ReadFile(svg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(args[slices.Index(args, "--svg")+1])
			if err != nil || string(got) != string(want) {
				t.Errorf("%s differs from what `sluice %s` writes: run it again (%v)", svg, m[1], err)
			}
		}
	}
}
