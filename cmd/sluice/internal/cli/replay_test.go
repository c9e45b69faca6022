package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/trace"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb testenv.SyncBuffer // a serve's logger may write errb beside Main
	code = Main(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestReplay(t *testing.T) {
	in := `{"t_us": 1764000000000000, "key": "user:1"}
{"t_us": 1764000000000000, "key": "user:1", "cost": 2, "note": "kept"}

{"t_us": 1764000000000000, "key": "user:1"}
{"t_us":1764000000500000,"key":"user:1"}
{"t_us": 1764000000500000, "key": "user:2", "cost": 4}
{"t_us": 1764000000600000, "key": "user:2", "cost": 0}
`
	code, out, errs := runCLI(t, in, "replay", "--limit", "2/1s", "--burst", "3", "--summary")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := []string{
		`{"t_us": 1764000000000000, "key": "user:1","allowed":true,"remaining":2,"retry_after_us":0,"reset_after_us":500000,"delay_us":0}`,
		`{"t_us": 1764000000000000, "key": "user:1", "cost": 2, "note": "kept","allowed":true,"remaining":0,"retry_after_us":0,"reset_after_us":1500000,"delay_us":0}`,
		`{"t_us": 1764000000000000, "key": "user:1","allowed":false,"remaining":0,"retry_after_us":500000,"reset_after_us":1500000,"delay_us":0}`,
		`{"t_us":1764000000500000,"key":"user:1","allowed":true,"remaining":0,"retry_after_us":0,"reset_after_us":1500000,"delay_us":0}`,
		`{"t_us": 1764000000500000, "key": "user:2", "cost": 4,"error":"sluice: cost exceeds capacity: cost 4, capacity 3"}`,
		`{"t_us": 1764000000600000, "key": "user:2", "cost": 0,"allowed":true,"remaining":3,"retry_after_us":0,"reset_after_us":0,"delay_us":0}`,
	}
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(got[i]), &v); err != nil {
			t.Errorf("line %d is not JSON: %v", i+1, err)
		}
	}
	for _, s := range []string{"user:1", "user:2", "all 2 keys", "peak/1s"} {
		if !strings.Contains(errs, s) {
			t.Errorf("summary lacks %q:\n%s", s, errs)
		}
	}
	// user:1: allowed 3, denied 1, units 4, peak 4 within one second.
	if !strings.Contains(errs, "user:1        3       1       0      4        4") {
		t.Errorf("summary for user:1 wrong:\n%s", errs)
	}
}

// A charge line charges its units, never refused, leaving the key in
// debt up to the limit's allowance; the takes wait for it, and --summary
// counts the units charged apart.
func TestReplayCharge(t *testing.T) {
	in := `{"t_us": 1764000000000000, "key": "k", "charge": 4}
{"t_us": 1764000000000000, "key": "k"}
{"t_us": 1764000000000000, "key": "k", "charge": 9}
{"t_us": 1764000000000000, "key": "k", "charge": 0}
{"t_us": 1764000002500000, "key": "k"}
`
	code, out, errs := runCLI(t, in, "replay", "--limit", "2/1s debt 3", "--summary")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := []string{
		`{"t_us": 1764000000000000, "key": "k", "charge": 4,"allowed":true,"remaining":-2,"retry_after_us":0,"reset_after_us":2000000,"delay_us":0}`,
		`{"t_us": 1764000000000000, "key": "k","allowed":false,"remaining":-2,"retry_after_us":1500000,"reset_after_us":2000000,"delay_us":0}`,
		`{"t_us": 1764000000000000, "key": "k", "charge": 9,"allowed":false,"remaining":-3,"retry_after_us":0,"reset_after_us":2500000,"delay_us":0}`,
		`{"t_us": 1764000000000000, "key": "k", "charge": 0,"allowed":true,"remaining":-3,"retry_after_us":0,"reset_after_us":2500000,"delay_us":0}`,
		`{"t_us": 1764000002500000, "key": "k","allowed":true,"remaining":1,"retry_after_us":0,"reset_after_us":500000,"delay_us":0}`,
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", out, strings.Join(want, "\n"))
	}
	if !strings.Contains(errs, "charged") || !strings.Contains(errs, "k        1       1       0      1       13        1") {
		t.Errorf("summary:\n%s", errs)
	}
	// A charge under an algorithm that cannot carry a debt is the line's
	// error.
	code, out, _ = runCLI(t, `{"t_us": 1764000000000000, "key": "k", "charge": 1}`, "replay", "--limit", "2/1s", "--algorithm", "sliding-log")
	if code != 0 || !strings.Contains(out, `"error":"sluice: only token-bucket`) {
		t.Errorf("a charge on a sliding log: exit %d, %s", code, out)
	}
}

func TestReplayMalformed(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{`not json`, "line 2: not a JSON object"},
		{`{"key": "k"}`, `line 2: missing "t_us"`},
		{`{"t_us": 1.5, "key": "k"}`, `line 2: "t_us" 1.5 is not a whole number`},
		{`{"t_us": -1, "key": "k"}`, `line 2: "t_us"`},
		{`{"t_us": 1, "key": ""}`, `line 2: "key" is empty`},
		{`{"t_us": 1, "key": 7}`, `line 2: "key" is a number, want a non-empty string`},
		{`{"t_us": 1, "key": "k", "cost": -2}`, `line 2: "cost" -2`},
		{`{"t_us": 1, "key": "k"} {}`, `line 2: text after`},
		{`[1]`, `line 2: not a JSON object`},
	} {
		code, out, errs := runCLI(t, "{\"t_us\": 5, \"key\": \"a\"}\n"+c.line+"\n{\"t_us\": 6, \"key\": \"a\"}\n", "replay", "--limit", "1/1s")
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want non-zero and %q", c.line, code, errs, c.want)
		}
		if strings.Count(out, "\n") != 1 {
			t.Errorf("%s: output before the bad line should be kept, got %q", c.line, out)
		}
	}
}

func TestReplayFlags(t *testing.T) {
	for _, args := range [][]string{
		{"replay", "--limit", "0/1s"},
		{"replay", "--limit", "1/1s", "--algorithm", "nope"},
		{"replay", "--limit", "1/1s", "--store", "nope://"},
		{"replay", "--limit", "1/1s", "--burst", "0"},
		{"replay", "--nope"},
		{"nope"},
	} {
		if code, _, _ := runCLI(t, "", args...); code == 0 {
			t.Errorf("%v: exit 0, want an error", args)
		}
	}
	if code, _, _ := runCLI(t, "", "help"); code != 0 {
		t.Error("help must exit 0")
	}
}

// Every algorithm replays, and the leaky bucket reports delays.
func TestReplayAlgorithms(t *testing.T) {
	in := strings.Repeat(`{"t_us": 1764000000000000, "key": "k"}`+"\n", 4)
	for _, a := range []string{"token-bucket", "gcra", "leaky-bucket", "fixed-window", "sliding-window", "sliding-log"} {
		code, out, errs := runCLI(t, in, "replay", "--algorithm", a, "--limit", "10/1s", "--burst", "2")
		if code != 0 || strings.Count(out, "\n") != 4 {
			t.Errorf("%s: exit %d %s\n%s", a, code, errs, out)
		}
		if a == "leaky-bucket" && !strings.Contains(out, `"delay_us":200000`) {
			t.Errorf("leaky-bucket: no third unit delayed by 200ms:\n%s", out)
		}
	}
}

// compositeTraceText is a JSON-lines trace of composite requests: one to
// three parts over a few keys, each with its own algorithm, limit, burst and
// cost.
func compositeTraceText(r *rand.Rand, n int) string {
	algos := []string{"token-bucket", "gcra", "leaky-bucket", "fixed-window", "aligned-window", "sliding-window", "sliding-log"}
	var b strings.Builder
	now := int64(1_764_000_000_000_000)
	for i := 0; i < n; i++ {
		now += r.Int64N(400_000) * int64(r.IntN(2))
		fmt.Fprintf(&b, `{"t_us": %d, "parts": [`, now)
		perm := r.Perm(4)
		for j := range 1 + r.IntN(3) {
			if j > 0 {
				b.WriteString(", ")
			}
			k := perm[j]
			fmt.Fprintf(&b, `{"key": "k%d", "algorithm": %q, "limit": "%d/1s", "burst": %d, "cost": %d}`, k, algos[(k+i/50)%len(algos)], 3+k, 2+k, r.IntN(3))
		}
		b.WriteString("]}\n")
	}
	return b.String()
}

// A composite line's decision is the model's: all parts must grant, a
// refusal spends nothing and reports the parts as they are.
func TestReplayComposites(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.SeedOr(t, 3), 4))
	in := compositeTraceText(r, 400)
	code, out, errs := runCLI(t, in, "replay")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	ks := model.NewKeys()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	allowed, denied, failed := 0, 0, 0
	for i, line := range strings.Split(strings.TrimSpace(in), "\n") {
		req, err := trace.Parse([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		var models []*model.Model
		var keys []string
		var costs []int64
		bad := false
		for _, pt := range req.Parts {
			l, err := sluice.ParseLimit(pt.Limit)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := sluice.ParseAlgorithm(pt.Algorithm)
			p, err := storelink.Params(l.WithBurst(pt.Burst).WithAlgorithm(a))
			if err != nil {
				t.Fatal(err)
			}
			bad = bad || pt.Cost > p.Capacity()
			models = append(models, ks.Model(model.Limit{Kind: p.Kind, Rate: p.Rate, Period: p.Period, Burst: p.Burst}))
			keys = append(keys, pt.Key)
			costs = append(costs, pt.Cost)
		}
		var got struct {
			Allowed                           *bool
			Remaining, RetryAfter, ResetAfter int64
			Delay                             int64
			Error                             string
		}
		var raw map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &raw); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if bad {
			if raw["error"] == nil {
				t.Fatalf("line %d: a cost over a part's capacity must be an error: %s", i+1, lines[i])
			}
			failed++
			continue
		}
		want := model.TakeAll(models, keys, costs, req.T)
		json.Unmarshal([]byte(lines[i]), &got)
		if got.Allowed == nil || *got.Allowed != want.Allowed || int64(raw["remaining"].(float64)) != want.Remaining ||
			int64(raw["retry_after_us"].(float64)) != want.RetryAfter || int64(raw["reset_after_us"].(float64)) != want.ResetAfter ||
			int64(raw["delay_us"].(float64)) != want.Delay {
			t.Fatalf("line %d: %s\nwant %+v", i+1, lines[i], want)
		}
		if want.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	if allowed < 50 || denied < 50 {
		t.Errorf("a trace that tests little: %d allowed, %d denied, %d errors", allowed, denied, failed)
	}
	t.Logf("%d composite lines equal to the model: %d allowed, %d denied, %d errors", len(lines), allowed, denied, failed)
}

func TestReplayCompositeLines(t *testing.T) {
	for _, c := range []struct{ in, args, want string }{
		{`{"t_us": 1, "parts": [{"key": "a", "limit": "1/1s"}], "key": "b"}`, "", `"parts" and "key"`},
		{`{"t_us": 1, "parts": []}`, "", `"parts" is empty`},
		{`{"t_us": 1, "key": "a"}`, "", `line 1: a line with a key needs --limit`},
		{`{"t_us": 1, "parts": {"key": "a"}}`, "", `"parts" is an object`},
		{`{"t_us": 1, "parts": [{"limit": "1/1s"}]}`, "", `"parts"[0]: missing or empty "key"`},
		{`{"t_us": 1, "parts": [{"key": "a", "limit": "1/1s", "cost": "2"}]}`, "", `"cost" is the string "2"`},
		{`{"t_us": 1, "parts": [{"key": "a", "limit": "1/1s", "rate": 2}]}`, "", `unknown field "rate"`},
		{`{"t_us": 1, "parts": [{"key": "a"}]}`, "", `part "a" has no "limit"`},
		{`{"t_us": 1, "parts": [{"key": "a", "limit": "1/1s", "algorithm": "nope"}]}`, "", `unknown algorithm "nope"`},
		{`{"t_us": 1, "parts": [{"key": "a"}, {"key": "b", "limit": "5/1s"}]}`, "--limit 2/1s", `"allowed":true,"remaining":1`},
		{`{"t_us": 1, "parts": [{"key": "a", "limit": "1/1s"}, {"key": "a", "limit": "1/1s"}]}`, "", `names a key twice`},
	} {
		args := append([]string{"replay"}, strings.Fields(c.args)...)
		_, out, errs := runCLI(t, c.in+"\n", args...)
		if !strings.Contains(out+errs, c.want) {
			t.Errorf("%s: stdout %q stderr %q, want %q", c.in, out, errs, c.want)
		}
	}
}
