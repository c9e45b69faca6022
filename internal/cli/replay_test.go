package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
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
		{"replay"},
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
