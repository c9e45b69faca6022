package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/sluice-go/sluice/bench"
)

// Row is one line of the comparison table: a library's medians in one group,
// and its speed relative to the reference library of that group.
type Row struct {
	Group, Lib string
	Runs       int                // samples of ns/op
	Median     map[string]float64 // unit → median
	// RefPerPeer is the reference's median ns/op over this library's: below 1
	// the reference is faster. NaN for the reference itself or when either is
	// missing.
	RefPerPeer float64
}

// Rows turns parsed output into table rows, grouped by benchmark group in
// order of first appearance, libraries in order of first appearance within
// each group.
func Rows(o *Output, ref string) []Row {
	var rows []Row
	for _, g := range o.Groups() {
		refNs := math.NaN()
		for _, r := range o.Results {
			if r.Group == g && r.Lib == ref {
				refNs, _ = r.Median("ns/op")
			}
		}
		for _, r := range o.Results {
			if r.Group != g {
				continue
			}
			row := Row{Group: g, Lib: r.Lib, Runs: len(r.Samples["ns/op"]), Median: map[string]float64{}, RefPerPeer: math.NaN()}
			for _, u := range r.Units {
				row.Median[u], _ = r.Median(u)
			}
			if ns, ok := row.Median["ns/op"]; ok && r.Lib != ref && r.Lib != bench.Baseline && ns > 0 {
				row.RefPerPeer = refNs / ns
			}
			rows = append(rows, row)
		}
	}
	addOverhead(rows)
	return rows
}

// Overhead units: a library's median over its group's Baseline row's
// (BenchmarkHTTP/none: the handler alone), in groups that have one.
const (
	overNs     = "over-ns/op"
	overAllocs = "over-allocs/op"
)

func addOverhead(rows []Row) {
	base := map[string]Row{}
	for _, r := range rows {
		if r.Lib == bench.Baseline {
			base[r.Group] = r
		}
	}
	for i := range rows {
		b, ok := base[rows[i].Group]
		if !ok || rows[i].Lib == bench.Baseline {
			continue
		}
		for u, over := range map[string]string{"ns/op": overNs, "allocs/op": overAllocs} {
			v, ok1 := rows[i].Median[u]
			bv, ok2 := b.Median[u]
			if ok1 && ok2 {
				rows[i].Median[over] = v - bv
			}
		}
	}
}

// Units is units, then the overhead units when a row has them.
func Units(rows []Row, units []string) []string {
	for _, over := range []string{overNs, overAllocs} {
		for _, r := range rows {
			if _, ok := r.Median[over]; ok {
				units = append(units, over)
				break
			}
		}
	}
	return units
}

// Summary is one group's verdict: the reference against the fastest peer.
type Summary struct {
	Group   string
	Fastest string  // the peer with the lowest median ns/op; "" if none
	PeerNs  float64 // its median ns/op
	RefNs   float64 // the reference's median ns/op; NaN if absent
	Ratio   float64 // RefNs / PeerNs; NaN if either is missing
	// Target is the largest acceptable Ratio; 0 when the group has none.
	Target float64
}

// Verdict is "PASS" or "MISS" against the target, "no target" without one,
// and "n/a" when the ratio is unknown.
func (s Summary) Verdict() string {
	switch {
	case s.Target == 0:
		return "no target"
	case math.IsNaN(s.Ratio):
		return "n/a"
	case s.Ratio <= s.Target:
		return "PASS"
	default:
		return "MISS"
	}
}

// Summarize finds, per group, the fastest library other than ref and ref's
// ratio to it, with the group's target from targets.
func Summarize(rows []Row, ref string, targets map[string]float64) []Summary {
	var out []Summary
	idx := map[string]int{}
	for _, r := range rows {
		i, ok := idx[r.Group]
		if !ok {
			i = len(out)
			idx[r.Group] = i
			out = append(out, Summary{Group: r.Group, PeerNs: math.NaN(), RefNs: math.NaN(), Ratio: math.NaN(), Target: targets[r.Group]})
		}
		s := &out[i]
		ns, ok := r.Median["ns/op"]
		if !ok {
			continue
		}
		if r.Lib == ref {
			s.RefNs = ns
		} else if r.Lib == bench.Baseline || strings.HasPrefix(r.Lib, ref+"-") {
			continue // not a peer: the baseline, or a variant of the reference
		} else if s.Fastest == "" || ns < s.PeerNs {
			s.Fastest, s.PeerNs = r.Lib, ns
		}
	}
	for i := range out {
		if s := &out[i]; s.Fastest != "" && s.PeerNs > 0 {
			s.Ratio = s.RefNs / s.PeerNs
		}
	}
	return out
}

// WriteTable writes the rows as a Markdown table with a column per unit.
func WriteTable(w io.Writer, rows []Row, units []string, ref string) {
	head := []string{"workload", "library", "runs"}
	align := []string{"---", "---", "--:"}
	for _, u := range units {
		head = append(head, u)
		align = append(align, "--:")
	}
	head = append(head, ref+"/peer (<1: "+ref+" faster)", "peer/"+ref+" (>1: "+ref+" faster)")
	align = append(align, "--:", "--:")
	writeRow(w, head)
	writeRow(w, align)
	for _, r := range rows {
		cells := []string{r.Group, r.Lib, strconv.Itoa(r.Runs)}
		for _, u := range units {
			v, ok := r.Median[u]
			if !ok {
				cells = append(cells, "")
				continue
			}
			cells = append(cells, num(u, v))
		}
		if math.IsNaN(r.RefPerPeer) {
			cells = append(cells, "—", "—")
		} else {
			cells = append(cells, fmt.Sprintf("%.2f", r.RefPerPeer), fmt.Sprintf("%.2f", 1/r.RefPerPeer))
		}
		writeRow(w, cells)
	}
}

// WriteSummary writes the per-group verdicts as a Markdown table.
func WriteSummary(w io.Writer, sums []Summary, ref string) {
	writeRow(w, []string{"workload", "fastest peer", "peer ns/op", ref + " ns/op", ref + "/fastest", "target", "verdict"})
	writeRow(w, []string{"---", "---", "--:", "--:", "--:", "--:", "---"})
	for _, s := range sums {
		target := "—"
		if s.Target != 0 {
			target = fmt.Sprintf("≤ %.2f", s.Target)
		}
		ratio := "—"
		if !math.IsNaN(s.Ratio) {
			ratio = fmt.Sprintf("%.2f", s.Ratio)
		}
		peer, peerNs := "—", "—"
		if s.Fastest != "" {
			peer, peerNs = s.Fastest, num("ns/op", s.PeerNs)
		}
		refNs := "—"
		if !math.IsNaN(s.RefNs) {
			refNs = num("ns/op", s.RefNs)
		}
		writeRow(w, []string{s.Group, peer, peerNs, refNs, ratio, target, s.Verdict()})
	}
}

func writeRow(w io.Writer, cells []string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

// num formats a median: ns/op with one decimal, whole numbers as such, other
// values to three significant places.
func num(unit string, v float64) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case unit == "ns/op" || unit == overNs:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}
