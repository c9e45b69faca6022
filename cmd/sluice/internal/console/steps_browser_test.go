package console

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/browsertest"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/sim"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// shownStep is what the stepper shows of one step.
type shownStep struct {
	Step   string     `json:"step"`
	Before [][]string `json:"before"`
	Math   []string   `json:"math"`
	After  [][]string `json:"after"`
	Result [][]string `json:"result"`
}

const readStepJS = `(() => {
	const cur = document.getElementById("step-current");
	const dl = (part) => Array.from(cur.querySelectorAll("dl[data-part=" + part + "] dt")).map(dt => [dt.innerText, dt.nextElementSibling.innerText]);
	return {step: cur.dataset.step, before: dl("before"), after: dl("after"), result: dl("result"),
		math: Array.from(cur.querySelectorAll("ol[data-part=math] li")).map(li => li.innerText)};
})()`

// randomRequests types a random sequence of requests: offsets in time
// order, some at once, some with another cost.
func randomRequests(r *rand.Rand, capacity int64) string {
	var items []string
	off := int64(0)
	for range 4 + r.IntN(8) {
		off += r.Int64N(4) * 75
		item := fmt.Sprintf("%dms", off)
		if r.IntN(3) == 0 {
			item += fmt.Sprintf(" x%d", 2+r.IntN(3))
		}
		if r.IntN(3) == 0 {
			item += fmt.Sprintf(" cost=%d", r.Int64N(capacity+1))
		}
		items = append(items, item)
	}
	return strings.Join(items, ", ")
}

// TestBrowserSteps types a random walk for each algorithm, steps forward
// through it and back, and checks that what the stepper shows is the
// server's walk, whose decisions are the exact model's.
func TestBrowserSteps(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 27))
	_, _, ctx := browse(t, testView(), true)
	for i, k := range algo.Kinds() {
		req := StepsRequest{Algorithm: k.String(), Limit: "4/1s", Burst: ptr(int64(3)), Requests: randomRequests(r, 3)}
		want, err := walk(req, testView(), new(limits.Defaults()))
		if err != nil {
			t.Fatal(err)
		}
		err = chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS("#steps-algorithm"), req.Algorithm),
			typeInto("steps-limit", req.Limit),
			typeInto("steps-burst", "3"),
			typeInto("steps-requests", req.Requests),
		)
		if err != nil {
			t.Fatal(err)
		}
		press(t, ctx, "#steps-run")
		waitFor(t, ctx, fmt.Sprintf(`Number(document.body.dataset.stepsRuns || 0) >= %d && document.getElementById("step-current")`, i+1))
		if n := eval[int](t, ctx, `document.querySelectorAll("#steps-table tbody tr[data-step]").length`); n != len(want.Steps) {
			t.Fatalf("%s: %d rows, want %d", k, n, len(want.Steps))
		}
		m := model.New(k, 4, 1e6, 3)
		check := func(j int) {
			t.Helper()
			got := eval[shownStep](t, ctx, readStepJS)
			st := want.Steps[j]
			pairs := func(fs []sim.Field) [][]string {
				out := [][]string{}
				for _, f := range fs {
					out = append(out, []string{f.Name, f.Value})
				}
				return out
			}
			res := pairs(st.Result)
			if st.Error != "" {
				res = append([][]string{{"error", st.Error}}, res...)
			}
			if got.Step != fmt.Sprint(st.N) || fmt.Sprint(got.Before) != fmt.Sprint(pairs(st.Before)) || fmt.Sprint(got.After) != fmt.Sprint(pairs(st.After)) ||
				fmt.Sprint(got.Result) != fmt.Sprint(res) || strings.Join(got.Math, "|") != strings.Join(st.Math, "|") {
				t.Errorf("%s (%s) step %d: the page shows\n%+v\nthe server's walk\n%+v", k, req.Requests, j+1, got, st)
			}
		}
		for j, st := range want.Steps {
			if j > 0 {
				press(t, ctx, "#step-forward") // from the script: a click at a point could land elsewhere while the live view redraws
			}
			check(j)
			if st.Error == "" {
				d := m.Take("k", st.T, st.Cost)
				if d.Allowed != st.Decision.Allowed || fmt.Sprint(d.Remaining) != st.Result[1].Value {
					t.Errorf("%s step %d: the page shows %v, the model decides %+v", k, j+1, st.Result, d)
				}
			}
		}
		if eval[bool](t, ctx, `!document.getElementById("step-forward").disabled`) {
			t.Errorf("%s: Forward is enabled at the last step", k)
		}
		for j := len(want.Steps) - 2; j >= max(0, len(want.Steps)-4); j-- {
			press(t, ctx, "#step-back")
			check(j)
		}
		// The keys: Home goes to the first step, ArrowRight on by one. Back
		// is disabled (and cannot take the focus) when the walk back above
		// reached the first step; the stepper listens on either button.
		if err := chromedp.Do(ctx, chromedp.Focus(chromedp.CSS("#step-back:enabled, #step-forward:enabled")), chromedp.KeyEvent(kb.Home), chromedp.KeyEvent(kb.ArrowRight)); err != nil {
			t.Fatal(err)
		}
		if len(want.Steps) > 1 {
			check(1)
		}
		if i == 1 {
			browsertest.Screenshot(t, ctx, "steps")
		}
	}
}

// TestBrowserStepsForm walks without the script: the form posts to
// /console/steps and every step's state and arithmetic open in the table.
func TestBrowserStepsForm(t *testing.T) {
	_, _, ctx := browse(t, testView(), false)
	err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#steps-rule"), "edge.api.user"),
		typeInto("steps-requests", "0s x6, 1s"),
		chromedp.Click(chromedp.CSS("#steps-run")),
		chromedp.WaitVisible(chromedp.CSS("#steps-table")),
	)
	if err != nil {
		t.Fatal(err)
	}
	want, err := walk(StepsRequest{Rule: "edge.api.user", Requests: "0s x6, 1s"}, testView(), new(limits.Defaults()))
	if err != nil {
		t.Fatal(err)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#steps-table tbody tr[data-step]").length`); n != len(want.Steps) {
		t.Fatalf("%d rows, want %d", n, len(want.Steps))
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-step="6"] summary`))); err != nil {
		t.Fatal(err)
	}
	got := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('tr[data-step="6"] ol[data-part=math] li')).map(li => li.innerText)`)
	if strings.Join(got, "|") != strings.Join(want.Steps[5].Math, "|") {
		t.Errorf("step 6's arithmetic\n%q\nwant\n%q", got, want.Steps[5].Math)
	}
	if !eval[bool](t, ctx, `document.getElementById("stepper").hidden`) {
		t.Error("the stepper shows without the script")
	}
	browsertest.Screenshot(t, ctx, "steps-form")
}
